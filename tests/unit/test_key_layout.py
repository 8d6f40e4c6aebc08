"""The two key layouts: the default keeps today's names (the .NET producer's `report:queue`),
the hash-tagged one puts every key a script or a transaction uses together in one slot."""

from __future__ import annotations

import re
from importlib import resources

import pytest
from listbroker.keys import HEARTBEATS_KEY, QueueKeys, owner_of_processing, queue_key, started_of_processing
from listbroker.scripts import script_names, source
from redis.crc import key_slot

from config import ConfigError
from config.settings import Settings
from redis_adapters.keyspace import AutosaveKeys, Keyspace, family_prefix

SCRIPTS = script_names()


def queue_family(keys: QueueKeys) -> list[str]:
    """Every key of a queue a script touches: lists, sets, hashes, heartbeats, processing lists."""
    processing = keys.processing("0123456789abcdef")
    owner = owner_of_processing(processing)
    assert owner is not None
    return [
        keys.queue,
        keys.dead,
        keys.invalid,
        keys.delayed,
        keys.crashed,
        keys.jobs,
        keys.counted,
        keys.heartbeats,
        processing,
        *owner,
        keys.started("0123456789abcdef"),
    ]


def autosave_family(keys: AutosaveKeys) -> list[str]:
    flows = [keys.answers, keys.progress]
    return [
        keys.record(7),
        keys.record(2**63 - 1),
        *[k for f in flows for k in (f.item(7), f.item(123456), f.dirty, f.syncing, f.lock, f.invalid)],
    ]


def one_slot(keys: list[str]) -> bool:
    return len({key_slot(k.encode()) for k in keys}) == 1


def test_default_names_are_unchanged() -> None:
    keys = Keyspace.of()
    assert keys.report == QueueKeys(
        queue="report:queue",
        dead="report:queue:dead",
        invalid="report:queue:invalid",
        delayed="report:queue:delayed",
        crashed="report:queue:crashed",
        jobs="report:queue:jobs",
        counted="report:queue:counted",
        heartbeats="broker:heartbeats",
    )
    assert keys.report.heartbeats == HEARTBEATS_KEY
    assert keys.report.processing("abc") == "report:queue:processing:abc"
    assert keys.autosave == AutosaveKeys.default()
    assert keys.autosave.record(5) == "hotpath:record:5"
    assert keys.autosave.answers.item(5) == "hotpath:answers:5"
    assert keys.autosave.progress.dirty == "hotpath:progress:dirty"
    assert keys.autosave.answers.lock == "hotpath:answers:lock"
    assert (keys.eventlog.queue, keys.eventlog.backup, keys.eventlog.invalid, keys.eventlog.lock) == (
        "eventlog:queue",
        "eventlog:backup",
        "eventlog:invalid",
        "eventlog:lock",
    )
    assert keys.hotpath_settings == "hotpath:settings"


def test_hash_tagged_names() -> None:
    keys = Keyspace.of(hash_tags=True)
    assert keys.report.queue == "{report}:queue"
    assert keys.report.dead == "{report}:queue:dead"
    assert keys.report.heartbeats == "{report}:queue:heartbeats"
    assert keys.report.processing("abc") == "{report}:queue:processing:abc"
    assert keys.autosave.answers.dirty == "{hotpath}:answers:dirty"
    assert keys.eventlog.queue == "{eventlog}:queue"
    assert keys.hotpath_settings == "{hotpath}:settings"


@pytest.mark.parametrize("queue_name", ["report", "default", "bench-noop.DQ"])
def test_every_key_of_a_hash_tagged_queue_is_in_one_slot(queue_name: str) -> None:
    assert one_slot(queue_family(QueueKeys.for_queue(queue_name, hash_tag=True)))


def test_every_key_of_a_hash_tagged_hot_path_family_is_in_one_slot() -> None:
    keys = Keyspace.of(hash_tags=True)
    assert one_slot(autosave_family(keys.autosave))
    e = keys.eventlog
    assert one_slot([e.queue, e.backup, e.invalid, e.lock])


def test_the_default_layout_spans_slots() -> None:
    """Why the default layout cannot run on a cluster (and the test above is not vacuous)."""
    keys = Keyspace.of()
    assert not one_slot(queue_family(keys.report))
    assert not one_slot(autosave_family(keys.autosave))


def test_queue_names_with_braces_are_refused_when_hash_tagged() -> None:
    assert queue_key("a{b}") == "a{b}:queue"  # the default layout takes any name, as before
    with pytest.raises(ValueError, match="braces"):
        queue_key("a{b}", hash_tag=True)


def test_owner_of_processing() -> None:
    assert owner_of_processing("{report}:queue:processing:x") == (
        "{report}:queue",
        "{report}:queue:crashed",
        "{report}:queue:counted",
    )
    assert owner_of_processing("report:queue:processing:x") == (
        "report:queue",
        "report:queue:crashed",
        "report:queue:counted",
    )
    assert owner_of_processing("something-else") is None
    assert owner_of_processing(":processing:x") is None
    assert started_of_processing("{report}:queue:processing:x") == "{report}:queue:started:x"
    assert started_of_processing("report:queue:processing:x") == QueueKeys.for_queue("report").started("x")
    assert started_of_processing("something-else") is None
    assert family_prefix("hotpath") == "hotpath:"
    assert family_prefix("hotpath", hash_tag=True) == "{hotpath}:"


@pytest.mark.parametrize("name", SCRIPTS)
def test_no_script_builds_a_key(name: str) -> None:
    """Every key comes in KEYS: a key built in Lua (`q .. ':crashed'`) would be undeclared,
    and on a cluster possibly on another node."""
    body = resources.files("listbroker").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    code = "\n".join(line.split("--", 1)[0] for line in source(name).splitlines())
    assert not re.search(r"\.\.\s*'[:{]", code), body
    # The job index's prologue (_index.lua) searches payloads, never key names.
    own = "\n".join(line.split("--", 1)[0] for line in body.splitlines())
    assert "string.find" not in own


def test_the_setting() -> None:
    assert not Settings.from_env({}).redis_hash_tags
    assert Settings.from_env({"REDIS_HASH_TAGS": "1"}).redis_hash_tags
    cluster = Settings.from_env({"REDIS_URL": "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"})
    assert cluster.redis_hash_tags
    with pytest.raises(ConfigError, match="REDIS_HASH_TAGS"):
        Settings.from_env({"REDIS_URL": "redis+cluster://127.0.0.1:7000", "REDIS_HASH_TAGS": "0"})
    with pytest.raises(ConfigError, match="REDIS_HASH_TAGS"):
        Settings.from_env({"REDIS_HASH_TAGS": "maybe"})
