"""`taskherd doctor`'s checks: will the daemon work when the service manager starts it?

Each check answers for the environment the *service* runs in, not the shell's: the seeds'
launchd fleet crash-looped 3,751 times because `ruby` resolved on the shell's PATH and not on
launchd's. Checks change nothing: the database probe writes inside a transaction it rolls back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from taskherd.config import load_config, make_private_dir
from taskherd.host.service import ENV_FILE
from taskherd.model.settings import Config, ConfigError, RoleConfig
from taskherd.runtimes.claude import CLAUDE_AUTH_ENV
from taskherd.store import StoreError, advice, open_store, shown

OK, WARN, PROBLEM = "ok", "warn", "problem"
GIB = 1 << 30
DISK_WARN = 5 * GIB  # below this (or twice min_free_disk), logs can reach the floor in a day


@dataclass(frozen=True)
class Check:
    status: str  # ok, warn or problem
    what: str
    why: str = ""
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<7} {self.what}"
        if self.why:
            text += f": {self.why}"
        if self.fix:
            text += f" → {self.fix}"
        return text

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def run_checks(config_file: str | None) -> list[Check]:
    """Every check, in order; a config that does not load stops the rest (they need it)."""
    try:
        config = load_config(config_file)
    except ConfigError as error:
        return [Check(PROBLEM, "config", str(error), "fix the key it names, then run doctor again")]
    checks = [_config_ok(config), check_database(config), check_log_dir(config)]
    checks += [check_role(config, role) for role in config.roles.values()]
    checks += [check_claude_auth(config, role) for role in config.roles.values()
               if role.runtime == "claude"]
    checks += [check_worktrees(config, role) for role in config.roles.values() if role.git]
    checks += check_sandboxes(config)
    checks.append(check_caps(config))
    checks += [check_timezone(config), check_disk(config), check_backup(config)]
    api = check_api(config)
    checks += [api] if api else []
    checks += check_endpoints(config)
    deliveries = check_deliveries(config)
    checks += [deliveries] if deliveries else []
    linger = check_linger()
    return checks + ([linger] if linger else [])


def _config_ok(config: Config) -> Check:
    if config.source is None:
        return Check(WARN, "config", "no taskherd.toml found; running on defaults",
                     "`taskherd init`, or pass --config")
    roles = ", ".join(sorted(config.roles)) or "none"
    if not config.roles:
        return Check(WARN, f"config {config.source}", "no roles: tasks will wait forever",
                     "add a [roles.NAME] table")
    return Check(OK, f"config {config.source} (roles: {roles})")


def check_database(config: Config) -> Check:
    database = config.daemon.database
    name = f"database {shown(database)}"
    open_fix, write_fix = advice(database)
    try:
        store = open_store(database, durability=config.daemon.durability)
    except (StoreError, OSError) as error:
        return Check(PROBLEM, name, f"cannot open: {error}", open_fix)
    # (Opening the store creates and migrates a database that does not exist yet, as the
    # daemon would on its first start.)
    try:
        store.probe_write()
        slower = store.probe_claims()
    except (StoreError, OSError) as error:
        return Check(PROBLEM, name, f"not writable: {error}", write_fix)
    finally:
        store.close()
    if slower:
        return Check(WARN, f"{name} opens and is writable", slower)
    return Check(OK, f"{name} opens and is writable")


def check_endpoints(config: Config) -> list[Check]:
    """Runtimes whose endpoint the daemon found down (a chat gateway away): a problem each,
    since when and why; their tasks wait, and a probe resumes them by itself."""
    try:
        with open_store(config.daemon.database, durability=config.daemon.durability) as store:
            down = [c for c in store.all_cooldowns() if c.down_since is not None]
    except (StoreError, OSError):
        return []  # check_database said why
    from taskherd.host.webhook_urls import redacted  # (a base_url may carry a key)

    urls = {role.runtime: redacted(role.base_url) for role in config.roles.values()
            if role.base_url}
    return [Check(PROBLEM, f"runtime {c.runtime}", f"endpoint down since "
                  f"{_local_time(c.down_since)}: {c.reason}",
                  f"start the gateway at {urls.get(c.runtime, 'its base_url')}; its tasks "
                  "wait with no strike and resume once a probe request gets through")
            for c in down if c.down_since is not None]


def _local_time(timestamp: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(timestamp).astimezone().isoformat(sep=" ", timespec="seconds")


def check_deliveries(config: Config) -> Check | None:
    """Deliveries kept as failed, and aliases named by roles that do not exist."""
    try:
        store = open_store(config.daemon.database, durability=config.daemon.durability)
    except (StoreError, OSError):
        return None  # check_database said why
    try:
        counts = store.delivery_counts()
        aliases = {alias.name for alias in store.list_aliases()}
    finally:
        store.close()
    named = {t.removeprefix("@") for role in config.roles.values() for t in role.deliver_to}
    missing = sorted(named - aliases)
    if missing:
        return Check(PROBLEM, "delivery", f"roles name alias(es) that do not exist: "
                     f"{', '.join('@' + name for name in missing)}",
                     "`taskherd alias add NAME CHANNEL TARGET`")
    failed = {alias: n["failed"] for alias, n in counts.items() if n.get("failed")}
    if failed:
        listed = ", ".join(f"@{alias} {n}" for alias, n in sorted(failed.items()))
        return Check(WARN, "delivery", f"deliveries kept as failed: {listed}",
                     "`taskherd alias status` shows their errors")
    if not counts and not aliases:
        return None
    return Check(OK, f"delivery: {len(aliases)} alias(es), no failed deliveries")


def check_log_dir(config: Config) -> Check:
    log_dir = config.daemon.log_dir
    try:
        make_private_dir(log_dir)
        with tempfile.NamedTemporaryFile(dir=log_dir, prefix=".doctor-"):
            pass
    except OSError as error:
        return Check(PROBLEM, f"log dir {log_dir}", f"not writable: {error}",
                     "fix its permissions or set daemon.data_dir")
    return Check(OK, f"log dir {log_dir} is writable")


def role_program(role: RoleConfig) -> str | None:
    """The program a role starts (argv[0]); None for runtimes that start none (chat)."""
    if role.runtime == "command":
        return role.command[0] if role.command else None
    if role.runtime == "claude":
        return role.binary or "claude"
    if role.runtime == "codex":
        return role.binary or "codex"
    return None


def check_role(config: Config, role: RoleConfig) -> Check:
    program = role_program(role)
    if program is None:
        return _check_env_key(role)
    from taskherd.services.launch import agent_path

    path = agent_path(config, role)  # as the service gives it
    found = shutil.which(program, path=path)
    if found is not None:
        return Check(OK, f"role {role.name}: {program} → {found}")
    if os.sep in program:  # a path: the PATH plays no part
        why = "is not executable" if os.path.exists(program) else "does not exist"
        return Check(PROBLEM, f"role {role.name}", f"command {program} {why}",
                     f"fix roles.{role.name}.command, or chmod +x {program}")
    key = f"roles.{role.name}.path" if role.path else "daemon.path"
    in_shell = shutil.which(program)
    why = f"command {program!r} is not on the service PATH {path}"
    if in_shell is None:
        return Check(PROBLEM, f"role {role.name}", why,
                     f"install {program}, or name it by absolute path in roles.{role.name}")
    return Check(PROBLEM, f"role {role.name}", f"{why} (your shell finds {in_shell})",
                 f"add {os.path.dirname(in_shell)} to {key}, or use the absolute path")


def check_sandboxes(config: Config) -> list[Check]:
    """Each role that starts a program: in its sandbox (and whether this host can make it),
    or unconfined, named so."""
    from taskherd.host import sandbox

    checks, problem = [], None
    roles = [role for role in config.roles.values() if role_program(role) is not None]
    if any(role.isolation is not None and role.isolation.confined for role in roles):
        problem = sandbox.probe()[1]
    for role in roles:
        what = f"role {role.name}"
        isolation = role.isolation
        if isolation is None or not isolation.confined:
            checks.append(Check(WARN, f"{what}: unconfined", "its agent can read the database, "
                                "every prompt, other tasks' worktrees and your keys",
                                f'set [roles.{role.name}.isolation] mode = "bwrap"'))
        elif problem is not None:
            checks.append(Check(PROBLEM, f"{what}: no sandbox", f"{problem}; its tasks are "
                                "blocked until one can be made", "then unblock them"))
        elif missing := [str(p) for p in isolation.writable if not p.exists()]:
            checks.append(Check(PROBLEM, f"{what}: no sandbox", "its writable path(s) "
                                f"{', '.join(missing)} do not exist",
                                f"create them, or fix roles.{role.name}.isolation.writable"))
        else:
            checks.append(Check(OK, f"{what}: in a sandbox (bwrap, network "
                                f"{isolation.network})"))
    return checks


def check_api(config: Config) -> Check | None:
    """[api] listen set: whether this installation can serve it."""
    if not config.api.listen:
        return None
    from taskherd.api import missing_packages

    missing = missing_packages()
    if missing:
        return Check(WARN, f"api {config.api.listen}", f"not served: the api extra is not "
                     f"installed ({', '.join(missing)} missing)",
                     "pip install 'taskherd[api]', or remove [api] listen")
    return Check(OK, f"api {config.api.listen}: its packages are installed")


def check_caps(config: Config) -> Check:
    """Which of the memory, pids and cpu caps this host enforces for this daemon, and how;
    a problem only when a role asks for one it cannot."""
    from taskherd.host import cgroups

    where = cgroups.host()
    can = [name for name in cgroups.CONTROLLERS if name in where.bases]
    asked = {role.name: cgroups.Caps(role.isolation.memory, role.isolation.pids,
                                     role.isolation.cpu).controllers
             for role in config.roles.values() if role.isolation is not None}
    refused = {name: [c for c in controllers if c not in can]
               for name, controllers in asked.items()}
    refused = {name: controllers for name, controllers in refused.items() if controllers}
    if refused:
        lacking = sorted({c for controllers in refused.values() for c in controllers})
        roles = ", ".join(f"{name} ({', '.join(c)})" for name, c in refused.items())
        return Check(PROBLEM, "agent caps", f"not enforceable here for role(s) {roles}: their "
                     "tasks are blocked", "; ".join(where.missing[c] for c in lacking))
    # No role asks for what is missing: said, for whoever adds a cap, but no problem.
    why_missing = "; ".join(sorted(set(where.missing.values())))
    if not can:
        return Check(OK, "agent caps: none enforceable on this host", why_missing)
    cannot = [name for name in cgroups.CONTROLLERS if name not in can]
    return Check(OK, f"agent caps: {', '.join(can)} enforced ({where.how()})",
                 f"{', '.join(cannot)} cannot be: {why_missing}" if cannot else "")


def _check_env_key(role: RoleConfig) -> Check:
    key = role.api_key_env
    if key and key not in role.env:
        # The service passes agents an explicit environment: a key exported in your shell
        # profile is not in it.
        return Check(WARN, f"role {role.name}", f"reads ${key}, which the service will not "
                     "inherit from your shell", f"set it in roles.{role.name}.env or the unit")
    return Check(OK, f"role {role.name}: runtime {role.runtime} starts no program")


def env_file(config: Config) -> Path | None:
    """The service's environment file: `taskherd.env` beside the config (systemd reads it)."""
    return config.source.parent / ENV_FILE if config.source is not None else None


def read_env_file(path: Path | None) -> dict[str, str]:
    if path is None or not path.is_file():
        return {}
    found = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and not key.startswith("#"):
            found[key.strip()] = value.strip().strip("'\"")
    return found


def check_claude_auth(config: Config, role: RoleConfig) -> Check:
    """Claude Code under the service needs a key in its environment or the user's login."""
    what = f"role {role.name}: Claude Code sign-in"
    file = env_file(config)
    for source, env in ((f"roles.{role.name}.env", role.env), (str(file), read_env_file(file))):
        key = next((k for k in CLAUDE_AUTH_ENV if env.get(k)), None)
        if key:
            return Check(OK, f"{what}: {key} from {source}")
    login = Path.home() / ".claude" / ".credentials.json"
    if login.is_file():
        return Check(OK, f"{what}: the login in {login}")
    target = file or "an EnvironmentFile of the unit"
    in_shell = next((k for k in CLAUDE_AUTH_ENV if os.environ.get(k)), None)
    if in_shell:
        return Check(WARN, what, f"{in_shell} is set in your shell, which the service does not "
                     "inherit", f"put {in_shell}=… in {target} (mode 0600)")
    return Check(PROBLEM, what, "no API key and no login: every run will fail to authenticate",
                 f"run `claude` once and log in as this user, or put ANTHROPIC_API_KEY=… in "
                 f"{target} (mode 0600)")


def check_worktrees(config: Config, role: RoleConfig) -> Check:
    """The role's repository is a git repository with its base branch, and no worktree of
    taskherd's is left behind: one whose task is gone, merged or removed, or one git no
    longer knows although its folder is still there."""
    from taskherd.host import worktrees

    git = role.git
    if git is None:
        return Check(OK, f"role {role.name}: no git repository to check")
    what = f"role {role.name}: git {git.repo} ({git.base})"
    try:
        worktrees.git(git.repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{git.base}")
        listed = worktrees.task_worktrees(git.repo, config.daemon.data_dir / "worktrees")
    except worktrees.GitError as error:
        return Check(PROBLEM, what, str(error), "point repo at a repository whose base exists")
    try:
        with open_store(config.daemon.database, durability=config.daemon.durability) as store:
            kept = {record.task_id: record for record in store.kept_worktrees()
                    if record.repo == str(git.repo)}
    except StoreError as error:
        return Check(WARN, what, f"could not read the worktrees on record: {error}")
    root = config.daemon.data_dir / "worktrees"
    on_disk = {int(p.name[5:]): p for p in root.glob("task-*") if p.name[5:].isdigit()}
    stray = sorted(str(path) for task_id, path in (listed | on_disk).items()
                   if task_id not in kept)
    if stray:
        return Check(WARN, what, f"{len(stray)} stray worktree(s): {', '.join(stray[:5])}",
                     f"`git -C {git.repo} worktree remove --force PATH` for each, then "
                     f"`git -C {git.repo} worktree prune`")
    return Check(OK, f"{what}: {len(kept)} worktree(s) in use")


def check_linger() -> Check | None:
    """A systemd user service stops at logout unless the user lingers (Linux only)."""
    if sys.platform != "linux" or shutil.which("loginctl") is None:
        return None
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())
    try:
        shown_user = subprocess.run(["loginctl", "show-user", user, "--property=Linger"],
                                    capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if shown_user.returncode != 0:
        return None  # no systemd login manager here (a container): nothing to judge
    if shown_user.stdout.strip() == "Linger=yes":
        return Check(OK, f"user {user} lingers: the service runs without a login session")
    return Check(WARN, f"user {user} does not linger", "the user service stops at logout",
                 f"loginctl enable-linger {user}")


def check_timezone(config: Config) -> Check:
    zone = config.daemon.timezone
    if zone is None:
        return Check(WARN, "timezone", "daemon.timezone is not set; schedules need one "
                     "(never silently UTC)", "set daemon.timezone, e.g. 'Europe/Paris'")
    return Check(OK, f"timezone {zone}")


def check_disk(config: Config, now: float | None = None) -> Check:
    """Free space where the daemon writes (data dir, logs, SQLite database) against its floor,
    [daemon] min_free_disk, below which the node starts nothing; and a pause on its record
    (a disk fault met by a running daemon, which no statvfs may show: a quota)."""
    import time

    from taskherd.host.diskspace import FreeSpace
    from taskherd.policy.faults import disk_short
    from taskherd.policy.sizes import format_size
    from taskherd.services.disk_pause import node_folders

    floor = config.daemon.min_free_disk
    now = time.time() if now is None else now
    readings = FreeSpace().readings(node_folders(config.daemon), now)
    if not readings:
        return Check(PROBLEM, f"disk at {config.daemon.data_dir}", "cannot be read",
                     "check the data dir")
    short = disk_short(readings, floor)
    if short is not None:
        return Check(PROBLEM, "disk", f"{short}: the daemon starts no agent until there is "
                     "room", "free space, move daemon.data_dir, or lower daemon.min_free_disk")
    paused = _node_pause(config, now)
    if paused is not None:
        return Check(PROBLEM, "disk", paused, "free space; the node resumes by itself")
    lowest = min(readings, key=lambda reading: reading.free)
    text = (f"{format_size(lowest.free)} free at {lowest.path} (the daemon starts nothing "
            f"below min_free_disk {format_size(floor)})")
    if lowest.free < max(DISK_WARN, 2 * floor):
        return Check(WARN, "disk", text, "free some space before logs fill it")
    return Check(OK, f"disk: {text}")


def _node_pause(config: Config, now: float) -> str | None:
    """The pause a running daemon of this node put on its record, if any."""
    try:
        with open_store(config.daemon.database, durability=config.daemon.durability) as store:
            nodes = {node.name: node for node in store.list_nodes()}
    except (StoreError, OSError):
        return None  # check_database says why
    node = nodes.get(config.daemon.node)
    if node is None or node.paused_at is None or node.status(now) != "up":
        return None
    return f"node {node.name} starts nothing new: {node.paused_reason}"


def check_backup(config: Config, now: float | None = None) -> Check:
    """Backups configured, their tools present, the target answering, the last one recent."""
    import time

    from taskherd.backups.state import read_state
    from taskherd.store.urls import is_postgres_url

    settings = config.backup
    if settings.target is None:
        return Check(WARN, "backups", "none configured: losing this machine loses the queue",
                     "set [backup] target to a folder on another disk or s3://bucket/prefix")
    what = f"backups to {settings.target}"
    if is_postgres_url(config.daemon.database) and shutil.which("pg_dump") is None:
        return Check(PROBLEM, what, "pg_dump is not on PATH: PostgreSQL is backed up with it",
                     "install PostgreSQL's client tools (apt-get install postgresql-client)")
    state = read_state(config.daemon.data_dir)
    if state.failing:
        failure = state.last_failure or {}
        return Check(PROBLEM, what, f"{state.failures_in_a_row} attempt(s) in a row failed, "
                     f"the last: {failure.get('error')} (older backups are kept)",
                     "fix the target or its credentials; the daemon retries with backoff")
    try:
        from taskherd.backups.targets import BackupError, open_target

        held = {stored.key for stored in open_target(settings).list()}
    except BackupError as error:
        return Check(PROBLEM, what, str(error), "check the target, its endpoint and the "
                     "credentials in the daemon's environment (AWS_* or a profile)")
    now = time.time() if now is None else now
    last = state.last_snapshot
    if last is None:
        return Check(WARN, what, "no snapshot yet", "start the daemon, or `taskherd backup "
                     "snapshot`")
    if last["key"] not in held:
        return Check(WARN, what, f"the latest snapshot recorded, {last['key']}, is no longer "
                     "in the target", "`taskherd backup list` shows what it holds; the daemon "
                     "takes a new snapshot every snapshot_every")
    age = now - last["taken_at"]
    if age > 3 * settings.snapshot_every:
        return Check(WARN, what, f"the latest snapshot is {age / 60:.0f} min old (one is due "
                     f"every {settings.snapshot_every / 60:g} min)", "is the daemon running?")
    return Check(OK, f"{what}: latest snapshot {last['key']}, {age / 60:.0f} min ago")
