"""Retention on SQLite and PostgreSQL: a pass deletes exactly the records past their key's window
(its own, its team's, the default), with their feedback, shadow answers, spooled copies and
exported rows, keeps every other, and leaves one audit entry without content; on PostgreSQL a
day wholly past is a partition drop, a day mostly past a rebuild around what stays."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

import traffic.retention as retention_module
from traffic.erase import find_in_spool
from traffic.export import ExportConfig, SplitConfig, export_from_store
from traffic.export.lineage import DatasetLineage
from traffic.retention import (
    RETENTION_ACTION,
    RETENTION_ACTOR,
    id_day,
    retention_pass,
    scheduled_pass,
)
from traffic.store import (
    ApiKeyRecord,
    FeedbackRecord,
    InferenceFilter,
    InferenceRecord,
    ShadowRecord,
    StoreBackend,
    StoreConfig,
)
from traffic.store.console_queries import changes, sql_store
from traffic.store.partition_sql import day_bounds, day_partition
from traffic.store.retention_windows import key_subject, resolve_windows, set_window, team_subject
from traffic.store.spool import Spool
from traffic.store.spool_forget import SpoolScope

from .scenario import inference

NOW = datetime(2025, 3, 20, 12, tzinfo=UTC)
DEFAULT_DAYS = 10  # anonymous calls and keys without a window: days before 03-10 go
SHORT, LONG, LEGAL = "key-short", "key-long", "key-legal"  # 3 days, 15 days, the team's: forever


def _at(d: int, key: str | None, n: int = 0) -> InferenceRecord:
    return inference(
        datetime(2025, 3, d, 8, n, tzinfo=UTC),
        api_key_id=key,
        request={"model": "auto", "messages": [{"role": "user", "content": f"{key} asks {d}"}]},
        response={"choices": [{"message": {"role": "assistant", "content": f"{key} says {d}"}}]},
    )


# day -> keys of its rows; what stays on 2025-03-20 with the windows above.
ROWS: dict[int, list[str | None]] = {
    2: [None, SHORT, LONG],  # all past: a drop on PostgreSQL
    3: [None, None, None, LEGAL],  # one kept of four: a rebuild
    6: [None, LONG, LONG, LONG],  # one past of four: row deletes
    12: [None, SHORT, LEGAL],  # only the short key's past
    18: [None, SHORT],  # none past
}
KEPT = {(3, LEGAL), (6, LONG), (12, None), (12, LEGAL), (18, None), (18, SHORT)}


async def _keys(store: StoreBackend) -> None:
    for key in (SHORT, LONG, LEGAL):
        await store.create_api_key(ApiKeyRecord(id=key, name=key, key_hash=f"h-{key}", prefix="sy"))
    await store.set_api_key_consent(LEGAL, team_id="legal", training_use=None)
    await set_window(store, key_subject(SHORT), 3)
    await set_window(store, key_subject(LONG), 15)
    await set_window(store, team_subject("legal"), None)


async def _partitioned(store: StoreBackend, days: list[int]) -> set[str]:
    """PostgreSQL: the days' partitions made (as the pass makes them ahead); their names."""
    s = sql_store(store)
    if s.codec.dialect != "postgres":
        return set()
    from traffic.store.partitions import DayPartitions
    from traffic.store.postgres_backend import PostgresBackend

    assert isinstance(s, PostgresBackend)
    parts = await DayPartitions.open(s.dsn)
    try:
        await parts.ensure(date(2025, 3, d) for d in days)
        tables = ("inference", "feedback", "shadow")
        return {sp.name for t in tables for sp in await parts.spans(t)}
    finally:
        await parts.close()


async def _stored(store: StoreBackend) -> set[tuple[int, str | None]]:
    rows = [r async for r in store.iter_inferences()]
    return {(id_day(r.inference.id).day, r.inference.api_key_id) for r in rows}


async def _scenario(store: StoreBackend) -> list[InferenceRecord]:
    await _keys(store)
    await _partitioned(store, sorted(ROWS))
    records = [_at(d, key, n) for d, keys in ROWS.items() for n, key in enumerate(keys)]
    await store.insert_inferences(records)
    await store.insert_feedback(
        [FeedbackRecord(inference_id=r.id, kind="accepted", ts=r.ts) for r in records]
    )
    await store.insert_shadows(
        [ShadowRecord(inference_id=r.id, target="local", response={"t": "x"}) for r in records]
    )
    return records


async def test_a_pass_deletes_exactly_what_is_past_its_keys_window(
    store_backend: StoreBackend, tmp_path: Path
) -> None:
    store = store_backend
    records = await _scenario(store)
    exports = tmp_path / "exports"
    config = ExportConfig(kind="rl_prompts", out_dir=exports / "all", split=SplitConfig())
    await export_from_store(store, InferenceFilter(), config)
    spool_dir = tmp_path / "spool"
    spool = Spool(spool_dir, 1 << 20)
    late_past, late_kept = _at(1, SHORT, 9), _at(19, SHORT, 9)
    spool.append([late_past, FeedbackRecord(inference_id=late_past.id, kind="edited"), late_kept])
    spool.seal()
    spool.dead_letter([(_at(1, None, 8), "refused"), (_at(19, None, 8), "refused")])

    report = await retention_pass(
        store, DEFAULT_DAYS, now=NOW, spool_dirs=[spool_dir], export_roots=[exports]
    )

    assert await _stored(store) == KEPT
    gone = {r.id for r in records if (id_day(r.id).day, r.api_key_id) not in KEPT}
    rows = [r async for r in store.iter_inferences(with_shadows=True)]
    assert all(len(r.feedback) == 1 and len(r.shadows) == 1 for r in rows)
    assert report.deleted == {"inferences": len(gone), "feedback": len(gone), "shadows": len(gone)}
    postgres = sql_store(store).codec.dialect == "postgres"
    methods = {d.day.day: d.method for d in report.days}
    expected = {2: "drop", 3: "rebuild", 6: "delete", 12: "delete"}
    assert methods == (expected if postgres else dict.fromkeys(expected, "delete"))
    # The spool and the dead letters: what is past goes, with its feedback.
    left = "".join(p.read_text() for p in sorted(spool_dir.glob("*.jsonl")))
    assert late_past.id not in left and late_kept.id in left
    assert "None asks 19" in left and 'None asks 1"' not in left
    assert report.spool.segments == {"inference": 1, "feedback": 1}
    assert report.spool.dead_letters == 1
    # The export: rewritten without them.
    written = json.loads((exports / "all" / "manifest.json").read_text())["lineage"]
    listed = set(DatasetLineage.model_validate(written).ids())
    assert listed and not listed & gone and report.exports.rewritten
    # One audit entry, by "retention", of counts only.
    (entry,) = await changes(store, action_prefix=RETENTION_ACTION)
    assert (entry.actor, entry.id) == (RETENTION_ACTOR, report.retention_id)
    assert entry.detail["deleted"]["inferences"] == len(gone)
    audit = json.dumps(entry.detail)
    assert "asks" not in audit and "says" not in audit
    # Run again: nothing left to do, no entry.
    again = await retention_pass(store, DEFAULT_DAYS, now=NOW, spool_dirs=[spool_dir])
    assert again.days == [] and not again.changed
    assert len(await changes(store, action_prefix=RETENTION_ACTION)) == 1


async def test_the_spool_is_scanned_once_a_pass_whatever_the_days_expired(
    store_backend: StoreBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _scenario(store_backend)
    spool_dir = tmp_path / "spool"
    spool = Spool(spool_dir, 1 << 20)
    early, late = _at(2, SHORT, 9), _at(6, SHORT, 9)  # spooled copies of two expiring days
    spool.append([early, late, FeedbackRecord(inference_id=late.id, kind="edited")])
    spool.seal()
    scans: list[object] = []
    real = find_in_spool

    async def counted(dirs: list[Path], scope: object) -> set[str]:
        scans.append(scope)
        assert isinstance(scope, SpoolScope)
        return await real(dirs, scope)

    monkeypatch.setattr(retention_module, "find_in_spool", counted)
    report = await retention_pass(store_backend, DEFAULT_DAYS, now=NOW, spool_dirs=[spool_dir])
    assert len(report.days) == 4 and len(scans) == 1
    assert report.spool.segments == {"inference": 2, "feedback": 1}
    left = "".join(p.read_text() for p in sorted(spool_dir.glob("*.jsonl")))
    assert early.id not in left and late.id not in left


async def test_a_drop_takes_the_days_partitions_and_a_rebuild_keeps_them(
    store_backend: StoreBackend,
) -> None:
    store = store_backend
    await _scenario(store)
    if sql_store(store).codec.dialect != "postgres":
        return  # SQLite has no partitions: the test above covers its row deletes
    before = await _partitioned(store, [])
    assert {day_partition(t, date(2025, 3, 2)) for t in ("inference", "feedback")} <= before
    await retention_pass(store, DEFAULT_DAYS, now=NOW)
    after = await _partitioned(store, [])
    assert day_partition("inference", date(2025, 3, 2)) not in after
    assert day_partition("shadow", date(2025, 3, 2)) not in after
    assert day_partition("inference", date(2025, 3, 3)) in after  # rebuilt, holding the kept
    # Made ahead: today and a week on.
    assert {day_partition("inference", date(2025, 3, d)) for d in range(20, 28)} <= after
    lo, hi = day_bounds(date(2025, 3, 3))
    rows = await sql_store(store)._fetch(
        "SELECT api_key_id FROM inference_d20250303 WHERE id >= %s AND id < %s", [lo, hi]
    )
    assert [r[0] for r in rows] == [LEGAL]


async def test_a_dry_run_says_what_would_go_and_changes_nothing(
    store_backend: StoreBackend,
) -> None:
    store = store_backend
    await _scenario(store)
    stored = await _stored(store)
    report = await retention_pass(store, DEFAULT_DAYS, now=NOW, dry_run=True)
    assert [(d.day.day, d.expired, d.kept) for d in report.days] == [
        (2, 3, 0),
        (3, 3, 1),
        (6, 1, 3),
        (12, 1, 2),
    ]
    assert await _stored(store) == stored
    assert await changes(store, action_prefix=RETENTION_ACTION) == []


async def test_row_deletes_alone_leave_what_partitions_leave(store_backend: StoreBackend) -> None:
    store = store_backend
    await _scenario(store)
    report = await retention_pass(store, DEFAULT_DAYS, now=NOW, partitions=False)
    assert {d.method for d in report.days} == {"delete"}
    assert await _stored(store) == KEPT


async def test_a_key_window_wins_over_its_teams_and_the_default(
    store_backend: StoreBackend,
) -> None:
    store = store_backend
    await _keys(store)
    windows = await resolve_windows(store, 30)
    assert (windows.of(SHORT), windows.of(LONG), windows.of(LEGAL), windows.of(None)) == (
        3,
        15,
        None,
        30,
    )
    assert windows.shortest == 3
    await set_window(store, key_subject(LEGAL), 1)
    assert (await resolve_windows(store, 30)).of(LEGAL) == 1
    nothing = await retention_pass(store, None, now=NOW)  # nothing stored: nothing to do
    assert not nothing.changed and nothing.deleted == dict.fromkeys(nothing.deleted, 0)


async def test_the_scheduled_pass_uses_the_store_configs_window_and_spool(
    store_backend: StoreBackend, store_config: StoreConfig, tmp_path: Path
) -> None:
    store = store_backend
    await _scenario(store)
    spool_dir = tmp_path / "spool"
    spool = Spool(spool_dir, 1 << 20)
    spooled = _at(1, None, 9)
    spool.append([spooled])
    spool.seal()
    config = store_config.model_copy(update={"retention_days": 1, "spool_dir": spool_dir})
    await scheduled_pass(store, config)
    # Today, months past every day of the scenario: only the forever team's key keeps its rows.
    assert await _stored(store) == {(3, LEGAL), (12, LEGAL)}
    assert spooled.id not in "".join(p.read_text() for p in spool_dir.glob("*.jsonl"))
    assert len(await changes(store, action_prefix=RETENTION_ACTION)) == 1
