"""A machine of this kind as CI finds it: PostgreSQL and Redis on their default ports, empty.

    python -m tests.support.default_port_servers -- COMMAND...

Starts a private PostgreSQL on 127.0.0.1:5432 (trust, no test database yet) and a private
Redis on 127.0.0.1:6379, runs COMMAND, stops both and exits with COMMAND's status. Only
meant to run in a network namespace of its own (`unshare --net`), where those ports are
free and nothing of the host's servers can be reached or touched
(tests/system/test_fresh_machine.py).
"""

from __future__ import annotations

import subprocess
import sys

from scripts import servers

POSTGRES_PORT = 5432
REDIS_PORT = 6379


def main(argv: list[str]) -> int:
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    with servers.temporary_directory("mi-default-ports-") as tmp:
        pg = servers.PostgresServer(tmp / "pg", port=POSTGRES_PORT).start()
        try:
            redis_server = servers.RedisServer(tmp / "redis", port=REDIS_PORT).start()
            try:
                if (pg.port, redis_server.port) != (POSTGRES_PORT, REDIS_PORT):
                    print(f"default ports taken here: {pg.port}, {redis_server.port}", file=sys.stderr)
                    return 3
                return subprocess.call(argv)
            finally:
                redis_server.stop()
        finally:
            pg.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
