"""The daemon: one asyncio loop wiring the dispatcher, supervisor and monitor.

Start-up reconciles before anything new starts: agents an earlier daemon left running are
re-adopted (same pid and start time) or settled from their exit files, so a restart, even
after `kill -9`, loses no agent and finishes no task twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from taskherd import __version__
from taskherd.agent.door import AgentDoor
from taskherd.backups.service import Backups
from taskherd.config import check_reloadable, load_config, make_private_dir
from taskherd.host import forkserver, procs
from taskherd.model import LEASED_STATES, Event, EventKind, TaskState
from taskherd.model.settings import Config, ConfigError, DaemonConfig
from taskherd.ops import Queue
from taskherd.policy.chains import workflow_of
from taskherd.policy.jobs import JobError
from taskherd.services.chart_samples import ChartSampler
from taskherd.services.checkpoints import Checkpoints
from taskherd.services.delivery import Deliverer, DeliverySettings
from taskherd.services.dispatcher import Dispatcher
from taskherd.services.monitor import Monitor
from taskherd.services.planner import Planner
from taskherd.services.runner import ServiceLoop, run_service
from taskherd.services.scheduler import Scheduler
from taskherd.services.supervisor import KILL_GRACE, Supervisor
from taskherd.services.text_index import TextIndexer
from taskherd.services.worktrees import Merger, WorktreeJanitor
from taskherd.store import Store, StoreError, node_lock_path, open_store, shown

if TYPE_CHECKING:
    from taskherd.api.process import ApiProcess

log = logging.getLogger("taskherd.daemon")
FORK_SERVER_WAIT = 2.0  # seconds the first dispatch waits for the fork server at most


class DaemonError(Exception):
    pass


class Hearer(Protocol):
    def hear(self, event: Event) -> None: ...


def _holder_words(recorded: str) -> str:
    """The lock's record (`{"pid", "started_at"}`) as a person reads it."""
    try:
        holder = json.loads(recorded)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder["started_at"]))
        return f"pid {int(holder['pid'])}, up since {started}"
    except (ValueError, KeyError, TypeError):
        return "pid unknown"


class NodeLock:
    """One daemon per database and node name on this host: an flock the kernel drops even on
    kill -9. Beside a SQLite file; in the data dir for a PostgreSQL URL, where the store's
    `hold_node` also keeps a daemon on another host from taking the same node name."""

    def __init__(self, daemon: DaemonConfig):
        self.node = daemon.node
        self.path = node_lock_path(daemon.database, daemon.data_dir, daemon.node)
        self._fd: int | None = None

    def acquire(self) -> None:
        make_private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise DaemonError(
                f"another taskherd daemon already runs for this database as node "
                f"{self.node!r} ({_holder_words(holder)}); "
                "stop it first (`taskherd stop`) or give this one another [daemon] node"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "started_at": time.time()}).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def holder_pid(self) -> int | None:
        """The pid of the daemon holding the lock, or None if nobody holds it."""
        if not self.path.exists():
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return int(json.loads(os.read(fd, 200) or b"{}").get("pid"))
            except (ValueError, TypeError):
                return None
        finally:
            os.close(fd)
        return None


class Daemon:
    def __init__(self, config: Config, clock: Callable[[], float] = time.time):
        self.config = config
        self.clock = clock
        self.lock = NodeLock(config.daemon)
        self.store: Store | None = None
        self._wake = asyncio.Event()
        self._schedule = asyncio.Event()  # the scheduler's own: job changes, reloads, task ends
        self._reload = asyncio.Event()
        self._deliver = asyncio.Event()  # the deliverer's own: some were queued or retried
        self._merge = asyncio.Event()  # the merger's own: a task is waiting in `merging`
        self._loop: asyncio.AbstractEventLoop | None = None  # set by _serve
        self._stop = asyncio.Event()
        self.services: dict[str, ServiceLoop] = {}

    def wake(self) -> None:
        # Not the deliverer: it wakes for the events that queue deliveries (DELIVERY_QUEUED),
        # not for every change. Its pass runs in a thread and reads the store under the
        # store's lock, beside the dispatcher's claim of the task that woke them both.
        self._wake.set()
        self._schedule.set()

    def reload(self) -> None:
        """SIGHUP / `taskherd reload`: re-read the config file and give it to every service."""
        self._reload.set()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        self.lock.acquire()
        try:
            self.store = open_store(self.config.daemon.database,
                                    durability=self.config.daemon.durability,
                                    autocheckpoint=False, workflow=workflow_of(self.config))
            self.store.hold_node(self.config.daemon.node)
            await self._serve(self.store)
        finally:
            if self.store is not None:
                self.store.close()
            self.lock.release()

    async def _serve(self, store: Store) -> None:
        daemon = self.config.daemon
        self._loop = asyncio.get_running_loop()
        # One fork server forks every run's shim: any burst finds a shim at once, and a
        # thousand running shims share one interpreter's pages. Started first: its start-up
        # goes on beside the daemon's own, not on the way to the first runs.
        forkserver.start()
        supervisor = Supervisor(self.config, store, self.clock, on_change=self.wake)
        self._install_signals()
        api = await self._start_api()  # first: a port taken stops the start before anything runs
        # Listening before anything is looked at: what commits from here on wakes the loops.
        events = await store.listen().__aenter__()
        door = AgentDoor(Queue(self.config, store), self.clock, on_change=self.wake)
        await door.start(daemon.data_dir)  # agents act on their runs here, not in the database
        # Up before adopting: a node declared down meanwhile is seen alive again from here on,
        # so no other node rescues the runs this one is about to adopt.
        node = store.node_up(daemon.node, host=socket.gethostname(), pid=os.getpid(),
                             version=__version__, lease=daemon.lease,
                             roles=self.config.runnable_roles, tags=daemon.tags,
                             timeout=daemon.node_timeout, now=self.clock())
        if node.was_down_at is not None:
            self._stop_rescued_agents(store, node.was_down_at)
        self._reconcile(store, supervisor)
        # made once it is up, for the roles this node runs
        runnable = [self.config.roles[name] for name in self.config.runnable_roles]
        supervisor.launch.warm_box_spares(runnable)
        supervisor.launch.warm_caps(runnable)
        scheduler = Scheduler(self.config, store, self.clock)
        log.info("jobs synced from the config: %s", _summary(scheduler.sync_config()))
        if not self.config.roles:
            log.warning("no roles are configured: tasks will wait (add [roles.NAME] to the config)")
        log.info("taskherd up: node %s, database %s, max_concurrent %s", daemon.node,
                 shown(daemon.database), daemon.max_concurrent)
        self.services = self._services(store, supervisor, scheduler)
        # The runs claimed first (a backlog at a restart) get forked shims, not cold ones
        # (an interpreter each, ~10 ms of CPU and ~3 MB for the run's whole life); a server
        # that cannot start (out of processes) holds nothing up past the wait.
        await asyncio.to_thread(forkserver.wait_until_up, FORK_SERVER_WAIT)
        starting = [self._start(name) for name in ("dispatcher", "scheduler")]
        watching = [self._start(name) for name in ("supervisor", "monitor", "planner",
                                                   "checkpoints", "backups", "delivery",
                                                   "worktrees", "merges", "charts",
                                                   "text_index")]
        watching.append(asyncio.create_task(self._reload_on_request(scheduler), name="reload"))
        dispatcher = self.services["dispatcher"].service
        assert isinstance(dispatcher, Dispatcher)
        watching.append(asyncio.create_task(self._wake_on_events(events, supervisor, dispatcher),
                                            name="events"))
        loops = starting + watching
        try:
            stopped = asyncio.create_task(self._stop.wait())
            done, _ = await asyncio.wait([stopped, *loops], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopped and (error := task.exception()) is not None:
                    raise error
        finally:
            # Nothing new starts from here, but the watchers keep going while running agents
            # are waited for or killed: a stall or a cancel during on_shutdown = wait counts.
            await _cancel(starting)
            daemon = self.config.daemon  # as last reloaded
            log.info("stopping: %s running agent(s), on_shutdown = %s", len(supervisor.view),
                     daemon.on_shutdown)
            await supervisor.shutdown(daemon.on_shutdown, daemon.shutdown_grace)
            for loop in self.services.values():
                if loop.stop is not None:
                    loop.stop()
            await _cancel(watching)
            try:
                store.node_stopped(daemon.node, self.clock())
            except StoreError as error:  # the database is away: the node will look down
                log.warning("could not record this node's stop: %s", error)
            await door.close()
            if api is not None:
                await api.stop()
            await events.aclose()
            await asyncio.to_thread(_final_checkpoint, store)
            log.info("stopped")

    async def _start_api(self) -> ApiProcess | None:
        """The HTTP API and dashboard, when [api] listen is set: a process of its own."""
        if not self.config.api.listen:
            return None
        from taskherd.api import missing_packages

        missing = missing_packages()
        if missing:
            # The starter config sets `listen`: a fleet installed without the extra still
            # runs its agents, and says what it is missing.
            log.warning("[api] listen is set, but the API's packages are missing (%s): the "
                        "API and dashboard are not served; pip install 'taskherd[api]'",
                        ", ".join(missing))
            return None
        from taskherd.api.process import ApiProcess

        server = ApiProcess(self.config, self.service_counts)
        try:
            await server.start()
        except OSError as error:
            raise DaemonError(str(error)) from None
        return server

    def service_counts(self) -> dict[str, dict[str, object]]:
        """What each service did since start and the store errors it met (for /metrics)."""
        return {name: {"counts": dict(loop.counts), "errors": loop.errors}
                for name, loop in self.services.items()}

    async def _wake_on_events(self, events: AsyncIterator[Event], *hearers: Hearer) -> None:
        """Any committed change, by this node, the CLI, an agent or another node, may give
        the loops work: they look now rather than at their next poll. The `hearers` hear of
        it first: the supervisor of cancels and runs ended elsewhere before its next sweep,
        the dispatcher of cooldowns set or lifted."""
        async for event in events:
            for hearer in hearers:
                hearer.hear(event)
            if event.kind is EventKind.TASK_CHANGED and event.state == TaskState.MERGING:
                self._merge.set()
            if event.kind is EventKind.DELIVERY_QUEUED:
                self._deliver.set()
            if _may_give_work(event):
                self.wake()

    def _reconcile(self, store: Store, supervisor: Supervisor) -> None:
        """Adopt what an earlier daemon of this node left, before starting anything new."""
        now = self.clock()
        adopted = 0
        for run in store.open_runs(self.config.daemon.node):
            try:
                task = store.get_task(run.task_id)
            except StoreError:
                continue
            if supervisor.adopt(run, task, now, at_start=True) is not None:
                adopted += 1
        supervisor.launch.release_stale_caps(
            {run.id for run in store.open_runs(self.config.daemon.node)})
        # Adopted runs are ours again: renew their leases before the monitor looks for expiry.
        store.renew_leases(self.config.daemon.node, now, self.config.daemon.lease)
        if adopted:
            log.info("re-adopted %s agent(s) left by an earlier daemon", adopted)

    def _stop_rescued_agents(self, store: Store, down_at: float) -> None:
        """This node was declared down while it was away and its runs were rescued: their
        tasks belong to other nodes now. Agents of those runs still alive here (the daemon
        died, not the machine) are stopped, never adopted: one task, one agent."""
        for run in store.lost_runs_of_node(self.config.daemon.node, since=down_at):
            pid, started_at, log_path = run.pid, run.pid_started_at, run.log_path
            if pid is None:  # started, perhaps, by a daemon that died before recording it
                log_path = str(self.config.daemon.log_dir / f"run-{run.id}.log")
                found = procs.unrecorded_spawn(Path(log_path))
                if found is None:
                    continue
                pid, started_at = found
            handle = procs.adopt(pid, started_at or 0.0, Path(log_path or os.devnull))
            if handle is not None and handle.is_alive():
                log.warning("run %s was rescued while this node was down: stopping its agent "
                            "(pid %s)", run.id, pid)
                procs.terminate(handle, grace=KILL_GRACE)

    def _services(self, store: Store, supervisor: Supervisor,
                  scheduler: Scheduler) -> dict[str, ServiceLoop]:
        """Every service, sharing the store and the read-only view of live runs."""
        dispatcher = Dispatcher(self.config, store, supervisor.view, supervisor.start,
                                disk=supervisor.disk)
        supervisor.hand_freed_slots_to(dispatcher)
        monitor = Monitor(self.config, store, supervisor.view)
        checkpoints = Checkpoints(store)
        backups = Backups(self.config, store, after_snapshot=checkpoints.request_truncate)
        planner = Planner(self.config, store)
        janitor = WorktreeJanitor(self.config, store)
        merger = Merger(self.config, store, self.clock, on_ended=self._merge_ended)
        sampler = ChartSampler(self.config, store)
        # The scheduler takes a reloaded config first and alone (`_apply_reload`): it may
        # refuse it.
        return {loop.name: loop for loop in (
            ServiceLoop("dispatcher", dispatcher, wake=self._wake, reload=dispatcher.reload),
            ServiceLoop("scheduler", scheduler, wake=self._schedule,
                        max_sleep=scheduler.settings.max_sleep, on_counts=self._fired),
            ServiceLoop("supervisor", supervisor, reload=supervisor.reload),
            ServiceLoop("monitor", monitor, reload=monitor.reload),
            # In a thread: its first roll-up after an upgrade sums a week of history.
            ServiceLoop("charts", sampler, in_thread=True, reload=sampler.reload),
            ServiceLoop("planner", planner, on_counts=self._planned, reload=planner.reload),
            ServiceLoop("checkpoints", checkpoints, in_thread=True),
            # In a thread: each chunk writes the index's pages (the search reads what waits).
            ServiceLoop("text_index", TextIndexer(store), in_thread=True),
            ServiceLoop("backups", backups, in_thread=True, reload=backups.reload,
                        stop=backups.stop),
            ServiceLoop("delivery", Deliverer(store, self.clock,
                                              DeliverySettings.of(self.config.delivery)),
                        wake=self._deliver,
                        in_thread=True, max_sleep=DeliverySettings.interval),
            # In a thread: removing a large checkout takes seconds of disk work.
            ServiceLoop("worktrees", janitor, in_thread=True, reload=janitor.reload),
            # Each merge runs in a thread of its own; the pass only reads and starts them.
            ServiceLoop("merges", merger, wake=self._merge, in_thread=True,
                        reload=merger.reload),
        )}

    def _merge_ended(self) -> None:
        """From a merge's thread: the merger looks again (a merge may wait for that pool)."""
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: the daemon is stopping
            self._loop.call_soon_threadsafe(self._merge.set)

    def _start(self, name: str) -> asyncio.Task:
        return asyncio.create_task(run_service(self.services[name], self.clock), name=name)

    def _planned(self, counts: Mapping[str, int]) -> None:
        if counts.get("planned"):
            self._wake.set()  # the dispatcher: the planner's task is ready

    def _fired(self, counts: Mapping[str, int]) -> None:
        if counts.get("fired"):
            self._wake.set()  # the dispatcher: new tasks are ready
            log.info("scheduler: %s", dict(counts))

    async def _reload_on_request(self, scheduler: Scheduler) -> None:
        while True:
            await self._reload.wait()
            self._reload.clear()
            self._apply_reload(scheduler)
            self.wake()

    def _apply_reload(self, scheduler: Scheduler) -> None:
        """Re-read the config file and give it to every service, or keep the old one whole."""
        if self.config.source is None:
            log.warning("reload: the daemon was started without a config file; nothing to re-read")
            return
        try:
            config = load_config(self.config.source)
            check_reloadable(self.config, config)
            synced = scheduler.reload(config)  # parses and syncs the jobs first: may refuse
        except (ConfigError, JobError, OSError) as error:
            log.error("reload refused, the config stays as it was: %s", error)
            return
        self.config = config
        if self.store is not None:
            self.store.workflow = workflow_of(config)
        for loop in self.services.values():
            if loop.reload is not None:
                loop.reload(config)
        log.info("reloaded %s: %s", config.source, _summary(synced))

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop)
        loop.add_signal_handler(signal.SIGHUP, self.reload)


def _final_checkpoint(store: Store, attempts: int = 5) -> None:
    """On a clean stop: the whole WAL into the database file and the WAL emptied, so the file
    alone is the database (copied, backed up or moved as it is). A reader still holding the
    log is waited for a few seconds, then left: SQLite replays the WAL at the next open."""
    for attempt in range(1, attempts + 1):
        try:
            if store.checkpoint(truncate=True, timeout=1.0):
                return
        except StoreError as error:
            log.warning("WAL checkpoint at shutdown: %s", error)
            return
        log.warning("WAL checkpoint at shutdown: a reader holds the log (try %s of %s)",
                    attempt, attempts)
    log.warning("the WAL was left for the next start to replay")


def _may_give_work(event: Event) -> bool:
    """Claims and starts (this node's or another's) only take work: every node looking
    again for each of them would be passes for nothing."""
    if event.kind is EventKind.RUN_STARTED:
        return False
    return not (event.kind is EventKind.TASK_CHANGED and event.state in LEASED_STATES)


async def _cancel(tasks: list[asyncio.Task]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _summary(sync: dict[str, list[str]]) -> str:
    return ", ".join(f"{len(names)} {what}" for what, names in sync.items() if names) or "no jobs"


def run_daemon(config: Config) -> None:
    asyncio.run(Daemon(config).run())
