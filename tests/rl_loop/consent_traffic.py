"""The traffic of the consent end-to-end test (``test_consent_end_to_end``): conversations of
three API keys, one per ``training_use``, drawn by hypothesis, each text marked with its key (and
a ``redact`` key's secrets), sent by an OpenAI-SDK-shaped client through a real gateway that
records into a new SQLite store, with the client's feedback."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from hypothesis import strategies as st

from gateway.doors.skeleton import EPISODE_HEADER, TAGS_HEADER
from tests.gateway.conftest import store_gateway
from tests.traffic.export.test_consent import DENIED, EMAIL, SECRET
from traffic.store import TrainingUse

ADMIN_TOKEN = "consent-e2e-admin"
USES: tuple[TrainingUse, ...] = ("allow", "redact", "deny")
MARKS: dict[TrainingUse, str] = {"allow": "ALLOW-MARK", "redact": "REDACT-MARK", "deny": DENIED}

Verdict = Literal["accepted", "rejected", "edited", "demonstration"]
LABELLED: tuple[Verdict, ...] = ("accepted", "edited", "demonstration")  # SFT targets
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@dataclass(frozen=True)
class Conversation:
    """One client's conversation through the gateway, with its key's consent."""

    use: TrainingUse
    streams: tuple[bool, ...]  # one user turn each: streamed or not
    frontier: bool  # the frontier model by name, else the router's choice (the local target)
    agent: bool  # offers a tool; its first turn's answer is a call, sent back with a result
    episode: bool  # names its episode (x-switchyard-episode); an agent's always does
    verdict: Verdict | None  # the feedback on its last answer

    @property
    def requests(self) -> int:
        return len(self.streams) + self.agent

    @property
    def names_episode(self) -> bool:
        return self.episode or self.agent


def conversations(use: TrainingUse) -> st.SearchStrategy[Conversation]:
    return st.builds(
        Conversation,
        use=st.just(use),
        streams=st.lists(st.booleans(), min_size=1, max_size=3).map(tuple),
        frontier=st.booleans(),
        agent=st.booleans(),
        episode=st.booleans(),
        verdict=st.sampled_from((None, "accepted", "rejected", "edited", "demonstration")),
    )


# Every path to a trainer at once, as an explicit example: agent episodes the frontier served
# (the round's agent distillation, the episode exports) and edits (preference pairs, DPO).
EVERY_PATH = [
    *(Conversation(u, (False, True), True, True, True, "accepted") for u in USES),
    *(Conversation(u, (True,), False, False, False, "edited") for u in reversed(USES)),
]


def mixes() -> st.SearchStrategy[list[Conversation]]:
    """One to three conversations per key, interleaved in any order; at least one that the
    round's SFT may learn from (so a training step always runs)."""
    parts = st.tuples(*(st.lists(conversations(u), min_size=1, max_size=3) for u in USES))
    interleaved = parts.flatmap(lambda p: st.permutations([c for part in p for c in part]))
    return interleaved.filter(
        lambda mix: any(c.use != "deny" and c.verdict in LABELLED for c in mix)
    )


def mark(use: TrainingUse, index: int) -> str:
    return f"{MARKS[use]}-{index}"


def carrying(use: TrainingUse, index: int, text: str) -> str:
    """``text`` with its conversation's marker, and a ``redact`` key's secrets."""
    secrets = f" My token is {SECRET}, mail {EMAIL}." if use == "redact" else ""
    return f"{mark(use, index)} {text}.{secrets}"


def leaks(text: str) -> list[str]:
    return [s for s in (DENIED, SECRET, EMAIL) if s in text]


# -- the traffic -------------------------------------------------------------------------------


def _complete(
    client: httpx.Client, body: dict[str, Any], headers: dict[str, str], stream: bool
) -> tuple[dict[str, Any], str]:
    """The assistant message answering ``body`` and the inference id."""
    if not stream:
        r = client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        message = r.json()["choices"][0]["message"]
        turn = {k: message[k] for k in ("role", "content", "tool_calls") if message.get(k)}
        return {"content": None, **turn}, r.headers["x-request-id"]
    text = []
    with client.stream(
        "POST", "/v1/chat/completions", json={**body, "stream": True}, headers=headers
    ) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            data = line.removeprefix("data: ")
            if not line.startswith("data: ") or data == "[DONE]":
                continue
            for choice in json.loads(data).get("choices") or ():
                text.append((choice.get("delta") or {}).get("content") or "")
        return {"role": "assistant", "content": "".join(text)}, r.headers["x-request-id"]


def _send(client: httpx.Client, conv: Conversation, index: int, key: str) -> None:
    use = conv.use
    task = f"{mark(use, index)} {EMAIL}" if use == "redact" else mark(use, index)
    headers = {"Authorization": f"Bearer {key}", TAGS_HEADER: f"family=consent,task_id={task}"}
    if conv.names_episode:
        headers[EPISODE_HEADER] = f"consent-episode-{index}"
    base: dict[str, Any] = {"model": "gpt-4o-mini" if conv.frontier else "auto", "max_tokens": 12}
    if conv.agent:
        base["tools"] = TOOLS
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": carrying(use, index, "You answer build questions")}
    ]
    last = ""
    for turn, stream in enumerate(conv.streams):
        if conv.agent and turn == 0:
            ask = carrying(use, index, "Please call the lookup tool for Paris")
            messages.append({"role": "user", "content": ask})
            call, _ = _complete(client, {**base, "messages": messages}, headers, False)
            assert call.get("tool_calls"), call
            messages.append(call)
            result = carrying(use, index, "Sunny in Paris")
            tool_call_id = call["tool_calls"][0]["id"]
            messages.append({"role": "tool", "tool_call_id": tool_call_id, "content": result})
        else:
            ask = f"Question {turn}: why does my build fail?"
            if conv.agent:
                ask += " Do not use any tools"
            messages.append({"role": "user", "content": carrying(use, index, ask)})
        answer, last = _complete(client, {**base, "messages": messages}, headers, stream)
        messages.append(answer)
    if conv.verdict is not None:
        feedback: dict[str, Any] = {"inference_id": last, "kind": conv.verdict}
        if conv.verdict in ("edited", "demonstration"):
            feedback["payload"] = {"text": carrying(use, index, "The better answer")}
        r = client.post("/v1/feedback", json=feedback, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text


def record_traffic(sim_url: str, mix: Sequence[Conversation], folder: Path) -> str:
    """``mix`` sent through a gateway recording into a new SQLite store; returns its URL once
    the gateway has stopped (every record and feedback written)."""
    url = f"sqlite:///{folder / 'traffic.db'}"
    gw = store_gateway(sim_url, url, folder / "spool", auth={"required": True}).start()
    try:
        with httpx.Client(base_url=gw.base_url, timeout=30) as client:
            keys = {}
            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            for use in USES:
                created = client.post(
                    "/admin/keys", json={"name": use, "training_use": use}, headers=admin
                )
                assert created.status_code == 201, created.text
                keys[use] = created.json()["key"]
            for index, conv in enumerate(mix):
                _send(client, conv, index, keys[conv.use])
    finally:
        gw.stop()
    return url
