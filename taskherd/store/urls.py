"""Which dialect a `[daemon] database` setting names, and how to show it without a secret.

Kept apart from the PostgreSQL store so a command on a SQLite database never imports it.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

URL_SCHEMES = ("postgres://", "postgresql://")


def is_postgres_url(database: str) -> bool:
    return database.startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """The URL without its password, for logs and messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
