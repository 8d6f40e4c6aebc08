"""The documents point at what exists: every relative link and anchor of every Markdown file,
and every command a runnable block shows (scripts/docs_check.py says the rules)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import Result

from config.settings import Settings
from scripts import docs_check
from web import create_app

#: A document of each kind the check must see: it would pass for nothing if the walk missed them.
EXPECTED = ("README.md", "docs/operations.md", "docs/configuration.md", "broker/README.md")


def test_the_check_reads_every_document() -> None:
    found = {str(path.relative_to(docs_check.ROOT)) for path in docs_check.markdown_files()}
    assert set(EXPECTED) <= found
    assert not any(".venv" in name for name in found)


def test_every_code_block_is_closed() -> None:
    problems = [str(p) for path in docs_check.markdown_files() for p in docs_check.fence_problems(path)]
    assert problems == [], "\n".join(problems)


def test_every_relative_link_and_anchor_resolves() -> None:
    problems = [str(p) for path in docs_check.markdown_files() for p in docs_check.link_problems(path)]
    assert problems == [], "\n".join(problems)


def test_every_make_target_and_module_a_document_runs_exists() -> None:
    targets = docs_check.make_targets()
    problems = [
        str(p) for path in docs_check.markdown_files() for p in docs_check.command_problems(path, targets)
    ]
    assert problems == [], "\n".join(problems)


def test_every_flask_command_a_document_runs_answers_help() -> None:
    app = create_app(Settings(), environment="test")
    runner = app.test_cli_runner()
    commands = {
        (path, line, tuple(words[3:]))
        for path in docs_check.markdown_files()
        for line, words in docs_check.runnable_commands(path.read_text(encoding="utf-8"))
        if words[:3] == ["flask", "--app", "web"]
    }
    assert commands, "no document shows a flask command: the check would pass for nothing"
    failed = []
    for path, line, words in sorted(commands):
        names = [w for w in words if not w.startswith("-") and w.replace("-", "").isalpha()][:2]
        result: Result = runner.invoke(args=[*_command_path(app, names), "--help"])
        if result.exit_code != 0:
            failed.append(f"{path.relative_to(docs_check.ROOT)}:{line}: flask --app web {' '.join(words)}")
    assert failed == [], "\n".join(failed)


def _command_path(app: object, names: list[str]) -> list[str]:
    """The command and, for a group, its subcommand: `queue stats` of `queue stats --all`,
    `task` of `task TASK_ID`."""
    from flask import Flask

    assert isinstance(app, Flask)
    group = app.cli.commands.get(names[0]) if names else None
    if group is not None and hasattr(group, "commands") and len(names) > 1:
        return names[:2]
    return names[:1]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("What `make run` binds, and where its secrets are", "what-make-run-binds-and-where-its-secrets-are"),
        ("Hot path (Redis first)", "hot-path-redis-first"),
        ("The reconciler: the database owes every report", "the-reconciler-the-database-owes-every-report"),
        ("Soak on Redis Sentinel (`make soak-sentinel`)", "soak-on-redis-sentinel-make-soak-sentinel"),
        ("Upgrade (every form)", "upgrade-every-form"),
        ("Events: which way each takes into `event_log`", "events-which-way-each-takes-into-event_log"),
        ("故障演练 fault drill", "故障演练-fault-drill"),
        ("[0.2.0] - 2026-12-06", "020---2026-12-06"),
    ],
)
def test_anchors_are_slugged_as_github_slugs_them(heading: str, anchor: str) -> None:
    assert docs_check.slug(heading) == anchor


def test_a_repeated_heading_gets_a_numbered_anchor() -> None:
    text = "# A\n\n## Tested\n\n```sh\n# not a heading\n```\n\n## Tested\n"
    assert docs_check.heading_anchors(text) == {"a", "tested", "tested-1"}


def test_a_broken_link_anchor_or_command_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](#page) [gone](missing.md) [bad anchor](#nowhere) `[code](nowhere.md)`\n\n"
        "```sh\nmake run\nmake no-such-target\nMI_X=1 python -m no_such_module --flag\n```\n",
        encoding="utf-8",
    )
    links = [p.what for p in docs_check.link_problems(page)]
    assert links == ["link to a missing file: missing.md", "link to a missing anchor: #nowhere"]
    assert list(docs_check.fence_problems(page)) == []
    commands = [p.what for p in docs_check.command_problems(page, {"run"})]
    assert commands == [
        "no Makefile target no-such-target: make no-such-target",
        "no module no_such_module: python -m no_such_module --flag",
    ]


def test_a_code_block_left_open_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n```\ndiagram\n\n## Not a heading while the block is open\n", encoding="utf-8")
    assert [(p.line, p.what) for p in docs_check.fence_problems(page)] == [
        (3, "a code block opened here is never closed")
    ]
