"""A throwaway PostgreSQL server for tests: one per test session (per xdist worker), one fresh
empty database per test.

tests/conftest.py loads it as a plugin, so any test may ask for `pg_server` or `pg_url`.

The server lives in a temp dir, listens on a unix socket in that dir and on 127.0.0.1 only, on
a free port, with durability off (fsync, synchronous_commit, full_page_writes): the tests check
SQL and concurrency, not crash safety, and an fsync per commit would dominate their time.
`start_server(durable=True)` keeps them on, for bench/postgres.py, which measures what they cost.
PostgreSQL refuses to run as root, so under root (CI) the server runs as an unprivileged user.
Without PostgreSQL's server binaries the tests skip, except under CI, where they fail: the
PostgreSQL store must be tested there.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
SUPERUSER = "postgres"
# Tried in this order when the tests run as root; both exist on Debian with PostgreSQL installed
# ("nobody" everywhere), and neither needs a home directory or a login shell.
UNPRIVILEGED_USERS = ("postgres", "nobody")
START_TIMEOUT_S = 60
# A port found free can be taken by someone else before the server binds it (another xdist
# worker doing the same): start again on a new port this many times.
START_ATTEMPTS = 3
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "log_min_messages": "warning",
}
# start_server(durable=True): PostgreSQL's own defaults, an fsync per commit (the benches).
DURABLE_SETTINGS = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


def server_bin_dir() -> Path | None:
    """The folder holding initdb, pg_ctl and postgres: PATH first, then Debian's layout."""
    candidates = []
    initdb = shutil.which("initdb")
    if initdb:
        # pg_ctl starts the `postgres` beside itself: resolve links to the real install.
        candidates.append(Path(initdb).resolve().parent)
    # Debian installs the server outside PATH (only the client wrappers are linked there);
    # the newest version first.
    candidates += sorted(
        (Path(folder) for folder in glob.glob("/usr/lib/postgresql/*/bin")),
        key=lambda folder: int(folder.parent.name) if folder.parent.name.isdigit() else 0,
        reverse=True,
    )
    for folder in candidates:
        if all((folder / name).is_file() for name in SERVER_BINARIES):
            return folder
    return None


def unavailable(reason: str) -> None:
    """Skip on a developer's machine; fail under CI, where the PostgreSQL store must be tested."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the PostgreSQL tests must run here, not skip)")
    pytest.skip(reason)


@dataclass
class PgServer:
    """A running server and what a test needs to reach it."""

    bin_dir: Path
    base_dir: Path
    port: int
    run_as: tuple[int, int] | None  # (uid, gid) when started by root, else None
    durable: bool = False  # fsync and synchronous_commit on (DURABLE_SETTINGS)
    _database_numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "socket"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "server.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; its name."""
        # Each xdist worker has its own server, so a counter per server is unique enough.
        name = f"taskherd_test_{next(self._database_numbers)}"
        self.admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        # FORCE: a connection a test leaked must not keep its database alive.
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def admin(self, sql: str) -> None:
        """Run one statement outside a transaction (CREATE/DROP DATABASE refuse to run inside)."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)

    def url_without_temporary(self, url: str) -> str:
        """`url`'s database, as a role that may read and write taskherd's tables (migrated
        already) but not create temporary objects, as a locked-down production role may be:
        its URL."""
        import psycopg

        database = url.rsplit("/", 1)[1]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DO $$ BEGIN CREATE ROLE taskherd_no_temp LOGIN;"
                         " EXCEPTION WHEN duplicate_object THEN NULL; END $$")
            conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public"
                         " TO taskherd_no_temp")
            conn.execute("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO taskherd_no_temp")
            conn.execute(f'REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
        return f"postgresql://taskherd_no_temp@127.0.0.1:{self.port}/{database}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


def _run(server: PgServer, *command: str | Path) -> subprocess.CompletedProcess[str]:
    """Run a server binary, as the unprivileged user when we are root."""
    extra: dict[str, Any] = {}
    if server.run_as is not None:
        uid, gid = server.run_as
        extra = {"user": uid, "group": gid, "extra_groups": []}
    return subprocess.run(
        [str(part) for part in command],
        check=False,  # the callers read returncode: a failed start is retried on another port
        cwd=server.base_dir,  # initdb warns when it cannot read the cwd (root's home)
        env=_server_env(),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S + 30,
        **extra,
    )


def _server_env() -> dict[str, str]:
    # PG* variables of the caller (PGDATA, PGPORT, PGHOST…) must not steer the test server.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _unprivileged_user() -> tuple[int, int]:
    for name in UNPRIVILEGED_USERS:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return entry.pw_uid, entry.pw_gid
    raise RuntimeError(
        f"running as root and none of the users {UNPRIVILEGED_USERS} exists to run PostgreSQL"
        " (it refuses to run as root): create one, e.g. `useradd --system postgres`"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _init_cluster(server: PgServer) -> None:
    done = _run(
        server, server.bin_dir / "initdb", "--pgdata", server.data_dir,
        "--username", SUPERUSER, "--auth", "trust", "--encoding", "UTF8", "--no-locale",
        "--no-sync",  # durability is not under test; this saves seconds per session
    )
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _write_settings(server: PgServer) -> None:
    settings = SETTINGS | (DURABLE_SETTINGS if server.durable else {}) | {
        "port": str(server.port),
        "unix_socket_directories": f"'{server.socket_dir}'",
    }
    # postgresql.conf: the last setting of a name wins, so appending overrides initdb's values.
    with open(server.data_dir / "postgresql.conf", "a") as conf:
        conf.write("\n# taskherd tests\n")
        conf.writelines(f"{name} = {value}\n" for name, value in settings.items())


def _start(server: PgServer) -> bool:
    """Start and wait until it accepts connections (pg_ctl -w polls with a deadline)."""
    done = _run(
        server, server.bin_dir / "pg_ctl", "start", "--pgdata", server.data_dir,
        "--log", server.log_file, "--wait", "--timeout", str(START_TIMEOUT_S),
    )
    return done.returncode == 0


def _stop(server: PgServer) -> None:
    # immediate: no shutdown checkpoint; the cluster is deleted right after.
    _run(server, server.bin_dir / "pg_ctl", "stop", "--pgdata", server.data_dir,
         "--mode", "immediate", "--wait", "--timeout", str(START_TIMEOUT_S))


def start_server(*, durable: bool = False) -> PgServer:
    """Create a cluster in a new temp dir and start it; the caller must call stop_server.

    durable: keep fsync, synchronous_commit and full_page_writes on (a bench of durable
    commits); the tests' default turns them off.
    """
    bin_dir = server_bin_dir()
    if bin_dir is None:
        unavailable(
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH or under"
            " /usr/lib/postgresql/*/bin: install them with `apt-get install postgresql`"
        )
    run_as = _unprivileged_user() if os.geteuid() == 0 else None
    # Under /tmp, not pytest's tmp_path: root's pytest dirs are 0700, closed to the server's
    # user, and a unix socket path must stay under ~100 bytes.
    base_dir = Path(tempfile.mkdtemp(prefix="taskherd-pg-"))
    server = PgServer(bin_dir=bin_dir, base_dir=base_dir, port=0, run_as=run_as,
                      durable=durable)
    server.socket_dir.mkdir()
    if run_as is not None:
        for path in (base_dir, server.socket_dir):
            os.chown(path, *run_as)
        # 0755: root's client (and anyone's) can reach the socket; the data dir stays 0700.
        base_dir.chmod(0o755)
    try:
        _init_cluster(server)
        for _ in range(START_ATTEMPTS):
            server.port = _free_port()
            _write_settings(server)
            if _start(server):
                return server
        raise RuntimeError(f"PostgreSQL did not start:\n{server.log_tail()}")
    except BaseException:
        stop_server(server)
        raise


def stop_server(server: PgServer) -> None:
    try:
        if (server.data_dir / "postmaster.pid").exists():
            _stop(server)
    finally:
        shutil.rmtree(server.base_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the session (for each xdist worker), stopped at its end."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed: pip install -e '.[postgres]'")
    server = start_server()
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A new empty database for this test, dropped after it: its connection URL."""
    name = pg_server.create_database()
    try:
        yield pg_server.url(name)
    finally:
        pg_server.drop_database(name)
