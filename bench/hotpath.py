"""Benchmark: the hot path's batching, side by side with one round trip per item.

    python -m bench.hotpath [--records 2000] [--answers 10] [--events 20000] [--runs 3] [--quick]

Two workloads, each run both ways on the same servers, interleaved run by run:

answers persisted per second (the answer flusher)
  batched   hotpath.answers_flusher.AnswersFlusher: RENAME, HGETALL pipelined per chunk,
            one bulk upsert (INSERT … SELECT FROM unnest … ON CONFLICT DO UPDATE) per chunk
  per item  one HGETALL per record, one INSERT … ON CONFLICT DO UPDATE per answer,
            a commit per record, one SREM per record

log events ingested per second (the event-log consumer)
  batched   hotpath.eventlog_consumer.EventLogConsumer: one Lua call moves a batch into the
            backup list, one multi-row INSERT … ON CONFLICT DO NOTHING, one DEL
  per item  RPOPLPUSH, one INSERT and a commit, LREM, per event

Only keys under `bench:` and records of users from `bench.stores.BENCH_USER_BASE` on are
used; event rows carry the actor "bench". All are deleted afterwards.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from bench import output, stats, stores
from hotpath.answers_flusher import AnswersFlusher
from hotpath.eventlog_consumer import EventLogConsumer
from redis_adapters.autosave_store import RedisAutosaveStore
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.keyspace import AutosaveKeys, EventLogKeys
from services.domain.events import Event, EventType
from services.domain.saved_answers import parse_saved
from services.persistence.db import make_engine, make_session_factory
from services.persistence.event_writes import insert_events

AUTOSAVE_KEYS = AutosaveKeys.default(prefix="bench:hotpath:")
EVENT_KEYS = EventLogKeys.with_prefix("bench:eventlog:")
BENCH_ACTOR = "bench"
ROOT = Path(__file__).resolve().parent.parent

_UPSERT_ONE = text(
    "INSERT INTO answers (record_id, question_id, value, answered_at) VALUES (:r, :q, :v, :t)"
    " ON CONFLICT (record_id, question_id) DO UPDATE SET value = EXCLUDED.value,"
    " answered_at = EXCLUDED.answered_at WHERE answers.answered_at < EXCLUDED.answered_at"
)


# -- set-up ---------------------------------------------------------------------------------------


def migrate(database_url: str) -> None:
    """Bring the database to the current schema (a no-op when it is) and seed the questionnaire."""
    from alembic import command
    from alembic.config import Config

    from services.persistence.questionnaire_seed import seed_questionnaire
    from services.persistence.uow import UnitOfWork

    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.attributes["database_url"] = database_url
    command.upgrade(cfg, "head")
    engine = make_engine(database_url, pool_size=1)
    seed_questionnaire(UnitOfWork(make_session_factory(engine)))
    engine.dispose()


def question_ids(engine: Engine, count: int) -> list[int]:
    with engine.connect() as conn:
        ids = list(
            conn.scalars(text("SELECT id FROM questions WHERE is_active ORDER BY id LIMIT :n"), {"n": count})
        )
    if len(ids) < count:
        raise SystemExit(f"only {len(ids)} active questions; use --answers {len(ids)} or fewer")
    return ids


def make_records(engine: Engine, count: int) -> list[int]:
    with engine.begin() as conn:
        return list(
            conn.scalars(
                text(
                    "INSERT INTO assessment_records (user_id, status)"
                    " SELECT :base + n, 2 FROM generate_series(1, :n) AS n RETURNING id"
                ),
                {"base": stores.BENCH_USER_BASE, "n": count},
            )
        )


def cleanup(client: redis.Redis, engine: Engine) -> None:
    stores.delete_own_keys(client, ("bench:hotpath:*", "bench:eventlog:*"))
    with engine.begin() as conn:
        conn.execute(
            text("DELETE FROM assessment_records WHERE user_id >= :base"), {"base": stores.BENCH_USER_BASE}
        )
        conn.execute(text("DELETE FROM event_log WHERE actor = :actor"), {"actor": BENCH_ACTOR})


def autosave(
    client: redis.Redis, records: Sequence[int], questions: Sequence[int], progress: output.Progress
) -> int:
    """Save `questions` for every record through the real store (the web tier's Lua save)."""
    store = RedisAutosaveStore(client, AUTOSAVE_KEYS)
    for index, record_id in enumerate(records):
        store.prime(record_id, stores.BENCH_USER_BASE + index + 1, 2)
        store.save(
            stores.BENCH_USER_BASE + index + 1, record_id, [(q, 1 + (q + index) % 5) for q in questions]
        )
        progress.step()
    return len(records) * len(questions)


def stored_answer_count(engine: Engine, records: Sequence[int]) -> int:
    with engine.connect() as conn:
        return int(
            conn.scalar(
                text("SELECT count(*) FROM answers WHERE record_id = ANY(:ids)"), {"ids": list(records)}
            )
            or 0
        )


# -- the two ways of flushing answers ---------------------------------------------------------------


def flush_batched(client: redis.Redis, factory: sessionmaker[Session], batch: int) -> None:
    flusher = AnswersFlusher(client, factory, keys=AUTOSAVE_KEYS)
    flusher.run_once(batch=batch)
    flusher.close()


def flush_per_item(client: redis.Redis, factory: sessionmaker[Session], batch: int) -> None:
    from services.domain.saved_answers import from_epoch_ms

    keys = AUTOSAVE_KEYS.answers
    for member in client.smembers(keys.dirty):
        record_id = int(member)
        answers = parse_saved(client.hgetall(keys.item(record_id)), record_id=record_id)
        with factory() as session:
            for qid, saved in answers.items():
                session.execute(
                    _UPSERT_ONE,
                    {"r": record_id, "q": qid, "v": saved.value, "t": from_epoch_ms(saved.saved_ms)},
                )
            session.commit()
        client.srem(keys.dirty, record_id)


# -- the two ways of ingesting events ---------------------------------------------------------------


def emit_events(client: redis.Redis, count: int, progress: output.Progress) -> None:
    sink = RedisEventSink(client, EVENT_KEYS)
    for start in range(0, count, 1000):
        size = min(1000, count - start)
        sink.emit_many(
            [Event.new(EventType.ANSWERS_SAVED, record_id=1, actor=BENCH_ACTOR) for _ in range(size)]
        )
        progress.step(size)


def ingest_batched(client: redis.Redis, factory: sessionmaker[Session], batch: int) -> None:
    consumer = EventLogConsumer(client, factory, keys=EVENT_KEYS)
    while consumer.run_once(batch=batch).taken:
        pass
    consumer.close()


def ingest_per_item(client: redis.Redis, factory: sessionmaker[Session], batch: int) -> None:
    while True:
        raw = client.rpoplpush(EVENT_KEYS.queue, EVENT_KEYS.backup)
        if raw is None:
            return
        with factory() as session:
            insert_events(session, [Event.decode(raw)])
            session.commit()
        client.lrem(EVENT_KEYS.backup, -1, raw)  # type: ignore[arg-type]  # bytes, as redis-py accepts


# -- runs -------------------------------------------------------------------------------------------


def timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    client: redis.Redis = redis.Redis.from_url(args.redis_url or stores.redis_url(), socket_timeout=60)
    database_url = args.database_url or stores.database_url()
    migrate(database_url)
    engine = make_engine(database_url, pool_size=2)
    factory = make_session_factory(engine)
    questions = question_ids(engine, args.answers)
    rates: dict[str, dict[str, list[float]]] = {
        "answers": {"batched": [], "per item": []},
        "events": {"batched": [], "per item": []},
    }
    answer_ways = {"batched": flush_batched, "per item": flush_per_item}
    event_ways = {"batched": ingest_batched, "per item": ingest_per_item}
    machine = output.machine_info(client)
    cleanup(client, engine)
    try:
        for run_index in range(1, args.runs + 1):
            for way, flush in answer_ways.items():
                records = make_records(engine, args.records)
                progress = output.Progress(f"run {run_index} answers, {way}: saving", len(records))
                total = autosave(client, records, questions, progress)
                progress.close()
                seconds = timed(functools.partial(flush, client, factory, args.batch))
                persisted = stored_answer_count(engine, records)
                if persisted != total:
                    raise AssertionError(f"{way}: {persisted} of {total} answers persisted")
                rates["answers"][way].append(total / seconds)
                output.log(f"  answers, {way}: {total} in {seconds:.2f} s = {total / seconds:,.0f}/s")
                cleanup(client, engine)
            for way, ingest in event_ways.items():
                progress = output.Progress(f"run {run_index} events, {way}: emitting", args.events)
                emit_events(client, args.events, progress)
                progress.close()
                seconds = timed(functools.partial(ingest, client, factory, args.batch))
                with engine.connect() as conn:
                    stored = int(
                        conn.scalar(text("SELECT count(*) FROM event_log WHERE actor = 'bench'")) or 0
                    )
                if stored != args.events:
                    raise AssertionError(f"{way}: {stored} of {args.events} events stored")
                rates["events"][way].append(args.events / seconds)
                output.log(
                    f"  events, {way}: {args.events} in {seconds:.2f} s = {args.events / seconds:,.0f}/s"
                )
                cleanup(client, engine)
    finally:
        cleanup(client, engine)
        engine.dispose()
        client.close()
    rows = []
    summary: dict[str, Any] = {}
    for workload, label in (("answers", "answers persisted / s"), ("events", "log events ingested / s")):
        batched = stats.median(rates[workload]["batched"])
        per_item = stats.median(rates[workload]["per item"])
        rows.append([label, batched, per_item, stats.ratio(batched, per_item)])
        summary[workload] = {
            "batched_per_s": batched,
            "per_item_per_s": per_item,
            "ratio": stats.ratio(batched, per_item),
        }
    table = output.print_table(
        f"Hot path: batched vs one round trip per item (median of {args.runs} run(s))",
        ["workload", "batched", "per item", "ratio"],
        rows,
    )
    return {
        "parameters": {
            "records": args.records,
            "answers_per_record": args.answers,
            "events": args.events,
            "runs": args.runs,
            "batch": args.batch,
        },
        "results": summary,
        "raw": rates,
        "table": table,
        "machine": machine,
    }


#: Default sizes, and those of --quick (explicit options win over both).
FULL = {"records": 2_000, "answers": 10, "events": 20_000, "runs": 3}
QUICK = {"records": 200, "answers": 5, "events": 2_000, "runs": 1}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, help=f"records autosaved per run (default {FULL['records']})")
    parser.add_argument("--answers", type=int, help=f"answers per record (default {FULL['answers']})")
    parser.add_argument("--events", type=int, help=f"log events per run (default {FULL['events']})")
    parser.add_argument("--runs", type=int, help=f"interleaved runs (default {FULL['runs']})")
    parser.add_argument("--batch", type=int, default=500, help="records / events per batch (default 500)")
    parser.add_argument(
        "--quick", action="store_true", help="small default sizes, one run, results not written"
    )
    parser.add_argument("--redis-url", default=None, help="default: TEST_REDIS_URL, then REDIS_URL")
    parser.add_argument("--database-url", default=None, help="default: TEST_DATABASE_URL, then DATABASE_URL")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("records", "answers", "events", "runs", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    data = run(args)
    if not args.quick:
        output.write_results("hotpath", data)
    else:
        output.log(json.dumps(data["results"]))
    return data


if __name__ == "__main__":
    main()
