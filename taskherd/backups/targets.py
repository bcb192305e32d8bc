"""Where backups are kept: a local folder, or an S3-compatible bucket (AWS, MinIO, …).

Both keep each object with its SHA-256 (the bytes as stored, after compression), which a
restore checks before it trusts a byte. Uploads stream from a file on disk: the database is
never read into memory whole. boto3 is imported only when an s3:// target is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from taskherd.config import make_private_dir
from taskherd.model.settings import S3_SCHEME, BackupConfig

CHUNK = 1 << 20
CHECKSUM_SUFFIX = ".sha256"
PARTIAL_SUFFIX = ".partial"
# Multipart uploads in 8 MiB parts, two at a time: an upload holds about 16 MiB of the file
# in memory whatever the database's size (boto3's defaults, 10 threads, would hold 80).
PART_SIZE = 8 << 20
UPLOAD_THREADS = 2


class BackupError(Exception):
    """A backup or restore that could not be done. The message is for the person, a line or
    two; `details` (a tool's whole output, every problem an integrity check found) are shown
    only when asked for (`--verbose`)."""

    def __init__(self, message: str, details: str | None = None):
        super().__init__(message)
        self.details = details


class DamagedBackup(BackupError):
    """An object of the target that is not a good backup (its checksum, its bytes, its
    database or its schema): an older backup may still be, and a restore without a named key
    falls back to it."""

    def __init__(self, key: str, why: str, details: str | None = None):
        super().__init__(f"{key} is damaged: {why}", details)
        self.key = key


@dataclass(frozen=True)
class StoredObject:
    key: str  # below the target's prefix: snapshots/2026-11-23/10-35-02.417300-9f3c2a1b.db.gz
    size: int


Progress = Callable[[int], None]  # bytes moved since the last call


class Target(Protocol):
    name: str  # how messages show it (never with a credential)

    def put(self, key: str, source: Path, sha256: str, progress: Progress | None = None) -> None:
        """Store `source` as `key`: whole or not at all, never a half object under `key`."""

    def get(self, key: str, destination: Path) -> str:
        """Download `key` into `destination`; the SHA-256 recorded when it was stored."""

    def list(self) -> list[StoredObject]: ...

    def delete(self, key: str) -> None: ...


def open_target(config: BackupConfig) -> Target:
    if config.target is None:
        raise BackupError("no backup target is configured: set [backup] target to a folder "
                          "or to s3://bucket/prefix")
    if config.is_s3:
        return S3Target(config)
    return LocalTarget(Path(config.target))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class LocalTarget:
    """A folder (a mounted NAS, another disk): objects are files, each with a .sha256 file."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.name = str(folder)

    def put(self, key: str, source: Path, sha256: str, progress: Progress | None = None) -> None:
        final = self._path(key)
        make_private_dir(final.parent)
        partial = final.with_name(final.name + PARTIAL_SUFFIX)
        try:
            with open(source, "rb") as reader, _private_writer(partial) as writer:
                while chunk := reader.read(CHUNK):
                    writer.write(chunk)
                    if progress:
                        progress(len(chunk))
                writer.flush()
                os.fsync(writer.fileno())
            # The checksum first: an object in place always has its checksum beside it.
            with _private_writer(_checksum_path(final)) as note:
                note.write(f"{sha256}\n".encode())
            os.replace(partial, final)
        except OSError as error:
            raise BackupError(f"cannot write {final}: {error}") from error
        finally:
            partial.unlink(missing_ok=True)

    def get(self, key: str, destination: Path) -> str:
        path = self._path(key)
        try:
            sha256 = _checksum_path(path).read_text().strip()
            with open(path, "rb") as reader, open(destination, "wb") as writer:
                shutil.copyfileobj(reader, writer, CHUNK)
        except FileNotFoundError:
            if path.exists():
                raise DamagedBackup(key, "its checksum file is missing") from None
            raise BackupError(f"no backup {key!r} in {self.name}") from None
        except OSError as error:
            raise BackupError(f"cannot read {path}: {error}") from error
        return sha256

    def list(self) -> list[StoredObject]:
        if not self.folder.is_dir():
            return []
        found = []
        for path in self.folder.rglob("*"):
            if path.suffix in (CHECKSUM_SUFFIX, PARTIAL_SUFFIX) or not path.is_file():
                continue
            with contextlib.suppress(FileNotFoundError):  # pruned meanwhile
                found.append(StoredObject(path.relative_to(self.folder).as_posix(),
                                          path.stat().st_size))
        return found

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        _checksum_path(path).unlink(missing_ok=True)

    def _path(self, key: str) -> Path:
        path = (self.folder / key).resolve()
        if not path.is_relative_to(self.folder.resolve()):
            raise BackupError(f"{key!r} is not a key inside {self.name}")
        return path


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def _private_writer(path: Path) -> Any:
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


class S3Target:
    """A bucket and prefix on S3 or an S3-compatible server. Credentials come from boto3's
    chain (environment, profile, instance role), never from taskherd's config."""

    def __init__(self, config: BackupConfig):
        assert config.target is not None
        bucket, _, prefix = config.target[len(S3_SCHEME):].partition("/")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.name = config.target
        self._client = _s3_client(config)

    def put(self, key: str, source: Path, sha256: str, progress: Progress | None = None) -> None:
        from boto3.s3.transfer import TransferConfig

        transfer = TransferConfig(multipart_threshold=PART_SIZE, multipart_chunksize=PART_SIZE,
                                  max_concurrency=UPLOAD_THREADS)
        with self._errors(f"upload of {key}"):
            # A multipart upload becomes the object only when completed: a failed one never
            # replaces or shadows what `key` held before.
            self._client.upload_file(str(source), self.bucket, self.prefix + key,
                                     ExtraArgs={"Metadata": {"sha256": sha256}},
                                     Config=transfer, Callback=progress)

    def get(self, key: str, destination: Path) -> str:
        with self._errors(f"download of {key}"):
            head = self._client.head_object(Bucket=self.bucket, Key=self.prefix + key)
            sha256 = head.get("Metadata", {}).get("sha256")
            if not sha256:
                raise DamagedBackup(key, "it carries no sha256 checksum (not written by "
                                         "taskherd)")
            self._client.download_file(self.bucket, self.prefix + key, str(destination))
        return sha256

    def list(self) -> list[StoredObject]:
        found = []
        with self._errors("listing"):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    found.append(StoredObject(item["Key"][len(self.prefix):], item["Size"]))
        return found

    def delete(self, key: str) -> None:
        with self._errors(f"deleting {key}"):
            self._client.delete_object(Bucket=self.bucket, Key=self.prefix + key)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Any:
        """boto3's failures as a BackupError naming the target (never a credential)."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "?")
            raise BackupError(f"{self.name}: {what} refused ({code}): "
                              f"{error.response.get('Error', {}).get('Message', '')}") from None
        except (BotoCoreError, Boto3Error) as error:
            raise BackupError(f"{self.name}: {what} failed: {error}") from None


def _s3_client(config: BackupConfig) -> Any:
    # botocore logs signed requests and their headers at DEBUG: never into the daemon's log,
    # whatever its level (a session token would be in them).
    for name in ("boto3", "botocore", "s3transfer", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        import boto3
        from botocore.config import Config as ClientConfig
    except ImportError:
        raise BackupError("an s3:// backup target needs boto3: "
                          "pip install 'taskherd[s3]'") from None
    # One retry of its own, then the backup service retries the whole upload later with its
    # own backoff. A request to a server that froze (it accepts connections, never answers)
    # costs a second for the `Expect: 100-continue` it never answers, then read_timeout:
    # botocore's `max_attempts` counts retries, not attempts, and its 3 were four attempts
    # (a frozen server failed an upload after 270 s); `total_max_attempts` counts them all.
    settings = ClientConfig(connect_timeout=config.connect_timeout,
                            read_timeout=config.read_timeout,
                            retries={"total_max_attempts": 2, "mode": "standard"},
                            s3={"addressing_style": "path"} if config.endpoint_url else None)
    return boto3.session.Session().client("s3", endpoint_url=config.endpoint_url,
                                          region_name=config.region, config=settings)
