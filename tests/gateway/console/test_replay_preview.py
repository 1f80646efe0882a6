"""The replay preview reads only the served weights' local verdicts."""

from __future__ import annotations

from gateway.console.replay_preview import replay_items, served_weights
from router.replay import Arm
from traffic.store import FeedbackRecord, InferenceRecord, InferenceRow, ShadowRecord

ARMS: dict[str, Arm] = {"local": "local", "frontier": "frontier"}


def _row(target: str, weights: str | None, shadow_weights: str | None = None) -> InferenceRow:
    inf = InferenceRecord(
        endpoint="chat.completions",
        wire_format="openai.chat",
        request={"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
        route_target=target,
        served_model="m",
        weights_version=weights,
        status=200,
        latency_ms=10.0,
        decision_propensity=0.05,
    )
    shadows = []
    if shadow_weights is not None:
        shadows.append(
            ShadowRecord(
                inference_id=inf.id,
                target="local",
                response={"choices": []},
                comparison={"verdict": True, "weights_version": shadow_weights},
            )
        )
    return InferenceRow(inf, [FeedbackRecord(inference_id=inf.id, kind="accepted")], shadows)


def test_local_verdicts_of_replaced_weights_are_left_out_and_counted() -> None:
    rows = [  # newest first, as the console reads them
        _row("local", "ft-2"),
        _row("frontier", None, shadow_weights="ft-2"),
        _row("local", "ft-1"),
        _row("frontier", None, shadow_weights="ft-1"),
    ]
    weights = served_weights(rows, ARMS)
    assert weights == "ft-2"
    items, replaced = replay_items(rows, ARMS, "family", weights)
    assert replaced == 2
    assert [i.accepted for i in items] == [True, True, None, True]  # frontier verdicts stay
    assert [i.shadow_accepted for i in items] == [None, True, None, None]
    everything, none_left_out = replay_items(rows, ARMS, "family")
    assert none_left_out == 0 and [i.accepted for i in everything] == [True] * 4
    assert served_weights(rows[1:2], ARMS) is None
