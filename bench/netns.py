"""Network namespaces used as hosts: each with its own network stack, reaching this
machine's servers over a veth pair and a private bridge, as another host would over a LAN.

    with netns.hosts(4) as (server_address, names): ...   # 10.231.0.1, ["mi-sc-h1", ...]

The bridge `mi-sc-br` holds `SERVER_ADDRESS`; host k is the namespace `mi-sc-hk` whose
`eth0` (the far end of the veth `mi-sc-vk`, a port of the bridge) is 10.231.0.(k+1)/24.
Servers that should be reachable from the hosts bind `SERVER_ADDRESS` as well as loopback
(scripts/servers.py, `bind` / `listen`). Nothing is routed beyond the bridge.

It needs CAP_NET_ADMIN (`ip netns add` as root). Everything made is removed when the
block ends, and leftovers of a killed run (same names) are removed before starting.
`run_as(name, hostname)` is the command prefix that runs a program on host `name`, with a
UTS namespace of its own so `socket.gethostname()` (heartbeats, leases) names the host.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

PREFIX = "mi-sc"
BRIDGE = f"{PREFIX}-br"
NETWORK = "10.231.0.0/24"
SERVER_ADDRESS = "10.231.0.1"
#: Host k (1-based) is 10.231.0.(k + 1): at most 250 hosts on the /24.
MAX_HOSTS = 250


class NamespaceError(RuntimeError):
    """A namespace or link could not be made (e.g. no CAP_NET_ADMIN): the command and its error."""


def _ip(*args: str, check: bool = True) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NamespaceError(f"`ip {' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}")


def host_name(index: int) -> str:
    return f"{PREFIX}-h{index}"


def _veth(index: int) -> str:
    return f"{PREFIX}-v{index}"


def run_as(name: str, hostname: str) -> list[str]:
    """Command prefix: run the rest in namespace `name`, under `hostname`."""
    set_name = 'hostname "$0" && exec "$@"'
    return ["ip", "netns", "exec", name, "unshare", "--uts", "--", "sh", "-c", set_name, hostname]


def cleanup() -> None:
    """Remove the namespaces, veths and bridge of this module that exist (never others)."""
    existing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    ours = {line.split()[0] for line in existing.splitlines() if line.startswith(f"{PREFIX}-h")}
    for name in ours:
        _ip("netns", "delete", name, check=False)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    for line in links.splitlines():
        link = line.split(":", 2)[1].strip().split("@")[0]
        if link.startswith(f"{PREFIX}-"):
            _ip("link", "delete", link, check=False)


@contextlib.contextmanager
def hosts(count: int) -> Iterator[tuple[str, list[str]]]:
    """`count` namespaces on a bridge; yields (the servers' address, the namespace names)."""
    if not 1 <= count <= MAX_HOSTS:
        raise ValueError(f"1 to {MAX_HOSTS} hosts, not {count}")
    cleanup()
    names: list[str] = []
    try:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{SERVER_ADDRESS}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for index in range(1, count + 1):
            name, veth, peer = host_name(index), _veth(index), f"{PREFIX}-p{index}"
            _ip("netns", "add", name)
            names.append(name)
            _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
            _ip("link", "set", veth, "master", BRIDGE, "up")
            _ip("link", "set", peer, "netns", name)
            _ip("-n", name, "link", "set", peer, "name", "eth0")
            _ip("-n", name, "addr", "add", f"10.231.0.{index + 1}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield SERVER_ADDRESS, names
    finally:
        cleanup()
