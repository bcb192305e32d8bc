"""The daemon: one asyncio loop wiring the dispatcher, supervisor and monitor (DESIGN §3).

Start-up reconciles before anything new starts: agents an earlier daemon left running are
re-adopted (same pid and start time) or settled from their exit files, so a restart, even
after `kill -9`, loses no agent and finishes no task twice.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import signal
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from taskherd import __version__, spares, wake
from taskherd.config import Config, ConfigError, DaemonConfig, load_config, make_private_dir
from taskherd.dispatcher import Dispatcher
from taskherd.monitor import Monitor
from taskherd.scheduler import Scheduler
from taskherd.store import Store, StoreError, open_store, shown
from taskherd.store.postgres import is_postgres_url, listen_for_wakes
from taskherd.supervisor import Supervisor

log = logging.getLogger("taskherd.daemon")
CHECK_INTERVAL = 1.0  # liveness checks (stalls, timeouts, log tailing) per second
CHECKPOINT_INTERVAL = 2.0  # seconds between WAL checkpoints (each copies what is committed)


class DaemonError(Exception):
    pass


class NodeLock:
    """One daemon per database and node name on this host: an flock the kernel drops even on
    kill -9. Beside a SQLite file; in the data dir for a PostgreSQL URL, where the store's
    `hold_node` also keeps a daemon on another host from taking the same node name."""

    def __init__(self, daemon: DaemonConfig):
        self.node = daemon.node
        if is_postgres_url(daemon.database):
            self.path = daemon.data_dir / f"node-{daemon.node}.lock"
        else:
            self.path = Path(f"{daemon.database}.{daemon.node}.lock")
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
                f"{self.node!r} ({holder or 'pid unknown'}); "
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
        self._reload = False
        self._stop = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()
        self._schedule.set()

    def reload(self) -> None:
        """SIGHUP / `taskherd reload`: re-read the config file and sync its jobs."""
        self._reload = True
        self.wake()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        self.lock.acquire()
        try:
            self.store = open_store(self.config.daemon.database,
                                    durability=self.config.daemon.durability,
                                    autocheckpoint=False)
            self.store.hold_node(self.config.daemon.node)
            await self._serve(self.store)
        finally:
            if self.store is not None:
                self.store.close()
            self.lock.release()

    async def _serve(self, store: Store) -> None:
        daemon = self.config.daemon
        supervisor = Supervisor(self.config, store, self.clock, on_change=self.wake)
        dispatcher = Dispatcher(self.config, store, supervisor)
        monitor = Monitor(self.config, store, supervisor)
        self._install_signals()
        listener = await wake.listen(daemon.data_dir, self.wake)
        self._reconcile(store, supervisor)
        store.node_up(daemon.node, host=socket.gethostname(), pid=os.getpid(),
                      version=__version__, lease=daemon.lease, roles=list(self.config.roles),
                      now=self.clock())
        # Spare shims for a burst as large as the node runs at once (capped low: each is an
        # idle interpreter), so even the first spawns need not wait for one to start.
        spares.prewarm(daemon.max_concurrent)
        scheduler = Scheduler(self.config, store, self.clock)
        log.info("jobs synced from the config: %s", _summary(scheduler.sync_config()))
        if not self.config.roles:
            log.warning("no roles are configured: tasks will wait (add [roles.NAME] to the config)")
        log.info("taskherd up: node %s, database %s, max_concurrent %s", daemon.node,
                 shown(daemon.database), daemon.max_concurrent)
        starting = [  # what makes new work start
            asyncio.create_task(self._dispatch_loop(dispatcher), name="dispatcher"),
            asyncio.create_task(self._schedule_loop(scheduler), name="scheduler"),
        ]
        watching = [  # what watches the work already going
            asyncio.create_task(self._every(CHECK_INTERVAL, supervisor.check), name="supervisor"),
            asyncio.create_task(self._every(monitor.settings.interval, monitor.run_once),
                                name="monitor"),
            asyncio.create_task(self._checkpoint_loop(store), name="checkpoints"),
        ]
        if is_postgres_url(daemon.database):  # other nodes' and hosts' nudges
            watching.append(asyncio.create_task(
                listen_for_wakes(daemon.database, self.wake), name="wake-ups"))
        loops = starting + watching
        try:
            stopped = asyncio.create_task(self._stop.wait())
            done, _ = await asyncio.wait([stopped, *loops], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopped and task.exception():
                    raise task.exception()
        finally:
            # Nothing new starts from here, but the watchers keep going while running agents
            # are waited for or killed: a stall or a cancel during on_shutdown = wait counts.
            await _cancel(starting)
            log.info("stopping: %s running agent(s), on_shutdown = %s", len(supervisor.live),
                     daemon.on_shutdown)
            await supervisor.shutdown(daemon.on_shutdown, daemon.shutdown_grace)
            await _cancel(watching)
            try:
                store.node_stopped(daemon.node, self.clock())
            except StoreError as error:  # the database is away: the node will look down
                log.warning("could not record this node's stop: %s", error)
            if listener is not None:
                listener.close()
                wake.socket_path(daemon.data_dir).unlink(missing_ok=True)

    def _reconcile(self, store: Store, supervisor: Supervisor) -> None:
        """Adopt what an earlier daemon of this node left, before starting anything new."""
        now = self.clock()
        adopted = 0
        for run in store.open_runs(self.config.daemon.node):
            try:
                task = store.get_task(run.task_id)
            except StoreError:
                continue
            if supervisor.adopt(run, task, now) is not None:
                adopted += 1
        # Adopted runs are ours again: renew their leases before the monitor looks for expiry.
        store.renew_leases(self.config.daemon.node, now, self.config.daemon.lease)
        if adopted:
            log.info("re-adopted %s agent(s) left by an earlier daemon", adopted)

    async def _dispatch_loop(self, dispatcher: Dispatcher) -> None:
        poll = self.config.daemon.poll_interval
        while True:
            self._wake.clear()
            now = self.clock()
            try:
                dispatcher.run_once(now)
            except StoreError as error:  # e.g. the database is away: the next pass tries again
                log.error("dispatcher: %s", error)
            stagger_end = dispatcher.next_stagger_end(now)
            timeout = poll if stagger_end is None else min(poll, max(stagger_end - now, 0.01))
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    async def _schedule_loop(self, scheduler: Scheduler) -> None:
        """Sleep until the earliest next_run_at or a nudge; never a fixed tick."""
        while True:
            self._schedule.clear()
            if self._reload:
                self._reload = False
                self._reload_jobs(scheduler)
            now = self.clock()
            try:
                counts = scheduler.run_once(now)
                if counts.get("fired"):
                    self._wake.set()  # the dispatcher: new tasks are ready
                    log.info("scheduler: %s", dict(counts))
                wake_at = scheduler.next_wake(now)
            except StoreError as error:
                log.error("scheduler: %s", error)
                wake_at = None
            limit = scheduler.settings.max_sleep
            timeout = limit if wake_at is None else min(max(wake_at - self.clock(), 0.0), limit)
            try:
                await asyncio.wait_for(self._schedule.wait(), timeout)
            except TimeoutError:
                pass

    def _reload_jobs(self, scheduler: Scheduler) -> None:
        if self.config.source is None:
            log.warning("reload: the daemon was started without a config file; nothing to re-read")
            return
        try:
            config = load_config(self.config.source)
            log.info("reloaded %s: %s", config.source, _summary(scheduler.reload(config)))
        except (ConfigError, OSError) as error:
            log.error("reload refused, the jobs stay as they were: %s", error)

    async def _checkpoint_loop(self, store: Store) -> None:
        """Keep the WAL short from a worker thread, so no commit of the loop pays for it."""
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL)
            try:
                await asyncio.to_thread(store.checkpoint)
            except (StoreError, sqlite3.Error) as error:
                log.warning("WAL checkpoint: %s", error)

    async def _every(self, interval: float, service: Callable[[float], object]) -> None:
        while True:
            try:
                service(self.clock())
            except StoreError as error:
                log.error("%s: %s", getattr(service, "__qualname__", service), error)
            await asyncio.sleep(interval)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop)
        loop.add_signal_handler(signal.SIGHUP, self.reload)


async def _cancel(tasks: list[asyncio.Task]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _summary(sync: dict[str, list[str]]) -> str:
    return ", ".join(f"{len(names)} {what}" for what, names in sync.items() if names) or "no jobs"


def run_daemon(config: Config) -> None:
    asyncio.run(Daemon(config).run())
