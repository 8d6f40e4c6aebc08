"""The demo's terminal output, laid out by rich: the progress bar, the summary and the report.

rich measures text in terminal cells, so Chinese names and texts (two cells a character)
line up and wrap where they should. Plain text throughout (markup off): the figures and
the report's texts are shown as they are, with colour only on a terminal that has it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import IO, Any

from rich.cells import cell_len, chop_cells
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from scripts.demo_lib.client import Target
from scripts.demo_lib.simulation import POLL_INTERVAL_S, RunState, SimUser, report_completed_at
from scripts.demo_lib.stats import Latency, Summary
from services.domain.status import RecordStatus

#: Cells of the progress bar and of a dimension's score bar.
BAR_WIDTH = 30
SCORE_BAR_WIDTH = 20
#: The report is laid out at most this wide, so its summary wraps like a page, not a screen.
REPORT_WIDTH = 86
#: Without a terminal (output piped or logged), a progress line every this many seconds,
#: and lines laid out this wide: a log has no width to wrap at, so summary rows stay whole.
LINE_INTERVAL_S = 2.0
LOG_WIDTH = 160
QUEUE_FIGURES = ("queued", "delayed", "inFlight", "dead", "invalid")


def make_console(file: IO[str] | None = None) -> Console:
    # markup off: "[" in a message is text; highlight off: numbers keep the terminal's colour.
    console = Console(file=file, markup=False, highlight=False, emoji=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = LOG_WIDTH
    return console


def print_block(console: Console, renderable: RenderableType) -> None:
    """`renderable` without the blanks rich pads table cells with at the end of a line."""
    with console.capture() as captured:
        console.print(renderable)
    console.out("\n".join(line.rstrip() for line in captured.get().splitlines()), highlight=False)


def banner(
    console: Console, target: Target, *, seed: int, records: int, users: Sequence[SimUser], questions: int
) -> None:
    console.print(
        f"mi-assessment demo against {target.base_url} (from {target.source}), seed {seed}", soft_wrap=True
    )
    console.print(
        f"  {records} records, {len(users)} users, {questions} questions each: "
        + ", ".join(f"user {u.user_id} {u.profile}" for u in users),
        soft_wrap=True,
    )


class _Elapsed(ProgressColumn):
    """Seconds since the start, with a tenth (rich's own column shows h:mm:ss)."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.elapsed or 0.0:5.1f} s")


def progress_text(state: RunState) -> str:
    failed = state.count(RecordStatus.FAILED)
    return f"completed · {failed} failed · {state.submitted()}/{state.total} submitted"


class ReportsBar:
    """The reports completed so far: a live bar on a terminal, else a line every few seconds."""

    def __init__(self, console: Console, state: RunState) -> None:
        self.console = console
        self.state = state
        self.started = time.monotonic()
        self.last_line = float("-inf")
        self.live: Progress | None = None
        self.task = TaskID(0)
        if console.is_terminal:
            self.live = Progress(
                TextColumn("  reports"),
                BarColumn(bar_width=BAR_WIDTH),
                TaskProgressColumn(text_format="{task.completed:>4.0f}/{task.total:.0f}"),
                TextColumn("{task.description}"),
                _Elapsed(),
                console=console,
                refresh_per_second=10,
            )
            self.task = self.live.add_task(progress_text(state), total=state.total)
            self.live.start()

    def draw(self, *, final: bool = False) -> None:
        completed = self.state.count(RecordStatus.COMPLETED)
        if self.live is not None:
            self.live.update(self.task, completed=completed, description=progress_text(self.state))
            if final:
                self.live.stop()
            return
        if final or time.monotonic() - self.last_line >= LINE_INTERVAL_S:
            elapsed = time.monotonic() - self.started
            self.console.print(
                f"  reports {completed:>4}/{self.state.total} {progress_text(self.state)} · {elapsed:5.1f} s",
                soft_wrap=True,
            )
            self.last_line = time.monotonic()


def _latency(latency: Latency) -> str:
    return f"p50 {latency.p50:.2f} s   p95 {latency.p95:.2f} s   max {latency.max:.2f} s"


def summary_table(
    summary: Summary,
    *,
    users: int,
    elapsed: float,
    timed_out: bool,
    timeout: float,
    queue: dict[str, Any] | str,
) -> Table:
    """The summary as README shows it: one row per figure; `queue` is the admin's queue
    figures, or why they are unavailable."""
    table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), title_justify="left")
    table.add_column("figure", no_wrap=True)
    table.add_column("value")
    table.add_row(
        "submitted",
        f"{summary.submitted}/{summary.total} records in {summary.submitting_took:.1f} s"
        f" ({users} users in parallel)",
    )
    completed = (
        f"{summary.completed}/{summary.total}   failed {summary.failed}"
        f"   still generating {summary.still_generating}"
        f"   (all done {elapsed:.1f} s after the start)"
    )
    if timed_out and summary.still_generating:
        completed += f"   (gave up after --timeout {timeout:g} s)"
    table.add_row("completed", completed)
    if summary.server:
        table.add_row(
            "submit → report", f"{_latency(summary.server)}   (server clock: submittedAt → completedAt)"
        )
    if summary.seen_by_users:
        table.add_row(
            "seen by users",
            f"{_latency(summary.seen_by_users)}"
            f"   (status polled every {POLL_INTERVAL_S:g} s, through the same web workers)",
        )
    if isinstance(queue, dict):
        table.add_row("queue now", "   ".join(f"{key} {queue.get(key, '?')}" for key in QUEUE_FIGURES))
    else:
        table.add_row("queue figures", f"unavailable: {queue}")
    if summary.errors:
        table.add_row("errors", f"{len(summary.errors)} request(s) failed, the first: {summary.errors[0]}")
    return table


def print_summary(console: Console, table: Table) -> None:
    console.print()
    console.print("  summary")
    print_block(console, Padding(table, (0, 0, 0, 4)))


def report_view(report: dict[str, Any], user: SimUser, *, width: int = REPORT_WIDTH) -> RenderableType:
    """A finished report: a heading, one row per dimension with its score bar, the strengths
    and the summary text, at most `width` cells wide (the indent aside)."""
    dimensions = report["dimensions"]
    names = {d["code"]: d["name"] for d in dimensions}
    completed = report_completed_at(report)
    when = completed.astimezone().strftime("%Y-%m-%d %H:%M:%S") if completed else "?"
    heading = Text(
        f"多元智能测评报告 · 记录 {report['recordId']}"
        f"（用户 {report['userId']}，画像「{user.profile}」）\n完成于 {when}"
    )

    scores = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
    scores.add_column("rank", justify="right", no_wrap=True)
    scores.add_column("dimension", no_wrap=True)
    scores.add_column("bar", no_wrap=True)
    scores.add_column("score", justify="right", no_wrap=True)
    scores.add_column("level", no_wrap=True)
    for d in dimensions:
        score = float(d["score"])
        cells = round(score / 100 * SCORE_BAR_WIDTH)
        bar = "█" * cells + "░" * (SCORE_BAR_WIDTH - cells)
        scores.add_row(f"{d['rank']}.", d["name"], bar, f"{score:.1f}", d["level"])

    labels = ("优势智能：", "总结：")
    text_width = max(10, width - max(cell_len(label) for label in labels))
    text = Table(box=None, show_header=False, padding=(0, 0, 0, 0))
    text.add_column("label", no_wrap=True)
    text.add_column("text", no_wrap=True)
    strengths = "、".join(names.get(code, code) for code in report["topDimensions"])
    for label, value in zip(labels, (strengths, report["summary"]), strict=True):
        # Broken at any character, by cell width: Chinese has no spaces to wrap at.
        text.add_row(label, "\n".join(line.lstrip() for line in chop_cells(value, text_width)))
    return Padding(Group(heading, Text(""), scores, Text(""), text), (0, 0, 0, 2))


def print_report(console: Console, report: dict[str, Any], user: SimUser) -> None:
    console.print()
    print_block(console, report_view(report, user, width=min(REPORT_WIDTH, console.width - 2)))
