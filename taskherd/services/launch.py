"""What a claimed run's agent is given to start with, and what is kept of its work after: its
worktree, its PATH and TASKHERD_* variables (with its run's credential), the session it
continues, its role's memory file. The supervisor starts and watches the agent; this module
knows nothing of a live run but its role and task.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import secrets
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from taskherd.host import cgroups
from taskherd.host.door_path import SOCKET_NAME, door_dir
from taskherd.host.sandbox import (
    BOX_CHANNELS,
    AgentBox,
    Bubblewrap,
    Confinement,
    SandboxUnavailable,
    within,
)
from taskherd.host.service import ENV_FILE
from taskherd.model import Claim, Outcome, Run, RunResult, Task
from taskherd.model.settings import Config, RoleConfig
from taskherd.ops import Queue
from taskherd.ops import memory as memory_ops
from taskherd.policy.prompt import PromptContext
from taskherd.policy.sizes import format_size
from taskherd.runtimes.base import AgentEnv, CommandLineRuntime, Execution, RunFiles, Runtime
from taskherd.runtimes.sessions import shown, valid_session_id
from taskherd.store import Store, StoreError
from taskherd.store.events import socket_dir
from taskherd.store.sql_credentials import run_token

log = logging.getLogger("taskherd.supervisor")


def agent_path(config: Config, role: RoleConfig) -> str:
    """The PATH an agent of `role` gets: its role's or the daemon's, with this installation's
    own bin directory added, since agents call `taskherd heartbeat|done` and the configured
    PATH (rightly minimal under a service manager) may lack it."""
    path = role.path or config.daemon.path
    own_bin = os.path.dirname(sys.executable)
    return path if own_bin in path.split(os.pathsep) else f"{path}{os.pathsep}{own_bin}"


class Launch:
    def __init__(self, config: Config, store: Store, clock: Callable[[], float]):
        self.config = config
        self.store = store
        self.clock = clock
        self.bubblewrap = Bubblewrap()
        self._box_channels_cleared = False  # an earlier daemon's spares' FIFOs, at the first warm
        self._guessed: dict[str, tuple] = {}  # role → the box its spare was last made from, guessed
        self._cgroup_host: cgroups.Host | None = None
        self._ready_caps: dict[cgroups.Caps, list[str]] = {}  # caps → sets made ahead, unused

    @property
    def worktree_root(self) -> Path:
        return self.config.daemon.data_dir / "worktrees"

    def made_worktree(self, role: RoleConfig, task: Task) -> Path | None:
        """The task's worktree if an earlier run made it, told without git (on the loop)."""
        from taskherd.host import worktrees

        assert role.git is not None
        return worktrees.made_worktree(role.git.repo, task.id, self.worktree_root)

    def make_worktree(self, role: RoleConfig, task: Task) -> Path:
        """Make the task's worktree from the base (or find it), within the role's
        merge_timeout: `git worktree add` runs the repository's post-checkout hook, and one
        that hangs is stopped with its process group (GitTimeout). Blocking: called off the
        loop. A git an earlier daemon left working for the task is stopped first."""
        from taskherd.host import worktrees

        git = role.git
        assert git is not None
        running = worktrees.running_record(self.worktree_root, task.id)
        if worktrees.stop_left_running(running):
            log.warning("task %s: stopped the git an earlier daemon left working on it",
                        task.id)
        with worktrees.time_limit(git.merge_timeout, record=running):
            return worktrees.ensure_worktree(git.repo, git.base, task.id, self.worktree_root)

    def in_worktree(self, role: RoleConfig, task: Task, path: Path, now: float) -> RoleConfig:
        """The role as it runs this task: in the task's worktree `path`, recorded (for its
        merge and its removal)."""
        from taskherd.host import worktrees

        git = role.git
        assert git is not None
        self.store.record_worktree(task.id, repo=str(git.repo), base=git.base,
                                   branch=worktrees.branch_for(task.id), path=str(path),
                                   merge_mode=git.merge, pool=git.pool, now=now)
        return dataclasses.replace(role, workdir=str(path))

    def keep_worktree_work(self, role: RoleConfig, task: Task, run: Run) -> None:
        """An agent that edited its worktree without committing: its work is committed on
        the task's branch, where a reviewer sees it and the next attempt continues from it."""
        if role.git is None:
            return
        from taskherd.host import worktrees

        # From the task's id, not the role's workdir: a run adopted after a restart has the
        # role as configured, whose workdir is not the worktree.
        path = worktrees.worktree_path(self.worktree_root, task.id)
        message = f"Uncommitted work of run {run.id} (task {task.id})"
        running = worktrees.running_record(self.worktree_root, task.id)
        try:
            # Called off the loop; a hook that hangs is stopped at the role's merge_timeout,
            # and one an earlier daemon left hanging (killed mid-commit) first.
            worktrees.stop_left_running(running)
            with worktrees.time_limit(role.git.merge_timeout, record=running):
                worktrees.commit_leftovers(path, message, hooks=role.git.hooks,
                                           repo=role.git.repo)
        except worktrees.GitError as error:
            log.warning("run %s: could not commit what it left in %s: %s", run.id, path, error)

    def begin(self, runtime: Runtime, role: RoleConfig, claim: Claim,
              files: RunFiles) -> tuple[Execution, list[Run]]:
        """Start the run however its runtime starts one (a process, or an in-process call);
        with it, the earlier runs of the session it continues, if any."""
        earlier = self.session_runs(role, claim.task)
        variables = self.agent_vars(claim)
        memory = memory_path = None
        if role.memory:
            path = memory_ops.short_term_file(self.config, role.name)
            memory, memory_path = path.read_bytes().decode("utf-8", "replace"), str(path)
            variables["TASKHERD_MEMORY_FILE"] = memory_path
        confinement = None
        if isinstance(runtime, CommandLineRuntime):  # a chat call starts no process
            confinement = self.confinement(role, claim.run.id, (
                files.log, files.prompt, files.prompt.with_name(files.prompt.stem + ".mcp.json")),
                memory_path)
        agent = AgentEnv(agent_path(self.config, role), variables,
                         earlier[-1].session_id if earlier else None,
                         PromptContext(claim.inbox, memory, memory_path), confinement)
        try:
            return runtime.start(role, claim.task, claim.run, files, agent), earlier
        except BaseException:
            if confinement is not None and confinement.cgroups:
                self.release_caps(claim.run.id)  # made for an agent that never started
            raise

    def confinement(self, role: RoleConfig, run_id: int, run_files: tuple[Path, ...],
                    memory_file: str | None = None) -> Confinement | None:
        """How a process of run `run_id` of `role` is started (its agent, or a gate, which
        runs the agent's code): in its sandbox (the argv wrapper, the files it is given open)
        and in the run's cgroups (its caps). None: the role is neither boxed nor capped.
        SandboxUnavailable when the host cannot make the box or enforce a cap: the task
        waits blocked, never run unconfined or uncapped."""
        isolation = role.isolation
        if isolation is None:
            return None
        caps = cgroups.Caps(isolation.memory, isolation.pids, isolation.cpu)
        joins: tuple[str, ...] = ()
        copier: tuple[str, ...] = ()
        if caps.any:
            ready = self._ready_caps.get(caps)
            try:
                group = cgroups.create(self.config.daemon.data_dir, run_id, caps,
                                       self.cgroup_host(), ready.pop() if ready else None)
            except cgroups.CgroupUnavailable as error:
                raise SandboxUnavailable(f"its caps ({caps.describe()}): {error}") from error
            joins, copier = tuple(group.join_files), tuple(group.copier_files)
        if not isolation.confined:
            return Confinement(cgroups=joins, copier_cgroups=copier) if joins else None
        box = self.box(role, run_files, memory_file)
        bwrap = self.bubblewrap.path()
        spare = None
        if role.git is None:  # a git role's box holds its task's worktree: made cold
            spare = functools.partial(box.spare_plan, role.name, bwrap=bwrap,
                                      source=self.config.daemon.log_dir,
                                      cgroup_bases=self.cgroup_bases(caps))
        return Confinement(functools.partial(box.wrap, bwrap=bwrap),
                           tuple(str(path) for path in box.open_files), joins, copier, spare)

    def warm_caps(self, roles: Iterable[RoleConfig]) -> None:
        """Make the cgroups of each capped role's next run ahead (cgroups.prepare), one set
        per caps: its claim then renames them, where making them would be on its way to its
        agent's exec. A set that cannot be made is left to the run, which says why."""
        for role in roles:
            if role.isolation is None:
                continue
            caps = cgroups.Caps(role.isolation.memory, role.isolation.pids, role.isolation.cpu)
            if not caps.any or self._ready_caps.get(caps):
                continue
            try:
                name = cgroups.prepare(self.config.daemon.data_dir, caps, self.cgroup_host())
            except (OSError, cgroups.CgroupUnavailable):
                continue
            self._ready_caps.setdefault(caps, []).append(name)

    def warm_box_spares(self, roles: Iterable[RoleConfig]) -> int:
        """Have a box spare made for each boxed role without git, ahead of its first run; the
        number asked for. What a run's agent will be given is guessed here (its program, its
        role's env); a guess that proves wrong costs that run the cold box, and the spare
        is made again from the run's own. A role whose box cannot be made gets none (its
        run says why)."""
        from taskherd.host import forkserver, procs

        if not self._box_channels_cleared:
            self._box_channels_cleared = True
            forkserver.clear_box_channels(self.config.daemon.data_dir / BOX_CHANNELS)
        roles = list(roles)
        forkserver.keep_box_spares({role.name for role in roles})  # a role taken out: its spare
        asked = 0
        for role in roles:
            isolation = role.isolation
            if (isolation is None or not isolation.confined or role.git is not None
                    or role.runtime == "chat"):
                continue
            program = (role.command[:1] if role.runtime == "command"
                       else [role.binary or role.runtime])
            if not program:
                continue
            memory = (str(memory_ops.short_term_file(self.config, role.name))
                      if role.memory else None)
            env = procs.agent_env(agent_path(self.config, role), role.env, {})
            caps = cgroups.Caps(isolation.memory, isolation.pids, isolation.cpu)
            try:
                plan = self.box(role, (), memory).spare_plan(
                    role.name, list(program), env, self.bubblewrap.path(),
                    self.config.daemon.log_dir, self.cgroup_bases(caps))
            except (SandboxUnavailable, OSError) as error:
                log.info("role %s: no box spare made ahead: %s", role.name, error)
                continue
            # The same guess as before (a reload that left the role's box alone): its spare
            # stays, which a run may have remade from its own plan since.
            if plan is not None and self._guessed.get(role.name) != plan.fingerprint:
                self._guessed[role.name] = plan.fingerprint
                forkserver.want_box_spare(plan)
                asked += 1
        return asked

    def cgroup_bases(self, caps: cgroups.Caps) -> tuple[Path, ...]:
        """Where a box spare's runs with `caps` get their cgroups, bound into the box so that
        its starter joins them itself (cgroup v1: a process that moves itself skips the
        kernel's global lock, whose RCU wait costs 6-30 ms a move). On v2 the box's cgroup
        namespace would refuse the move from inside: the daemon moves it."""
        if not caps.any or self.cgroup_host().version != 1:
            return ()
        host = self.cgroup_host()
        return tuple(host.bases[name] for name in caps.controllers if name in host.bases)

    def cgroup_host(self) -> cgroups.Host:
        """Where this daemon's run cgroups go (read once: the host does not change under
        it)."""
        if self._cgroup_host is None:
            self._cgroup_host = cgroups.host()
        return self._cgroup_host

    def judge_caps(self, role: RoleConfig, run_id: int, result: RunResult) -> RunResult:
        """A run that did not succeed and lost a process to its memory cap ends naming the
        cap (a strike: the agent used the memory); one whose forks met its pids cap says so.
        Read before `release_caps` removes the cgroup."""
        isolation = role.isolation
        if isolation is None or result.outcome is Outcome.SUCCEEDED:
            return result
        host = self.cgroup_host()
        data_dir = self.config.daemon.data_dir
        if isolation.memory is not None and cgroups.memory_killed(data_dir, run_id, host):
            error = f"out of memory: {format_size(isolation.memory)} cap"
            return dataclasses.replace(result, outcome=Outcome.FAILED, error=(
                f"{error} ({result.error})" if result.error else error))
        if isolation.pids is not None and (
                refused := cgroups.pids_refused(data_dir, run_id, host)):
            note = f"its pids cap {isolation.pids} refused {refused} fork(s)"
            return dataclasses.replace(result, error=(
                f"{result.error}; {note}" if result.error else note))
        return result

    def release_caps(self, run_id: int) -> None:
        """Kill what the run left in its cgroups and remove them (whatever its role says now:
        a reload may have taken its caps away since it started)."""
        try:
            cgroups.release(self.config.daemon.data_dir, run_id, self.cgroup_host())
        except OSError as error:
            log.warning("run %s: its cgroup could not be removed: %s", run_id, error)

    def release_stale_caps(self, open_runs: set[int]) -> None:
        """At start: the cgroups of runs that ended while no daemon watched them."""
        try:
            removed = cgroups.release_stale(self.config.daemon.data_dir, open_runs,
                                            self.cgroup_host())
        except OSError as error:
            log.warning("the cgroups of ended runs could not be removed: %s", error)
            return
        if removed:
            log.info("removed the cgroups of %d run(s) that ended while no daemon ran",
                     removed)

    def box(self, role: RoleConfig, run_files: tuple[Path, ...],
            memory_file: str | None) -> AgentBox:
        """The sandbox of one run of `role` (see taskherd.host.sandbox): what it may write, what it
        must not see, and its own door and files."""
        assert role.isolation is not None
        config, data_dir = self.config, self.config.daemon.data_dir.resolve()
        workdir = Path(os.path.abspath(role.workdir or os.getcwd()))
        source = config.source.resolve() if config.source is not None else None
        database = config.daemon.database
        database_files: list[Path] = []
        if not database.startswith(("postgres://", "postgresql://")):
            path = Path(database).resolve()
            database_files = [path, Path(f"{path}-wal"), Path(f"{path}-shm"),
                              Path(f"{path}-journal"), socket_dir(path)]
        git_dir = None
        if role.git is not None:
            git_dir = Path(os.path.abspath(role.git.repo)) / ".git"
        return AgentBox(
            role.isolation, role.runtime, workdir, data_dir, door_dir(data_dir) / SOCKET_NAME,
            run_files=run_files,
            memory_file=Path(memory_file) if memory_file else None,
            config_file=source, env_file=source.parent / ENV_FILE if source else None,
            database_files=tuple(p for p in database_files if not within(p, data_dir)),
            git_dir=git_dir if git_dir is not None and git_dir.is_dir() else None)

    def session_runs(self, role: RoleConfig, task: Task) -> list[Run]:
        """When the role resumes: the earlier runs of `task` in its latest recorded session
        (the one this run continues), oldest first."""
        if not role.resume:
            return []
        runs = [run for run in self.store.runs_of_task(task.id) if run.session_id]
        if runs and valid_session_id(runs[-1].session_id) is None:
            # Recorded before ids were checked where they are read: the retry starts afresh.
            log.warning("task %s: the session of its run %s, %s, is not a session id: its next "
                        "run starts a fresh one", task.id, runs[-1].id, shown(runs[-1].session_id))
            return []
        return [run for run in runs if run.session_id == runs[-1].session_id] if runs else []

    def agent_vars(self, claim: Claim) -> dict[str, str]:
        agent_vars = {
            "TASKHERD_TASK_ID": str(claim.task.id),
            "TASKHERD_RUN_ID": str(claim.run.id),
            "TASKHERD_ROLE": claim.run.role,
            "TASKHERD_HOME": str(self.config.daemon.data_dir),  # where agent.sock is
            # The agent's only key: its own run, while the run is open. Never the database.
            # Minted with the claim (recorded in its transaction) when the dispatcher made it.
            "TASKHERD_RUN_TOKEN": claim.credential or self._issue_credential(claim.run.id),
            # How long its commands wait for a daemon that is away (restarting).
            "TASKHERD_REPORT_WAIT": str(self.config.daemon.agent_report_wait),
        }
        api = self.config.api
        if api.listen:  # the door for an agent that cannot reach the socket (another host)
            host = api.host if ":" not in api.host else f"[{api.host}]"
            scheme = "https" if api.tls_cert else "http"
            agent_vars["TASKHERD_URL"] = f"{scheme}://{host}:{api.port}"
        return agent_vars

    def _issue_credential(self, run_id: int) -> str:
        token = run_token(run_id, secrets.token_urlsafe(32))
        self.store.issue_run_credential(run_id, token, self.clock())
        return token

    def keep_memory(self, role: RoleConfig, now: float) -> None:
        """Bring the role's memory file back within its cap; what overflows moves to
        long-term memory (a failure leaves the file as it is, longer but whole)."""
        try:
            moved = memory_ops.keep_short_term(Queue(self.config, self.store), role.name, now)
        except (OSError, StoreError) as error:
            log.warning("role %s: its memory file could not be trimmed: %s", role.name, error)
            return
        if moved:
            log.info("role %s: %d memory entries moved to long-term memory", role.name, moved)
