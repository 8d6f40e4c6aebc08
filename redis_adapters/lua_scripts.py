"""The application's Lua scripts: one `.lua` file per script, loaded one way.

A script lives in the `lua/` folder of the package that runs it (package data):
`redis_adapters/lua/`, `hotpath/lua/`, `web/console/lua/`. Its first line may name
prologues, `-- uses: _owner_check`, put in front of it when loaded; a prologue is looked
up in the script's own folder, then in `redis_adapters/lua/` (the shared ones: the lease
check of redis_adapters/lock.py). The broker library loads its own the same way
(listbroker's scripts.py). Every script declares all its keys in KEYS, one key family
per script, so it runs on one Redis Cluster slot (docs/cluster.md).
"""

from __future__ import annotations

import functools
from importlib import resources

_USES = "-- uses:"
#: Where the shared prologues are.
SHARED = "redis_adapters"


def _read(package: str, name: str) -> str | None:
    path = resources.files(package).joinpath("lua", f"{name}.lua")
    return path.read_text(encoding="utf-8") if path.is_file() else None


@functools.cache
def lua_source(package: str, name: str) -> str:
    """The text of script `name` of `package` (e.g. "hotpath", "dirty_claim"), prologues in front."""
    body = _read(package, name)
    if body is None:
        raise FileNotFoundError(f"{package}/lua/{name}.lua")
    first = body.split("\n", 1)[0]
    prologues = first[len(_USES) :].split() if first.startswith(_USES) else []
    parts = []
    for prologue in prologues:
        text = _read(package, prologue) or _read(SHARED, prologue)
        if text is None:
            raise FileNotFoundError(f"prologue {prologue} of {package}/lua/{name}.lua")
        parts.append(text)
    return "".join(parts) + body
