"""Finding the running stack as a user would, and calling its JSON envelope API."""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REQUEST_TIMEOUT_S = 10.0


class DemoError(Exception):
    """Something the user must fix (no stack, missing credentials): printed without a traceback."""


@dataclass(frozen=True)
class Target:
    base_url: str
    secret_key: str
    admin_token: str
    source: str  # where the base URL came from, for the banner


def state_dir() -> Path:
    return Path(os.environ.get("MI_STATE_DIR", ROOT / ".state")).resolve()


def shown_path(path: Path) -> str:
    """`path` relative to the working directory when it is below it (`.state/stack.json`)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise DemoError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def resolve_target(args: argparse.Namespace) -> Target:
    """Flags, else environment, else the state folder of `make run`."""
    state = state_dir()
    stack = _read_json(state / "stack.json")
    stored = _read_json(state / "secrets.json")
    from_env = stack.get("credentials", {}) if isinstance(stack.get("credentials"), dict) else {}

    base_url, source = args.base_url, "--base-url"
    if not base_url and os.environ.get("BASE_URL"):
        base_url, source = os.environ["BASE_URL"], "BASE_URL"
    if not base_url and stack.get("base_url"):
        base_url, source = str(stack["base_url"]), shown_path(state / "stack.json")
    if not base_url:
        raise DemoError(
            f"no running stack found ({state / 'stack.json'} is missing): start one with `make run`,"
            " or give its address with --base-url / BASE_URL"
        )

    def credential(flag: str | None, name: str) -> str:
        if flag:
            return flag
        if os.environ.get(name):
            return os.environ[name]
        if from_env.get(name) == "environment":
            raise DemoError(f"`make run` took {name} from its environment: set it here too (or pass a flag)")
        if stored.get(name):
            return str(stored[name])
        raise DemoError(f"{name} unknown: pass it as a flag, set {name}, or run the stack with `make run`")

    secret_key = credential(args.secret_key, "SECRET_KEY")
    admin_tokens = credential(args.admin_token, "ADMIN_TOKENS")
    admin_token = admin_tokens.split(",")[0].strip()
    return Target(base_url.rstrip("/"), secret_key, admin_token, source)


class ApiError(Exception):
    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body}")
        self.status = status
        self.body = body


class Api:
    """The JSON envelope API: returns `data` of a code-0 answer, raises ApiError otherwise."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def call(self, method: str, path: str, token: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError(method, path, 0, str(getattr(exc, "reason", exc))) from exc
        try:
            envelope = json.loads(raw)
        except ValueError:
            raise ApiError(method, path, status, raw[:200]) from None
        if status != 200 or envelope.get("code") != 0:
            raise ApiError(method, path, status, envelope)
        return envelope.get("data")

    def check_ready(self, source: str) -> None:
        try:
            with urllib.request.urlopen(f"{self.base_url}/readyz", timeout=REQUEST_TIMEOUT_S) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            raise DemoError(f"{self.base_url} is not ready (HTTP {exc.code}): {exc.read()[:200]!r}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise DemoError(
                f"nothing answers at {self.base_url} (from {source}): is `make run` still running?"
                f" ({getattr(exc, 'reason', exc)})"
            ) from exc
