"""How long an upload to an S3 server that froze takes to fail, against its timeouts.

    python bench/backup_frozen.py                        # read_timeout 4s (quick)
    python bench/backup_frozen.py --read-timeout 60s     # the default: about two minutes

moto's server (tests/s3.py) behind a relay that freezes: connections are accepted and
nothing comes back, as from a hung server or a dead middlebox. One snapshot is stored while
the server answers, then one is taken while it is frozen, by the backup service in this
process. Prints the seconds until the attempt failed and their ratio to the floor a request
cannot beat with one retry: two attempts of the read timeout each. Each attempt also waits a
second for the `Expect: 100-continue` the server never answers (so about 1.25x with 4s, 1.02x
with 60s). Before [backup] read_timeout, botocore's four attempts of 61 s took 270 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import os
import tempfile
import time

from taskherd.backups.service import Backups, BackupSettings
from taskherd.config import parse_config
from taskherd.model import NewTask
from taskherd.store.sqlite import SQLiteStore
from tests.s3 import CREDENTIALS, Relay, S3Server

T0 = 1_795_000_000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-timeout", default="4s")
    parser.add_argument("--connect-timeout", default="10s")
    args = parser.parse_args()
    os.environ.update(CREDENTIALS)
    with tempfile.TemporaryDirectory(prefix="bench-frozen-") as folder:
        root = Path(folder)
        server = S3Server(root / "moto.log")
        server.start()
        relay = Relay(server.port)
        try:
            server.bucket("frozen")
            config = parse_config({
                "daemon": {"database": "q.db", "data_dir": "data"},
                "backup": {"target": "s3://frozen/fleet", "endpoint_url": relay.url,
                           "region": "us-east-1", "read_timeout": args.read_timeout,
                           "connect_timeout": args.connect_timeout}}, base_dir=root)
            with SQLiteStore(config.daemon.database) as store:
                store.enqueue(NewTask(role="coder", title="kept"), T0)
                service = Backups(config, store, BackupSettings(isolated=False))
                assert service.take(["snapshots"], T0)["snapshots"] == 1
                relay.freeze()
                started = time.monotonic()
                counts = service.take(["snapshots"], T0 + 300)
                took = time.monotonic() - started
        finally:
            relay.thaw()
            relay.go_away()
            server.kill()
    floor = 2 * config.backup.read_timeout
    print(f"frozen server, read_timeout {config.backup.read_timeout:g}s: the upload failed "
          f"({counts['upload_failures']} failure) after {took:.1f}s; floor (2 attempts x "
          f"read_timeout) {floor:g}s, ratio {took / floor:.2f}")
    return 0 if counts["upload_failures"] == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
