"""Forgetting a key, on SQLite and PostgreSQL: none of its rows is left in the store, the spool,
the dead letters or the exported files; the checkpoints trained on it are tainted and refused;
the audit entry counts what went and holds no content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_loop.model_registry import (
    TaintedCheckpoint,
    record_checkpoint,
    refuse_tainted,
    write_trained_on,
)
from tests.rl_loop.test_model_registry import write_checkpoint
from tests.traffic.store.scenario import day, inference
from traffic.export import ExportConfig, SplitConfig, export_from_store
from traffic.export.lineage import DatasetLineage, DatasetRef
from traffic.forget import FORGET_ACTION, ForgetScope, forget
from traffic.store import (
    FeedbackRecord,
    InferenceFilter,
    InferenceRecord,
    ShadowRecord,
    StoreBackend,
)
from traffic.store.console_queries import changes
from traffic.store.forgetting import tainted_by
from traffic.store.spool import Spool

GONE, KEPT = "key-forget", "key-keep"


def _chat(key: str, n: int) -> InferenceRecord:
    return inference(
        day(n + 1),
        api_key_id=key,
        episode_id=f"ep-{key}" if n == 0 else None,
        request={"model": "auto", "messages": [{"role": "user", "content": f"{key} asks {n}"}]},
        response={"choices": [{"message": {"role": "assistant", "content": f"{key} says {n}"}}]},
        route_target="frontier-openai",
        tags={"family": "arith"},
    )


def _spool_lines(directory: Path) -> str:
    return "".join(p.read_text() for p in sorted(directory.glob("*.jsonl")))


async def test_forgetting_a_key_leaves_none_of_its_rows_and_taints_what_trained_on_it(
    store_backend: StoreBackend, tmp_path: Path
) -> None:
    store = store_backend
    gone = [_chat(GONE, n) for n in range(3)]
    kept = [_chat(KEPT, n) for n in range(3, 6)]
    await store.insert_inferences(gone + kept)
    await store.insert_feedback(
        [FeedbackRecord(inference_id=r.id, kind="accepted", ts=r.ts) for r in gone + kept]
    )
    await store.insert_shadows(
        [ShadowRecord(inference_id=r.id, target="local", response={"t": "x"}) for r in gone[:2]]
    )
    # Records still waiting in the spool, and dead letters, of both keys.
    spool_dir = tmp_path / "spool"
    spool = Spool(spool_dir, 1 << 20)
    late_gone, late_kept = _chat(GONE, 7), _chat(KEPT, 8)
    spool.append([late_gone, FeedbackRecord(inference_id=late_gone.id, kind="rejected"), late_kept])
    spool.seal()
    spool.dead_letter([(_chat(GONE, 9), "refused"), (_chat(KEPT, 10), "refused")])
    spool.dead_letter(
        [(f'{{"kind": "inference", "record": {{"api_key_id": "{GONE}"'.encode(), "torn")]
    )
    # An export of everything, which a checkpoint trained on; and one the lineage does not link.
    exports = tmp_path / "exports"
    config = ExportConfig(kind="rl_prompts", out_dir=exports / "linked", split=SplitConfig())
    manifest = await export_from_store(store, InferenceFilter(), config)
    loose = config.model_copy(update={"out_dir": exports / "loose", "kind": "sft"})
    await export_from_store(store, InferenceFilter(has_feedback="accepted"), loose)
    assert manifest.lineage is not None
    trained = write_checkpoint(tmp_path, "rl-00000000000a", None)
    ref = DatasetRef(lineage=manifest.lineage, location=str(config.out_dir))
    write_trained_on(trained, [ref])
    await record_checkpoint(store, trained, "candidate")
    child = write_checkpoint(tmp_path, "rl-00000000000b", "rl-00000000000a")
    await record_checkpoint(store, child, "candidate")
    clean = write_checkpoint(tmp_path, "rl-00000000000c", None)
    await record_checkpoint(store, clean, "candidate")

    report = await forget(
        store,
        ForgetScope(key_id=GONE),
        actor="test",
        spool_dirs=[spool_dir],
        export_roots=[exports],
        busy_wait_s=0.01,
    )

    forgotten = {r.id for r in gone} | {late_gone.id}
    # The database: no inference of the key, no feedback or shadow pointing at one.
    rows = [r async for r in store.iter_inferences(with_shadows=True)]
    assert {r.inference.api_key_id for r in rows} == {KEPT}
    assert not {f.inference_id for r in rows for f in r.feedback} & forgotten
    assert all(not r.shadows for r in rows)
    assert report.database == {"inferences": 3, "feedback": 3, "shadows": 2}
    assert report.episodes == 1
    # The spool and the dead letters: the other key's records stay.
    left = _spool_lines(spool_dir)
    assert GONE not in left and not any(i in left for i in forgotten)
    assert late_kept.id in left and f"{KEPT} says 10" in left
    assert report.spool.segments == {"inference": 1, "feedback": 1}
    assert report.spool.dead_letters == 2 and report.spool.busy == []
    # The exports: rewritten without the key's rows, lineage included.
    assert sorted(Path(p).name for p in report.exports.rewritten) == ["linked", "loose"]
    for folder in (exports / "linked", exports / "loose"):
        text = "".join(p.read_text() for p in folder.glob("*.jsonl"))
        assert GONE not in text and KEPT in text
        written = json.loads((folder / "manifest.json").read_text())["lineage"]
        ids = set(DatasetLineage.model_validate(written).ids())
        assert not ids & forgotten and ids & {r.id for r in kept}
    # The checkpoints: the one trained on it and its descendant are tainted and refused.
    assert report.tainted == {"rl-00000000000a": "trained", "rl-00000000000b": "rl-00000000000a"}
    for checkpoint in (trained, child):
        assert await tainted_by(store, checkpoint.name)
        with pytest.raises(TaintedCheckpoint, match="forgotten"):
            await refuse_tainted(store, checkpoint)
        with pytest.raises(TaintedCheckpoint):
            await record_checkpoint(store, checkpoint, "promoted")
    await refuse_tainted(store, clean)
    await record_checkpoint(store, clean, "promoted")
    assert {v.id: v.status for v in await store.list_model_versions()}["rl-00000000000a"] == (
        "candidate"
    )
    # The audit entry: who, what, how many; no content.
    (entry,) = await changes(store, action_prefix=FORGET_ACTION)
    assert (entry.actor, entry.subject, entry.id) == ("test", f"key:{GONE}", report.forget_id)
    assert entry.detail["database"]["inferences"] == 3
    assert entry.detail["keys"] == [GONE]
    audit = json.dumps(entry.detail)
    assert "asks" not in audit and "says" not in audit


async def test_forgetting_again_finds_nothing_and_a_team_means_its_keys(
    store_backend: StoreBackend, tmp_path: Path
) -> None:
    from traffic.store import ApiKeyRecord

    store = store_backend
    for key in (GONE, KEPT):
        team = "team-a" if key == GONE else None
        await store.create_api_key(
            ApiKeyRecord(id=key, name=key, key_hash=f"h-{key}", prefix="sk", spent_usd=0.0)
        )
        await store.set_api_key_consent(key, team_id=team, training_use=None)
    await store.insert_inferences([_chat(GONE, 0), _chat(KEPT, 1)])
    first = await forget(store, ForgetScope(team_id="team-a"), actor="test")
    assert first.keys == [GONE] and first.database["inferences"] == 1
    again = await forget(store, ForgetScope(key_id=GONE), actor="test")
    assert again.database == {"inferences": 0, "feedback": 0, "shadows": 0}
    assert [r.inference.api_key_id async for r in store.iter_inferences()] == [KEPT]
    assert len(await changes(store, action_prefix=FORGET_ACTION)) == 2


async def test_forgetting_before_a_time_takes_every_older_record_and_its_spooled_copy(
    store_backend: StoreBackend, tmp_path: Path
) -> None:
    """``before``: the records made before the time (the time in their id), whatever their key,
    with their feedback, and the spool's copies of records that old; the rest stay."""
    store = store_backend
    rows = [_chat(GONE, 0), _chat(KEPT, 1), _chat(GONE, 3), _chat(KEPT, 4)]  # days 1, 2, 4, 5
    await store.insert_inferences(rows[:3])
    await store.insert_feedback(
        [FeedbackRecord(inference_id=r.id, kind="accepted", ts=day(6)) for r in rows[:3]]
    )
    spool = Spool(tmp_path / "spool", 1 << 20)
    spool.append([rows[1], rows[3]])  # a day-2 copy (also stored) and a day-5 record not yet
    spool.seal()
    scope = ForgetScope(before=day(3))
    report = await forget(store, scope, actor="test", spool_dirs=[tmp_path / "spool"])
    assert report.subject == f"before:{day(3).isoformat()}"
    assert report.database == {"inferences": 2, "feedback": 2, "shadows": 0}
    assert [r.inference.id async for r in store.iter_inferences()] == [rows[2].id]
    left = _spool_lines(tmp_path / "spool")
    assert rows[1].id not in left and rows[3].id in left
    with pytest.raises(ValueError, match="timezone"):
        ForgetScope(before="2026-01-01T00:00:00")  # type: ignore[arg-type]


def test_a_scope_names_exactly_one_thing() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ForgetScope(key_id="a", team_id="b")
    with pytest.raises(ValueError, match="exactly one"):
        ForgetScope()
    with pytest.raises(ValueError, match="not a record id"):
        ForgetScope(inference_id="nope")
