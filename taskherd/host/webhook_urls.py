"""Where a webhook may point, and how its URL is shown.

A webhook is POSTed by the daemon, from inside the machine: a URL naming the cloud's
metadata service (169.254.169.254 and its kin) would hand whoever may add an alias the
machine's cloud credentials in the answer's echo, or let them act with them. Link-local and
metadata addresses are refused always: when the alias is added (an address written in any
of its forms, a metadata host name) and again at each delivery, for the addresses the host
name resolves to then (`pinned`: the delivery connects to the address checked, so a name
that resolves elsewhere a moment later gains nothing). Loopback and private addresses stay
allowed: a receiver on the same host or network is the common case.

A URL may carry a secret (`https://user:pass@…`, `?token=…`, Slack's and Discord's token in
the path): it is stored as given, so delivery works, and shown redacted everywhere else.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import SplitResult, urlsplit

# The clouds' metadata services, by name and by address (besides all of 169.254.0.0/16).
METADATA_NAMES = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog",  # Google Cloud
    "instance-data", "instance-data.ec2.internal",  # AWS
    "metadata.azure.com", "metadata.tencentyun.com", "metadata.platformequinix.com",
})
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(address) for address in (
    "fd00:ec2::254",  # AWS's IMDS over IPv6
    "100.100.100.200",  # Alibaba Cloud
))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
REDACTED = "***"
# A path segment that reads as a secret: long, of a token's characters, letters and digits
# mixed (Slack's /services/T…/B…/<secret>, Discord's /api/webhooks/<id>/<secret>).
_SECRET_SEGMENT = re.compile(r"(?=.*[A-Za-z])(?=.*\d)[A-Za-z0-9_\-]{16,}")


_HOST_NAME = re.compile(r"[\w-]+(\.[\w-]+)*")  # letters of any script: an IDN's too


class RefusedTarget(ValueError):
    """A webhook URL pointing where the daemon may not send."""


def check_url(url: str) -> None:
    """RefusedTarget unless `url` is http(s) with a host that is not a link-local or
    metadata address or name, written in any form (no name is resolved here)."""
    where = f"webhook target {redacted(url)!r}"
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".").lower()
    except ValueError:  # a bracketed address that is none
        raise RefusedTarget(f"{where}: expected an http:// or https:// URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise RefusedTarget(f"{where}: expected an http:// or https:// URL")
    try:
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        raise RefusedTarget(f"{where}: its port is not a number from 0 to 65535") from None
    if host in METADATA_NAMES:
        raise RefusedTarget(f"{where}: {host} is a cloud metadata service, never a delivery "
                            "target")
    address = literal_address(host)
    if address is None and not _HOST_NAME.fullmatch(host):
        raise RefusedTarget(f"{where}: {host!r} is neither a host name nor an address")
    if address is not None and (why := refused_address(address)):
        raise RefusedTarget(f"{where}: {why}")


def literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `host` writes, in any form the resolver reads without asking DNS
    (169.254.169.254, 2852039166, 0xa9fea9fe, 169.254.43518, [fe80::1%eth0]); None for a
    name."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    try:  # inet_aton reads the shorthand and numeric forms getaddrinfo would
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def refused_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why the daemon may not send to `address`, or None."""
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address carried inside an IPv6 one reaches the IPv4 host.
        carried = address.ipv4_mapped or address.sixtofour or (
            ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) if address in _NAT64 else None)
        address = carried or address
    if address in METADATA_ADDRESSES:
        return f"{address} is a cloud metadata service, never a delivery target"
    if address.is_link_local:
        return (f"{address} is a link-local address (the cloud metadata service lives "
                "there), never a delivery target")
    return None


def pinned(url: str) -> tuple[list[str], str | None]:
    """(the URLs to connect to, one per address, in the resolver's order; the host name for
    the Host header and TLS, None for an address) once the host's addresses are resolved
    and checked: each URL names an address checked, so the name cannot resolve elsewhere
    between the check and the connection. RefusedTarget if any address is refused; OSError
    if the name does not resolve."""
    check_url(url)
    parts = urlsplit(url)
    host = parts.hostname or ""
    if literal_address(host) is not None:
        return [url], None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
                                   for info in found))
    for address in addresses:
        if why := refused_address(address):
            raise RefusedTarget(f"webhook host {host} resolves to {why}")
    return [_with_host(parts, address) for address in addresses], host


def _with_host(parts: SplitResult, address: ipaddress.IPv4Address | ipaddress.IPv6Address
               ) -> str:
    shown = f"[{address}]" if address.version == 6 else str(address)
    credentials, _, _ = parts.netloc.rpartition("@")
    netloc = (f"{credentials}@" if credentials else "") + shown + (
        f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


def redacted(url: str) -> str:
    """`url` as listings and logs show it: no user or password, no query value, no
    fragment, no path segment that reads as a secret."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    host = parts.netloc.rpartition("@")[2]
    user = f"{REDACTED}@" if "@" in parts.netloc else ""
    path = "/".join(REDACTED if _SECRET_SEGMENT.fullmatch(segment) else segment
                    for segment in parts.path.split("/"))
    query = "&".join(f"{pair.partition('=')[0]}={REDACTED}" if "=" in pair else REDACTED
                     for pair in parts.query.split("&")) if parts.query else ""
    return parts._replace(netloc=user + host, path=path, query=query, fragment="").geturl()


def redact_in(text: str, url: str) -> str:
    """`text` (an error, a log line) with `url` in it shown redacted."""
    return text.replace(url, redacted(url)) if url else text
