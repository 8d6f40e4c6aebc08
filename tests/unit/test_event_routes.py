"""Each event type's route is decided once (`ROUTES`, services/domain/events.py), and docs/events.md
lists the same: a type, a route, what happens when Redis or PostgreSQL refuses."""

from __future__ import annotations

import re

import pytest

from services.domain.events import (
    ROUTES,
    Event,
    EventType,
    MisroutedEvent,
    Route,
    emit,
    routed,
    routes_of,
)
from services.persistence.event_writes import change_logged
from tests.support.source_files import ROOT

DOC = ROOT / "docs" / "events.md"
#: A row of the doc's table: its event type (in backticks), who writes it, its route.
ROW = re.compile(r"^\| `(?P<type>[a-z_.<>]+)` \| [^|]+ \| (?P<route>[^|]+) \|", re.MULTILINE)


def documented() -> dict[str, frozenset[Route]]:
    """type -> the routes its row names."""
    rows = {m["type"]: m["route"] for m in ROW.finditer(DOC.read_text(encoding="utf-8"))}
    return {
        kind: frozenset(r for r in Route if re.search(rf"^{r.value}\b|\b{r.value} when", cell))
        for kind, cell in rows.items()
    }


def test_every_type_has_a_route() -> None:
    assert set(ROUTES) == set(EventType)
    assert all(ROUTES[kind] for kind in EventType)


def test_the_doc_lists_every_type_with_its_route() -> None:
    assert documented() == {**ROUTES, "admin.<action>": frozenset({Route.AUDIT})}


def test_admin_actions_are_audited_and_other_types_take_no_route() -> None:
    assert routes_of("admin.requeue") == {Route.AUDIT}
    assert routes_of("nothing.known") == frozenset()
    with pytest.raises(MisroutedEvent):
        routed("nothing.known", Route.QUEUE)


@pytest.mark.parametrize("kind", [k for k in EventType if Route.QUEUE not in ROUTES[k]])
def test_emit_refuses_a_type_that_goes_with_its_change(kind: EventType) -> None:
    with pytest.raises(MisroutedEvent):
        emit(None, Event.new(kind, record_id=1))


@pytest.mark.parametrize("kind", [k for k in EventType if Route.CHANGE not in ROUTES[k]])
def test_a_change_statement_refuses_a_type_that_goes_through_the_queue(kind: EventType) -> None:
    with pytest.raises(MisroutedEvent):
        change_logged(kind, "added")
