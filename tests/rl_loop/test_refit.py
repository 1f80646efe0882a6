"""Routing follows the model: outcomes from the record (live feedback per arm, verified shadow
answers) and the gate's held-out answers refit the learned policy, the state file is written,
the gateway is told to reload, and a candidate state can be replayed on the record."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from rl_loop import refit_cli
from rl_loop import replay as replay_cli
from rl_loop.config import RefitConfig
from rl_loop.evaluate import ItemResult, ModelEval
from rl_loop.outcomes import Arm, RecordedOutcome, VerdictCache, answer_text
from rl_loop.refit import fit_state, refit_policy
from rl_loop.ship import indistinguishable_classes
from router.chat_text import request_text
from router.config import LearnedConfig, RoutingConfig
from router.features import RequestFeatures
from router.learned import LearnedPolicy, LearnedState, Outcome
from router.policy import RulePolicy
from router.request_text import RequestText
from traffic.store import FeedbackKind, FeedbackRecord, InferenceRecord, ShadowRecord, SqliteBackend


def chat(text: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def inference(family: str, target: str, answer: str, weights: str | None = None) -> InferenceRecord:
    return InferenceRecord(
        endpoint="chat.completions",
        wire_format="openai.chat",
        request={"model": "auto", "messages": [{"role": "user", "content": f"a {family} task"}]},
        response=chat(answer),
        route_target=target,
        served_model="switchyard-local" if target == "local" else "gpt-4o",
        weights_version=weights,
        status=200,
        latency_ms=40.0 if target == "local" else 600.0,
        cost_usd=0.0001 if target == "local" else 0.002,
        tags={"family": family, "expected": "ok"},
    )


def verify(tags, answer):
    return answer == tags["expected"], "checked"


async def fill(store: SqliteBackend) -> None:
    rows, feedback, shadows = [], [], []

    def add(rec: InferenceRecord, accepted: bool | None) -> None:
        rows.append(rec)
        if accepted is not None:
            kind: FeedbackKind = "accepted" if accepted else "rejected"
            feedback.append(FeedbackRecord(inference_id=rec.id, kind=kind))

    for i in range(200):  # naming: the new weights v1 answer well live
        add(inference("naming", "local", "ok", "v1"), i != 0)
    for _ in range(10):  # ... the old weights v0 did not: they must not count any more
        add(inference("naming", "local", "bad", "v0"), False)
    for i in range(20):
        add(inference("naming", "frontier", "ok"), i != 0)
    for i in range(12):  # math: frontier only, with shadow answers of v1 (unverified yet)
        rec = inference("math", "frontier", "ok")
        add(rec, True)
        answer = "ok" if i < 3 else "bad"
        shadows.append(
            ShadowRecord(
                inference_id=rec.id,
                target="local",
                response=chat(answer),
                comparison={"weights_version": "v1", "latency_ms": 35.0},
            )
        )
    await store.insert_inferences(rows)
    await store.insert_feedback(feedback)
    await store.insert_shadows(shadows)


class _Reload(BaseHTTPRequestHandler):
    calls: list[str] = []

    def do_POST(self) -> None:
        _Reload.calls.append(self.headers.get("authorization", ""))
        body = json.dumps({"reloaded": True, "policy_version": "v1+fit"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture()
def gateway() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Reload)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def write_config(path: Path, state_file: Path) -> None:
    """A gateway config with one local and one frontier target and a learned policy."""
    config = {
        "backends": {
            "local": {"kind": "vllm", "model": "m", "replicas": ["http://127.0.0.1:1"]},
            "frontier": {"kind": "litellm", "model": "openai/gpt-4o"},
        },
        "routing": {
            "default": "frontier",
            "fallbacks": {"local": ["frontier"]},
            "learned": {
                "local_target": "local",
                "frontier_target": "frontier",
                "exploration_share": 0.0,
                "min_samples": 5,
                "state_file": str(state_file),
            },
        },
    }
    path.write_text(yaml.safe_dump(config))


def policy_for(state: LearnedState) -> LearnedPolicy:
    routing = RoutingConfig(default="frontier", fallbacks={"local": ["frontier"]})
    config = LearnedConfig(
        local_target="local", frontier_target="frontier", exploration_share=0, min_samples=5
    )
    return LearnedPolicy(RulePolicy(routing, ["local", "frontier"]), config, state)


def text(family: str) -> RequestText:
    body = {"messages": [{"role": "user", "content": f"a {family} task"}]}
    return request_text("chat.completions", body)


def features(family: str) -> RequestFeatures:
    """Untagged, as a real client sends it: the policy reads what it asks."""
    return RequestFeatures("chat.completions", "auto", 10, request_id="r", text=text(family))


async def test_refit_counts_the_right_outcomes_and_reloads(tmp_path: Path, gateway: str) -> None:
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        await fill(store)
        cache = VerdictCache(tmp_path / "verdicts.json")
        gate_evidence = [Outcome("math", "local", True, text=text("math"))] * 5
        report = await refit_policy(
            store,
            state_file=tmp_path / "state.json",
            weights_version="v1",
            verify=verify,
            config=RefitConfig(),
            local_target="local",
            frontier_prefix="frontier",
            cache=cache,
            gateway_url=gateway,
            admin_token="tok",
            version="fit-test",
            extra=gate_evidence,
        )
        assert report.reloaded and report.policy_version == "v1+fit"
        assert _Reload.calls[-1] == "Bearer tok"
        # naming: 199/200 accepted live answers of v1 (v0's 10 rejections left out);
        # math: 3/12 verified shadow answers plus 5 gate outcomes.
        assert report.outcomes["naming"] == {"local": [199, 1], "frontier": [19, 1]}
        assert report.outcomes["math"] == {"frontier": [12, 0], "local": [8, 9]}
        assert len(cache.data) == 12 and (tmp_path / "verdicts.json").exists()
        state = LearnedState.from_json(json.loads((tmp_path / "state.json").read_text()))
        assert state.version == "fit-test"
        policy = policy_for(state)
        assert policy.decide(features("naming")).target == "local"
        assert policy.decide(features("math")).target == "frontier"
        versions = await store.list_policy_versions()
        assert [v.id for v in versions] == ["fit-test"]

        everything = await refit_policy(
            store,
            state_file=tmp_path / "all.json",
            weights_version="v1",
            verify=None,  # verdicts come from the cache now
            config=RefitConfig(current_version_only=False),
            local_target="local",
            frontier_prefix="frontier",
            cache=cache,
        )
        assert everything.outcomes["naming"]["local"] == [199, 11]
        assert not everything.reloaded
    finally:
        await store.close()


async def test_replay_cli_compares_candidate_with_current(tmp_path: Path, capsys) -> None:
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        await fill(store)
        await refit_policy(
            store,
            state_file=tmp_path / "candidate.json",
            weights_version="v1",
            verify=verify,
            config=RefitConfig(),
            local_target="local",
            frontier_prefix="frontier",
            cache=VerdictCache(tmp_path / replay_cli.VERDICTS_FILE),
        )
    finally:
        await store.close()
    write_config(tmp_path / "switchyard.yaml", tmp_path / "missing.json")
    args = [
        "--store",
        f"sqlite:///{tmp_path / 'traffic.db'}",
        "--config",
        str(tmp_path / "switchyard.yaml"),
        "--state-file",
        str(tmp_path / "candidate.json"),
    ]
    assert await _run([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["current"]["overall"]["local_share"] == 0.0  # unfitted: everything frontier
    # all of naming local but the frontier check's 2% (routing.learned.frontier_check_share)
    assert out["candidate"]["per_class"]["naming"]["local_share"] > 0.95
    assert out["candidate"]["per_class"]["math"]["local_share"] == 0.0
    assert (
        out["candidate"]["overall"]["cost_per_1k_usd"]
        < out["current"]["overall"]["cost_per_1k_usd"]
    )
    assert await _run(args) == 0
    assert "candidate" in capsys.readouterr().out


async def _run(args: list[str]) -> int:
    import asyncio

    return await asyncio.to_thread(replay_cli.main, args)


def test_answer_text_reads_every_wire_format() -> None:
    assert answer_text(chat("hi")) == "hi"
    assert answer_text({"choices": [{"text": "completion"}]}) == "completion"
    assert answer_text({"content": [{"type": "text", "text": "claude"}]}) == "claude"
    output = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "r"}]}]}
    assert answer_text(output) == "r"
    assert answer_text(None) == ""


def _recorded(class_key: str, accepted: bool, weights: str | None, arm: Arm = "local"):
    return RecordedOutcome("id", class_key, arm, accepted, "shadow", weights, 0.0, 1.0)


def test_an_inherited_class_keeps_the_replaced_weights_evidence() -> None:
    outcomes = [
        *[_recorded("quick", True, "v1") for _ in range(40)],
        *[_recorded("hard", False, "v1") for _ in range(40)],
        _recorded("quick", True, "v0"),  # two versions back: never inherited
        _recorded("quick", True, "v2"),
        _recorded("quick", True, None, arm="frontier"),
    ]
    state = fit_state(
        outcomes, "fit", weights_version="v2", current_version_only=True, inherited={"quick": "v1"}
    )
    assert state.counts("quick", "local").n == 41  # v2's own and v1's
    assert state.counts("hard", "local").n == 0  # not certified: v1's failures do not count
    assert state.counts("quick", "frontier").n == 1
    alone = fit_state(outcomes, "fit", weights_version="v2", current_version_only=True)
    assert alone.counts("quick", "local").n == 1


def test_only_classes_the_gate_cannot_tell_apart_inherit_evidence() -> None:
    def evaluation(passes: dict[str, list[bool]]) -> ModelEval:
        items = [
            ItemResult(family, {"family": family}, "heldout", ok, ok, (), "a")
            for family, oks in passes.items()
            for ok in oks
        ]
        return ModelEval("v", items=items)

    current = evaluation(
        {"same": [True] * 30 + [False, False], "worse": [True, True], "much_better": [False] * 8}
    )
    candidate = evaluation(
        {"same": [True] * 31 + [False], "worse": [True, False], "much_better": [True] * 8}
    )
    # one more pass in 32 is noise; losing one is a regression; +8 of 8 is clearly better
    assert indistinguishable_classes(current, candidate, ["family"]) == {"same"}
    with pytest.raises(ValueError):
        indistinguishable_classes(current, evaluation({"other": [True] * 42}), ["family"])


async def test_scheduled_refit_cli_fits_the_state_file_from_the_record(tmp_path: Path) -> None:
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        await fill(store)
    finally:
        await store.close()
    write_config(tmp_path / "switchyard.yaml", tmp_path / "learned.json")
    args = ["--store", f"sqlite:///{tmp_path / 'traffic.db'}", "--config"]
    args += [str(tmp_path / "switchyard.yaml"), "--every-s", "0", "--rounds", "2"]
    args += ["--weights-version", "v1"]
    import asyncio

    assert await asyncio.to_thread(refit_cli.main, args) == 0
    state = LearnedState.from_json(json.loads((tmp_path / "learned.json").read_text()))
    assert state.scorer is not None
    assert policy_for(state).decide(features("naming")).target == "local"


async def test_the_refit_reads_only_the_outcomes_of_its_window(tmp_path: Path) -> None:
    """A long-running record is not read whole: outcomes older than ``refit.window_days`` are
    left out (and not held in memory), the recent ones count."""
    import dataclasses
    from datetime import UTC, datetime, timedelta

    from rl_loop.refit import gather_outcomes
    from traffic.store.ids import id_at

    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        long_ago = datetime.now(UTC) - timedelta(days=40)
        old = [
            dataclasses.replace(inference("naming", "frontier", "ok"), id=id_at(long_ago, i))
            for i in range(5)
        ]
        recent = [inference("math", "frontier", "ok") for _ in range(3)]
        await store.insert_inferences(old + recent)
        await store.insert_feedback(
            [FeedbackRecord(inference_id=r.id, kind="accepted") for r in old + recent]
        )

        async def classes(window_days: float | None) -> list[str]:
            found = await gather_outcomes(
                store,
                verify=None,
                cache=VerdictCache(tmp_path / f"verdicts-{window_days}.json"),
                config=RefitConfig(window_days=window_days),
                local_target="local",
                frontier_prefix="frontier",
            )
            return sorted(o.class_key for o in found.outcomes)

        assert await classes(30.0) == ["math"] * 3
        assert await classes(None) == ["math"] * 3 + ["naming"] * 5
    finally:
        await store.close()


async def test_outcomes_carry_the_chance_they_were_observed_and_the_live_mix(
    tmp_path: Path,
) -> None:
    """An explored local answer weighs 1 / the exploration share, a shadow 1 / its sampling
    probability (router.calibration); the live mix is the learned policy's latest requests."""
    import dataclasses

    from rl_loop.refit import gather_outcomes

    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        explored = dataclasses.replace(
            inference("naming", "local", "ok", "v1"),
            decision_kind="learned_explore",
            decision_propensity=0.05,
        )
        by_score = dataclasses.replace(
            inference("naming", "local", "ok", "v1"),
            decision_kind="learned_local",
            decision_propensity=1.0,
        )
        shadowed = dataclasses.replace(
            inference("math", "frontier", "ok"),
            decision_kind="learned_frontier",
            decision_propensity=0.05,
            shadow_p=0.25,
        )
        pinned = dataclasses.replace(inference("pinned", "frontier", "ok"), decision_kind="alias")
        rows = [explored, by_score, shadowed, pinned]
        await store.insert_inferences(rows)
        await store.insert_feedback(
            [FeedbackRecord(inference_id=r.id, kind="accepted") for r in rows]
        )
        await store.insert_shadows(
            [
                ShadowRecord(
                    inference_id=shadowed.id,
                    target="local",
                    response=chat("ok"),
                    comparison={"weights_version": "v1", "verdict": True},
                )
            ]
        )
        found = await gather_outcomes(
            store,
            verify=None,
            cache=VerdictCache(None),
            config=RefitConfig(),
            local_target="local",
            frontier_prefix="frontier",
        )
        seen = {(o.inference_id, o.arm, o.source): o.propensity for o in found.outcomes}
        assert seen[(explored.id, "local", "feedback")] == 0.05
        assert seen[(by_score.id, "local", "feedback")] == 1.0
        assert seen[(shadowed.id, "local", "shadow")] == 0.25
        assert seen[(shadowed.id, "frontier", "feedback")] == 1.0  # the frontier rate: unweighted
        # the live mix: what the learned policy decided, newest first; the pinned alias is not
        newest_first = ["a math task", "a naming task", "a naming task"]
        assert [t.last_user for t in found.live] == newest_first
    finally:
        await store.close()
