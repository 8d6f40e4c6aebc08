"""`make demo`: simulated users take the assessment against the running stack, over HTTP.

    make demo [DEMO_ARGS="--records N --users K --timeout S --seed X"]
    .venv/bin/python scripts/demo.py [--records N] [--users K] [--timeout S] [--seed X]

Each simulated user has a profile (理工型, 文艺型, 运动型, ...) that shapes their answers,
so reports differ. The users create, start and submit their records concurrently; a
progress bar follows the reports (each user's records are polled), then a summary:
how many completed, time from submit to report (p50/p95), the queue figures and one
finished report.

Where the stack is, as a user would find it: flags (--base-url, --secret-key,
--admin-token), else the environment (BASE_URL, SECRET_KEY, ADMIN_TOKENS), else the
state folder of `make run` (MI_STATE_DIR, default .state/: stack.json, secrets.json).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import sys
import threading
import time
import unicodedata
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Simulated users get ids from here up, apart from user 1 of `make run`'s banner.
FIRST_USER_ID = 1001
POLL_INTERVAL_S = 0.1
REQUEST_TIMEOUT_S = 10.0
BAR_WIDTH = 30
STATUS_COMPLETED = 4
STATUS_FAILED = 5

#: Profiles: how strongly a user leans to each dimension (0 weakest .. 1 strongest).
PROFILES: dict[str, dict[str, float]] = {
    "理工型": {"logical": 0.92, "spatial": 0.75, "naturalist": 0.55, "intrapersonal": 0.55, "bodily": 0.4},
    "文艺型": {"linguistic": 0.88, "musical": 0.82, "intrapersonal": 0.7, "spatial": 0.55, "logical": 0.3},
    "运动型": {"bodily": 0.93, "interpersonal": 0.72, "naturalist": 0.6, "linguistic": 0.3, "musical": 0.35},
    "社交型": {"interpersonal": 0.92, "linguistic": 0.72, "musical": 0.55, "intrapersonal": 0.35},
    "自然型": {
        "naturalist": 0.92,
        "intrapersonal": 0.66,
        "spatial": 0.6,
        "bodily": 0.55,
        "interpersonal": 0.35,
    },
    "均衡型": {},
}
#: Lean of the dimensions a profile does not name.
DEFAULT_LEAN = 0.5


class DemoError(Exception):
    """Something the user must fix (no stack, missing credentials): printed without a traceback."""


# ------------------------------------------------------------------ configuration


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


# --------------------------------------------------------------------------- HTTP


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


# ---------------------------------------------------------------- simulated users


@dataclass(frozen=True)
class Question:
    id: int
    dimension_code: str
    dimension_name: str
    reverse_scored: bool


@dataclass
class SimUser:
    user_id: int
    profile: str
    lean: dict[str, float]
    token: str
    records: list[int] = field(default_factory=list)

    def answers(self, questions: Sequence[Question], rng: random.Random) -> list[dict[str, int]]:
        """A plausible answer sheet: agreement follows the user's lean, with day-to-day noise;
        a reverse-scored statement ("…对我来说是件苦差事") is disagreed with by the strong."""
        sheet = []
        for q in questions:
            agreement = 1 + 4 * self.lean.get(q.dimension_code, DEFAULT_LEAN) + rng.gauss(0, 0.7)
            value = min(5, max(1, round(agreement)))
            sheet.append({"questionId": q.id, "value": 6 - value if q.reverse_scored else value})
        return sheet


def reverse_scored_ids() -> set[int]:
    """Which statements are reverse-scored (a respondent understands what they agree to).
    From the questionnaire shipped with the package; none if it cannot be read."""
    try:
        from services.questionnaire import load_questionnaire

        return {q.id for d in load_questionnaire().dimensions for q in d.questions if q.reverse_scored}
    except Exception:  # the demo also works from a bare checkout: then answers are all "forward"
        return set()


def make_users(count: int, secret_key: str, rng: random.Random) -> list[SimUser]:
    from web.auth import issue_user_token

    names = list(PROFILES)
    start = rng.randrange(len(names))
    users = []
    for index in range(count):
        profile = names[(start + index) % len(names)]
        codes = set(PROFILES[profile]) | {code for p in PROFILES.values() for code in p}
        # Each person differs a little from their profile.
        lean = {
            code: min(1.0, max(0.0, PROFILES[profile].get(code, DEFAULT_LEAN) + rng.uniform(-0.1, 0.1)))
            for code in codes
        }
        user_id = FIRST_USER_ID + index
        users.append(SimUser(user_id, profile, lean, issue_user_token(secret_key, user_id)))
    return users


# ------------------------------------------------------------------------ the run


@dataclass
class Progress:
    total: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    submitted_at: dict[int, float] = field(default_factory=dict)  # record id -> monotonic time
    done_at: dict[int, float] = field(default_factory=dict)
    status: dict[int, int] = field(default_factory=dict)
    server_latency: dict[int, float] = field(default_factory=dict)  # completedAt - submittedAt
    errors: list[str] = field(default_factory=list)
    submitting_took: float = 0.0

    def count(self, status: int) -> int:
        with self.lock:
            return sum(1 for s in self.status.values() if s == status)


def submit_records(
    api: Api, user: SimUser, count: int, questions: Sequence[Question], *, seed: int, progress: Progress
) -> None:
    """One user's records, one after the other: create → start → submit."""
    rng = random.Random(seed)
    for _ in range(count):
        try:
            record = api.call("POST", "/api/assessment/createRecord", user.token)
            record_id = int(record["id"])
            api.call("POST", "/api/assessment/startAssessment", user.token, {"recordId": record_id})
            sheet = user.answers(questions, rng)
            started = time.monotonic()
            result = api.call(
                "POST", "/api/assessment/submitAnswers", user.token, {"recordId": record_id, "answers": sheet}
            )
        except ApiError as exc:
            with progress.lock:
                progress.errors.append(str(exc))
            continue
        with progress.lock:
            user.records.append(record_id)
            progress.submitted_at[record_id] = started
            progress.status[record_id] = int(result["status"])


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def poll_once(api: Api, users: Sequence[SimUser], progress: Progress) -> None:
    """One round: each user's record list gives the status of all their records at once."""
    for user in users:
        with progress.lock:
            pending = {
                r for r in user.records if progress.status.get(r) not in (STATUS_COMPLETED, STATUS_FAILED)
            }
        if not pending:
            continue
        try:
            rows = api.call("GET", "/api/assessment/records", user.token)
        except ApiError as exc:
            with progress.lock:
                progress.errors.append(str(exc))
            continue
        now = time.monotonic()
        with progress.lock:
            for row in rows:
                record_id = int(row["id"])
                if record_id not in pending:
                    continue
                status = int(row["status"])
                progress.status[record_id] = status
                if status in (STATUS_COMPLETED, STATUS_FAILED):
                    progress.done_at[record_id] = now
                submitted, completed = (
                    _parse_time(row.get("submittedAt")),
                    _parse_time(row.get("completedAt")),
                )
                if status == STATUS_COMPLETED and submitted and completed:
                    progress.server_latency[record_id] = (completed - submitted).total_seconds()


class Bar:
    """A progress bar on a terminal (redrawn in place), else a line every few seconds."""

    def __init__(self, total: int, stream: Any = sys.stdout) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.last_line = 0.0
        self.start = time.monotonic()

    def draw(self, progress: Progress, *, final: bool = False) -> None:
        completed, failed = progress.count(STATUS_COMPLETED), progress.count(STATUS_FAILED)
        with progress.lock:
            submitted = len(progress.submitted_at)
        filled = math.floor(BAR_WIDTH * completed / self.total)
        failed_cells = math.ceil(BAR_WIDTH * failed / self.total) if failed else 0
        bar = "█" * filled + "✗" * failed_cells + "░" * max(0, BAR_WIDTH - filled - failed_cells)
        elapsed = time.monotonic() - self.start
        text = (
            f"  reports [{bar}] {completed:>4}/{self.total} completed"
            f" · {failed} failed · {submitted}/{self.total} submitted · {elapsed:5.1f} s"
        )
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K" + ("\n" if final else ""))
            self.stream.flush()
        elif final or time.monotonic() - self.last_line >= 2.0:
            self.stream.write(text + "\n")
            self.stream.flush()
            self.last_line = time.monotonic()


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


# ----------------------------------------------------------------------- display


def display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int) -> str:
    return text + " " * max(0, width - display_width(text))


def wrap(text: str, width: int) -> list[str]:
    """Wrap by display width (Chinese has no spaces to break at)."""
    lines, current = [], ""
    for ch in text:
        if display_width(current + ch) > width:
            lines.append(current)
            current = ""
        if current or not ch.isspace():
            current += ch
    if current:
        lines.append(current)
    return lines


def render_report(report: dict[str, Any], user: SimUser) -> str:
    dimensions = report["dimensions"]
    names = {d["code"]: d["name"] for d in dimensions}
    name_width = max(display_width(d["name"]) for d in dimensions)
    completed = _parse_time(report.get("completedAt"))
    when = completed.astimezone().strftime("%Y-%m-%d %H:%M:%S") if completed else "?"
    out = [
        f"  多元智能测评报告 · 记录 {report['recordId']}（用户 {report['userId']}，画像「{user.profile}」）",
        f"  完成于 {when}",
        "",
    ]
    for d in dimensions:
        score = float(d["score"])
        cells = round(score / 100 * 20)
        out.append(
            f"  {d['rank']:>2}. {pad(d['name'], name_width)}  {'█' * cells}{'░' * (20 - cells)}"
            f" {score:5.1f}  {d['level']}"
        )
    out.append("")
    out.append("  优势智能：" + "、".join(names.get(code, code) for code in report["topDimensions"]))
    summary_lines = wrap(report["summary"], 70)
    out.append("  总结：" + (summary_lines[0] if summary_lines else ""))
    out.extend("        " + line for line in summary_lines[1:])
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    api = Api(target.base_url)
    api.check_ready(target.source)
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    rng = random.Random(seed)
    users = make_users(args.users, target.secret_key, rng)
    reverse = reverse_scored_ids()
    questions = [
        Question(int(q["id"]), q["dimensionCode"], q["dimensionName"], int(q["id"]) in reverse)
        for q in api.call("GET", "/api/assessment/questions", users[0].token)
    ]
    print(f"mi-assessment demo against {target.base_url} (from {target.source}), seed {seed}")
    print(
        f"  {args.records} records, {len(users)} users, {len(questions)} questions each: "
        + ", ".join(f"user {u.user_id} {u.profile}" for u in users)
    )

    per_user = [
        args.records // len(users) + (1 if i < args.records % len(users) else 0) for i in range(len(users))
    ]
    progress = Progress(total=args.records)
    bar = Bar(args.records)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(users)) as pool:
        futures = [
            pool.submit(
                submit_records, api, user, count, questions, seed=rng.randrange(2**32), progress=progress
            )
            for user, count in zip(users, per_user, strict=True)
        ]
        deadline = started + args.timeout
        while time.monotonic() < deadline:
            poll_once(api, users, progress)
            bar.draw(progress)
            all_submitted = all(f.done() for f in futures)
            if all_submitted and not progress.submitting_took:
                progress.submitting_took = time.monotonic() - started
            with progress.lock:
                finished = len(progress.done_at)
                attempted = len(progress.submitted_at) + len(progress.errors)
            if all_submitted and finished >= len(progress.submitted_at) and attempted >= args.records:
                break
            time.sleep(POLL_INTERVAL_S)
        bar.draw(progress, final=True)
        timed_out = time.monotonic() >= deadline
    elapsed = time.monotonic() - started
    progress.submitting_took = progress.submitting_took or elapsed
    print_summary(api, target, users, progress, elapsed, timed_out=timed_out, timeout=args.timeout)
    completed = progress.count(STATUS_COMPLETED)
    return 0 if completed == args.records else 1


def print_summary(
    api: Api,
    target: Target,
    users: Sequence[SimUser],
    progress: Progress,
    elapsed: float,
    *,
    timed_out: bool,
    timeout: float,
) -> None:
    completed, failed = progress.count(STATUS_COMPLETED), progress.count(STATUS_FAILED)
    submitted = len(progress.submitted_at)
    waiting = submitted - completed - failed
    latencies = [
        progress.done_at[r] - progress.submitted_at[r]
        for r, s in progress.status.items()
        if s == STATUS_COMPLETED and r in progress.done_at
    ]
    print()
    print("  summary")
    print(
        f"    submitted        {submitted}/{progress.total} records in {progress.submitting_took:.1f} s"
        f" ({len(users)} users in parallel)"
    )
    line = (
        f"    completed        {completed}/{progress.total}   failed {failed}   still generating {waiting}"
        f"   (all done {elapsed:.1f} s after the start)"
    )
    if timed_out and waiting:
        line += f"   (gave up after --timeout {timeout:g} s)"
    print(line)
    server = list(progress.server_latency.values())
    if server:
        print(
            f"    submit → report  p50 {percentile(server, 50):.2f} s   p95 {percentile(server, 95):.2f} s"
            f"   max {max(server):.2f} s   (server clock: submittedAt → completedAt)"
        )
    if latencies:
        p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
        print(
            f"    seen by users    p50 {p50:.2f} s   p95 {p95:.2f} s   max {max(latencies):.2f} s"
            f"   (status polled every {POLL_INTERVAL_S:g} s, through the same web workers)"
        )
    try:
        figures = api.call("GET", "/api/admin/queue/stats", target.admin_token)
        print(
            "    queue now        "
            + "   ".join(
                f"{key} {figures[key]}" for key in ("queued", "delayed", "inFlight", "dead", "invalid")
            )
        )
    except ApiError as exc:
        print(f"    queue figures unavailable: {exc}")
    if progress.errors:
        print(f"    {len(progress.errors)} request(s) failed, the first: {progress.errors[0]}")

    shown = pick_report(users, progress)
    if shown:
        user, record_id = shown
        try:
            report = api.call("GET", f"/api/assessment/report?recordId={record_id}", user.token)
        except ApiError as exc:
            print(f"    report of record {record_id} unavailable: {exc}")
        else:
            print()
            print(render_report(report, user))
    print()


def pick_report(users: Sequence[SimUser], progress: Progress) -> tuple[SimUser, int] | None:
    """The latest finished record of the first user with a marked profile (they rotate with
    the seed); a balanced profile only if there is nothing else."""
    for user in sorted(users, key=lambda u: not PROFILES[u.profile]):
        finished = [r for r in user.records if progress.status.get(r) == STATUS_COMPLETED]
        if finished:
            return user, finished[-1]
    return None


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=40, metavar="N", help="records to submit (default 40)")
    parser.add_argument("--users", type=int, default=5, metavar="K", help="simulated users (default 5)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="give up on reports after S seconds (default 60)",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed, to replay a run")
    parser.add_argument("--base-url", default=None, help="default: BASE_URL, else .state/stack.json")
    parser.add_argument("--secret-key", default=None, help="default: SECRET_KEY, else .state/secrets.json")
    parser.add_argument("--admin-token", default=None, help="default: ADMIN_TOKENS, else .state/secrets.json")
    args = parser.parse_args(argv)
    if args.records < 1 or args.users < 1 or args.timeout <= 0:
        parser.error("--records and --users must be at least 1, --timeout positive")
    args.users = min(args.users, args.records)
    return args


def main(argv: Sequence[str]) -> int:
    # `make demo DEMO_ARGS="--records 200 --users 8"`: make passes its variables to the environment.
    args = parse_args([*shlex.split(os.environ.get("DEMO_ARGS", "")), *argv])
    try:
        return run(args)
    except DemoError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ndemo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
