"""`redis+sentinel://` URLs: where the Sentinels are and which master they watch.

    redis+sentinel://[[username]:password@]host:port[,host:port...]/service_name[/db][?sentinel_password=...]

The form follows redis-py's `Sentinel`: the host:port list is the Sentinels (port
26379 when left out), `service_name` is the master's name in their configuration, the
password (and username) is the master's and replicas' (`Sentinel(..., password=...)`),
and `sentinel_password` (a query parameter) is the Sentinels' own, when they ask for one
(`sentinel_kwargs`). Pure parsing, so `Settings.from_env` refuses a malformed URL at
start-up; redis_adapters/redis_clients.py makes the connections.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

from config import ConfigError

SENTINEL_SCHEME = "redis+sentinel://"
#: Sentinel's own default port.
DEFAULT_SENTINEL_PORT = 26379
_QUERY_KEYS = frozenset({"sentinel_password"})


@dataclass(frozen=True)
class SentinelURL:
    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None


def is_sentinel_url(url: str) -> bool:
    return url.startswith(SENTINEL_SCHEME)


def _host_port(item: str, url: str) -> tuple[str, int]:
    if not item:
        raise ConfigError(f"empty Sentinel address in {url!r}")
    if item.startswith("["):  # [IPv6]:port
        host, _, rest = item[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = item.rpartition(":") if ":" in item else (item, "", "")
    if not host:
        raise ConfigError(f"Sentinel address {item!r} has no host in {url!r}")
    if not port_text:
        return host, DEFAULT_SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"Sentinel address {item!r} has a bad port in {url!r}")
    return host, int(port_text)


def _redacted(url: str) -> str:
    _, at, tail = url.rpartition("@")
    return f"{SENTINEL_SCHEME}***@{tail}" if at else url


def parse_sentinel_url(url: str) -> SentinelURL:
    """Parse `url`; a malformed one raises `ConfigError` saying what is wrong (password hidden)."""
    if not is_sentinel_url(url):
        raise ConfigError(f"not a {SENTINEL_SCHEME} URL: {_redacted(url)!r}")
    shown = _redacted(url)
    rest, _, query = url[len(SENTINEL_SCHEME) :].partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user_text, colon, password_text = userinfo.partition(":")
        username = unquote(user_text) or None
        password = unquote(password_text) if colon else None
    sentinels = tuple(_host_port(item.strip(), shown) for item in hosts.split(","))
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise ConfigError(f"{shown!r} names no service (…/service_name[/db])")
    if len(parts) > 2:
        raise ConfigError(f"{shown!r}: the path must be /service_name[/db]")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit():
            raise ConfigError(f"{shown!r}: the database index must be a number, got {parts[1]!r}")
        db = int(parts[1])
    params = parse_qs(query, keep_blank_values=True)
    unknown = set(params) - _QUERY_KEYS
    if unknown:
        raise ConfigError(f"{shown!r}: unknown parameter(s) {', '.join(sorted(unknown))}")
    sentinel_password = params.get("sentinel_password", [None])[-1]
    return SentinelURL(
        sentinels=sentinels,
        service_name=unquote(parts[0]),
        db=db,
        username=username,
        password=password,
        sentinel_password=sentinel_password or None,
    )
