"""Network namespaces used as hosts: each with its own network stack, reaching this
machine's servers over a veth pair and a private bridge, as another host would over a LAN.

    with netns.hosts(4) as found:   # found.server_address "10.231.S.1", found.names [...]

A run claims a free slot S (0-249) by creating the bridge `miscSbr` (creation fails when
another run holds the slot, so two runs never share one); the bridge holds 10.231.S.1/24;
host k is the namespace `miscShk`, whose `eth0` (the far end of the veth `miscSvk`, a
port of the bridge) is 10.231.S.(k+1). Servers that should be reachable from the hosts
bind the server address as well as loopback (scripts/servers.py, `bind` / `listen`).
Nothing is routed beyond the bridge.

It needs CAP_NET_ADMIN (`ip netns add` as root); without it `NamespaceError` carries
the command and its error. Everything made is removed when the block ends;
`python -m bench.netns --clean` removes what killed runs left (every slot).
`run_as(name, hostname)` is the command prefix that runs a program on host `name`, with a
UTS namespace of its own so `socket.gethostname()` (heartbeats, leases) names the host.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

PREFIX = "misc"
SLOTS = 250
#: Host k (1-based) is 10.231.S.(k + 1): at most 250 hosts on the /24.
MAX_HOSTS = 250


class NamespaceError(RuntimeError):
    """A namespace or link could not be made (e.g. no CAP_NET_ADMIN): the command and its error."""


@dataclass(frozen=True)
class Hosts:
    slot: int
    names: list[str]  # the namespaces, host 1 first

    @property
    def server_address(self) -> str:
        """This machine's address on the bridge, where the hosts reach its servers."""
        return f"10.231.{self.slot}.1"

    @property
    def network(self) -> str:
        return f"10.231.{self.slot}.0/24"


def _ip(*args: str, check: bool = True) -> bool:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NamespaceError(f"`ip {' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.returncode == 0


def _names(slot: int) -> tuple[str, str]:
    """(bridge, prefix of the slot's namespaces and links)."""
    return f"{PREFIX}{slot}br", f"{PREFIX}{slot}"


def run_as(name: str, hostname: str) -> list[str]:
    """Command prefix: run the rest in namespace `name`, under `hostname`."""
    set_name = 'hostname "$0" && exec "$@"'
    return ["ip", "netns", "exec", name, "unshare", "--uts", "--", "sh", "-c", set_name, hostname]


def cleanup(slot: int | None) -> None:
    """Remove the namespaces and links of `slot` (None: of every slot), never others'."""
    pattern = re.compile(rf"^{PREFIX}{slot if slot is not None else '[0-9]+'}[hvpb]")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    for line in listed.splitlines():
        if pattern.match(line):
            _ip("netns", "delete", line.split()[0], check=False)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    for line in links.splitlines():
        link = line.split(":", 2)[1].strip().split("@")[0]
        if pattern.match(link):
            _ip("link", "delete", link, check=False)


def _claim_slot() -> int:
    """The first slot whose bridge this run could create (the bridge is the claim)."""
    for slot in range(SLOTS):
        bridge, _ = _names(slot)
        if _ip("link", "add", bridge, "type", "bridge", check=False):
            return slot
    _ip("link", "add", _names(SLOTS)[0], "type", "bridge")  # raises with the reason
    raise NamespaceError("no free slot")


@contextlib.contextmanager
def hosts(count: int) -> Iterator[Hosts]:
    """`count` namespaces on a bridge of their own; removed afterwards."""
    if not 1 <= count <= MAX_HOSTS:
        raise ValueError(f"1 to {MAX_HOSTS} hosts, not {count}")
    probe = f"{PREFIX}probe{os.getpid()}"
    _ip("netns", "add", probe)  # fails at once, with the reason, without CAP_NET_ADMIN
    _ip("netns", "delete", probe, check=False)
    slot = _claim_slot()
    bridge, prefix = _names(slot)
    found = Hosts(slot, [])
    try:
        _ip("addr", "add", f"{found.server_address}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for index in range(1, count + 1):
            name, veth, peer = f"{prefix}h{index}", f"{prefix}v{index}", f"{prefix}p{index}"
            _ip("netns", "add", name)
            found.names.append(name)
            _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
            _ip("link", "set", veth, "master", bridge, "up")
            _ip("link", "set", peer, "netns", name)
            _ip("-n", name, "link", "set", peer, "name", "eth0")
            _ip("-n", name, "addr", "add", f"10.231.{slot}.{index + 1}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield found
    finally:
        cleanup(slot)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.netns", description=__doc__.split("\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove every slot's namespaces and links")
    if parser.parse_args().clean:
        cleanup(None)


if __name__ == "__main__":
    main()
