"""The shadow stage's gate: a candidate whose verified shadow answers are surely worse than the
served weights' evidence on a class is named with both intervals; one as good, one with too few
answers, or a class the served weights have no evidence on, is not (a real SQLite record)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

from rl_loop.outcomes import VerdictCache, verify_shadows
from rl_loop.shadow_gate import shadow_regressions
from router.learned import ArmCounts, LearnedState
from tests.rl_loop.test_refit import chat, inference, verify
from traffic.store import ShadowRecord, SqliteBackend


async def _record(store: SqliteBackend, answers: dict[str, tuple[int, int]]) -> None:
    """Per family, (good, bad) shadow answers of the candidate ``v2`` on frontier-served rows,
    and one shadow of the served weights ``v1`` that must not count."""
    rows, shadows = [], []
    for family, (good, bad) in answers.items():
        for i in range(good + bad):
            rec = inference(family, "frontier", "ok")
            rows.append(rec)
            answer = "ok" if i < good else "bad"
            shadows.append(
                ShadowRecord(
                    inference_id=rec.id,
                    target="local",
                    response=chat(answer),
                    comparison={"weights_version": "v2"},
                )
            )
    rec = inference("naming", "frontier", "ok")
    rows.append(rec)
    served = {"weights_version": "v1"}
    shadows.append(
        ShadowRecord(inference_id=rec.id, target="local", response=chat("bad"), comparison=served)
    )
    await store.insert_inferences(rows)
    await store.insert_shadows(shadows)


async def test_a_class_the_candidate_regressed_on_is_named_and_no_other(tmp_path: Path) -> None:
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    since = datetime.now(UTC) - timedelta(seconds=1)
    # naming: 5/40 against the served 90/100; math: 36/40 against 90/100 (as good);
    # tests: 0/10 (too few to judge); docs: 0/40 but the served weights have no evidence there
    await _record(store, {"naming": (5, 35), "math": (36, 4), "tests": (0, 10), "docs": (0, 40)})
    rows = [r async for r in store.iter_inferences(None, with_shadows=True)]
    cache = VerdictCache(tmp_path / "verdicts.json")
    verify_shadows(rows, verify, cache, "local")
    served = {"local": ArmCounts(90, 10)}
    live = LearnedState("fit-v1", {"naming": served, "math": served, "tests": served})
    found = await shadow_regressions(
        store, since, "v2", {"served": live}, class_tags=["family"], local_target="local",
        frontier_prefix="frontier", cache=cache,
    )  # fmt: skip
    assert list(found) == ["naming"]
    naming = found["naming"]
    assert naming["candidate"] == {"accepted": 5, "answers": 40}  # the v1 shadow left out
    assert naming["served"] == {"accepted": 90, "answers": 100}
    cand_low, cand_high = cast(list[float], naming["candidate_bounds"])
    live_low = cast(list[float], naming["served_bounds"])[0]
    assert cand_low < 5 / 40 < cand_high < live_low < 0.9
    later = await shadow_regressions(
        store, datetime.now(UTC) + timedelta(seconds=1), "v2", {"served": live},
        class_tags=["family"], local_target="local", frontier_prefix="frontier", cache=cache,
    )  # fmt: skip
    assert later == {}  # only the stage's own window counts
    await store.close()


async def test_live_answers_far_under_the_candidates_gate_roll_it_back_where_nothing_was_served(
    tmp_path: Path,
) -> None:
    """The served weights never answered a class locally (a base model: no evidence), so
    nothing can be regressed from; the candidate's gate claimed 23/24 there, live shadows say
    6/40: the gate was fooled, and the class is named against ``gate`` only. A class whose
    shadows match its gate (math) is not."""
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    since = datetime.now(UTC) - timedelta(seconds=1)
    await _record(store, {"naming": (6, 34), "math": (20, 20)})
    rows = [r async for r in store.iter_inferences(None, with_shadows=True)]
    cache = VerdictCache(tmp_path / "verdicts.json")
    verify_shadows(rows, verify, cache, "local")
    live = LearnedState("fit-v1", {})
    gate = LearnedState(
        "fit-v2", {"naming": {"local": ArmCounts(23, 1)}, "math": {"local": ArmCounts(13, 11)}}
    )
    found = await shadow_regressions(
        store, since, "v2", {"served": live, "gate": gate}, class_tags=["family"],
        local_target="local", frontier_prefix="frontier", cache=cache,
    )  # fmt: skip
    assert list(found) == ["naming"]
    assert "served" not in found["naming"]
    assert found["naming"]["gate"] == {"accepted": 23, "answers": 24}
    await store.close()


async def test_a_shadow_of_an_unlabelled_request_is_left_unjudged(tmp_path: Path) -> None:
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    labelled, unlabelled = (
        inference("naming", "frontier", "ok"),
        inference("naming", "frontier", "ok"),
    )
    unlabelled = dataclasses.replace(unlabelled, tags={})  # the client has not joined its label yet
    await store.insert_inferences([labelled, unlabelled])
    await store.insert_shadows(
        [
            ShadowRecord(inference_id=r.id, target="local", response=chat("ok"), comparison={})
            for r in (labelled, unlabelled)
        ]
    )
    rows = [r async for r in store.iter_inferences(None, with_shadows=True)]
    cache = VerdictCache(tmp_path / "verdicts.json")
    assert verify_shadows(rows, verify, cache, "local") == 1
    judged = {row.inference.id for row in rows for s in row.shadows if s.id in cache.data}
    assert judged == {labelled.id}  # judged later, once labelled; never cached as a failure
    await store.close()
