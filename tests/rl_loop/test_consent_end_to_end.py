"""Consent end to end (issue 47). Traffic from three API keys, one per ``training_use``, goes
through a real gateway in front of the frontier simulator into a real SQLite store; every
exporter runs on that store (SFT, both preference formats, RL prompts, both episode kinds; JSONL
and Parquet); then one round of the RL loop (``rl_loop.loop.prepare_candidate``: datasets, agent
examples, rollouts from the micro model on loopback, RL, SFT and DPO, the gate), every batch its
trainers receive captured where transformers' ``Trainer`` takes it, decoded by the tokenizer.

Over mixes drawn by hypothesis (keys, turns, streamed or not, frontier or router, agent turns
with a tool result, named episodes, feedback), no exported record and no training batch holds a
``deny`` key's content or a ``redact`` key's secrets unscrubbed, the other keys' content does
reach them (the test can fail), and every manifest counts the withheld rows (episodes) exactly.
``scrub_pii`` is off throughout: consent must not depend on it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pyarrow.parquet as pq
import pytest
import torch
import transformers
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.doors.skeleton import EPISODE_HEADER, TAGS_HEADER
from rl_loop.config import LoopConfig
from rl_loop.evaluate import EvalItem
from rl_loop.loop import RoundResult, Services, prepare_candidate
from rl_loop.modeling import Policy, load_policy
from tests.fixtures.micro_replica import micro_replica
from tests.gateway.conftest import store_gateway
from tests.traffic.export.test_consent import DENIED, EMAIL, SECRET
from traffic.export import (
    EpisodeExportConfig,
    ExportConfig,
    SplitConfig,
    export_episodes_from_store,
    export_from_store,
)
from traffic.export.config import BuildConfig, DatasetKind
from traffic.export.episode_export import EpisodeKind
from traffic.store import InferenceFilter, StoreConfig, TrainingUse, open_store

ADMIN_TOKEN = "consent-e2e-admin"
USES: tuple[TrainingUse, ...] = ("allow", "redact", "deny")
MARKS: dict[TrainingUse, str] = {"allow": "ALLOW-MARK", "redact": "REDACT-MARK", "deny": DENIED}
MARKED = re.compile(r"(?:ALLOW|REDACT)-MARK-\d+")
SCRUBBED_SECRET = "<SECRET_GITHUB_TOKEN_1>"
ROW_KINDS: tuple[DatasetKind, ...] = ("sft", "preference_trl", "preference_openai", "rl_prompts")
EPISODE_KINDS: tuple[EpisodeKind, ...] = ("episode_sft", "episode_rl")
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
# Held-out probes that the verifier passes and fails by their tag: the served model is partly
# right on their class, so the round samples rollouts (rl_loop.loop.prepare_candidate).
HELDOUT = [
    EvalItem([{"role": "user", "content": "probe"}], {"family": "probe", "expect": e}, "heldout")
    for e in ("pass", "fail")
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


# -- the exporters -----------------------------------------------------------------------------


async def export_everything(url: str, out: Path) -> dict[str, Any]:
    """Every exporter on the store at ``url``, both formats; their manifests by kind."""
    store = open_store(StoreConfig(url=url))
    await store.connect()
    split = SplitConfig(eval_fraction=0.25)
    manifests: dict[str, Any] = {}
    try:
        for kind in ROW_KINDS:
            config = ExportConfig(
                kind=kind,
                out_dir=out / kind,
                formats=("jsonl", "parquet"),
                split=split,
                build=BuildConfig(label_policy="unlabelled_frontier"),
                scrub_pii=False,
            )
            manifests[kind] = await export_from_store(store, InferenceFilter(), config)
        for episode_kind in EPISODE_KINDS:
            episodes = EpisodeExportConfig(
                kind=episode_kind,
                out_dir=out / episode_kind,
                formats=("jsonl", "parquet"),
                split=split,
                scrub_pii=False,
            )
            manifests[episode_kind] = await export_episodes_from_store(
                store, InferenceFilter(), episodes
            )
    finally:
        await store.close()
    return manifests


def exported_text(folder: Path) -> str:
    """Every record of every file in ``folder`` (JSONL and Parquet, both splits) as JSON."""
    records: list[Any] = []
    for path in sorted(folder.glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for path in sorted(folder.glob("*.parquet")):
        records += pq.read_table(path).to_pylist()
    assert {p.suffix for p in folder.iterdir()} == {".jsonl", ".parquet", ".json"}
    return json.dumps(records, default=str)


def check_exports(mix: Sequence[Conversation], manifests: dict[str, Any], out: Path) -> None:
    rows = sum(c.requests for c in mix)
    denied = sum(c.requests for c in mix if c.use == "deny")
    redacted = sum(c.requests for c in mix if c.use == "redact")
    episodes = [c for c in mix if c.names_episode]
    consented = {mark(c.use, i) for i, c in enumerate(mix) if c.use != "deny"}
    for kind in (*ROW_KINDS, *EPISODE_KINDS):
        text = exported_text(out / kind)
        assert leaks(text) == [], kind
        assert set(MARKED.findall(text)) <= consented, kind
        on_disk = json.loads((out / kind / "manifest.json").read_text())
        assert on_disk["counts"] == manifests[kind].counts.model_dump(mode="json"), kind
    for kind in ROW_KINDS:
        counts = manifests[kind].counts
        assert counts.rows_read == rows, kind
        assert counts.withheld == ({"deny": denied} if denied else {}), kind
    prompts = manifests["rl_prompts"].counts
    assert prompts.redacted == redacted  # every row gives a prompt: every redact row, scrubbed
    text = exported_text(out / "rl_prompts")
    assert set(MARKED.findall(text)) == consented  # nothing consented was lost on the way
    assert (SCRUBBED_SECRET in text) == (redacted > 0)
    denied_episodes = sum(c.use == "deny" for c in episodes)
    for kind in EPISODE_KINDS:
        counts = manifests[kind].counts
        assert counts.episodes_read == len(episodes), kind
        assert counts.withheld == ({"deny": denied_episodes} if denied_episodes else {}), kind
        assert counts.redacted == sum(c.use == "redact" for c in episodes), kind
    judged = {
        mark(c.use, i)
        for i, c in enumerate(mix)
        if c.names_episode and c.use != "deny" and c.verdict in ("accepted", "rejected")
    }
    assert set(MARKED.findall(exported_text(out / "episode_rl"))) == judged


# -- the round ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One batch a trainer received: the trainer's class and its token-id tensors."""

    trainer: str
    ids: dict[str, torch.Tensor]


def capture_batches(seen: list[Batch]) -> Callable[..., Any]:
    """``Trainer.training_step`` recording each batch (every trainer of the loop, TRL's SFT and
    DPO and the on-policy one, takes its batches there) before it trains on it."""
    original = transformers.Trainer.training_step

    def training_step(
        self: transformers.Trainer, model: Any, inputs: dict[str, Any], *args: Any, **kw: Any
    ) -> Any:
        ids = {k: v.detach().cpu() for k, v in inputs.items() if k.endswith("input_ids")}
        seen.append(Batch(type(self).__name__, ids))
        return original(self, model, inputs, *args, **kw)

    return training_step


def decoded(batch: Batch, policy: Policy) -> list[str]:
    """Each row of each token-id tensor of ``batch`` as text (special tokens kept), padding
    left out."""
    return [
        str(policy.tokenizer.decode([t for t in row.tolist() if t >= 0 and t != policy.pad_id]))
        for tensor in batch.ids.values()
        for row in tensor
    ]


def verify(tags: Mapping[str, str], text: str) -> tuple[bool, str]:
    """The probes pass or fail by their tag; a sampled answer by a hash of its text (samples
    vary, so a prompt's rewards do, and RL has rows to train on)."""
    if "expect" in tags:
        return tags["expect"] == "pass", ""
    return hashlib.sha256(text.encode()).digest()[0] % 2 == 0, "not quite"


def loop_config(work_dir: Path, mix: Sequence[Conversation]) -> LoopConfig:
    """One quick round: one step per phase, each in one batch that holds every example the
    phase can have (a chat SFT example per conversation, an agent one per step; a prompt per
    row, sampled 4 times; a pair per conversation); a tiny gate."""
    rows = sum(c.requests for c in mix)
    return LoopConfig.model_validate(
        {
            "work_dir": work_dir,
            "data": {
                "eval_fraction": 0.0,
                "scrub_pii": False,
                "max_prompt_tokens": 900,
                "max_completion_tokens": 120,
            },
            "rl": {
                "prompts": 100,
                "samples_per_prompt": 4,
                "max_new_tokens": 4,
                "steps": 1,
                "batch_size": 4 * rows,
                "hint_weight": 0.5,  # failed samples come back with their prompt and a hint
            },
            "sft": {
                "steps": 1,
                "batch_size": len(mix) + rows,
                "replay_windows": 0,
                "warmup_steps": 0,
            },
            "dpo": {"steps": 1, "batch_size": len(mix), "min_pairs": 1, "warmup_steps": 0},
            "agent_distill": {"max_examples": 100},
            "gate": {
                "max_new_tokens": 2,
                "record_eval_per_family": 0,
                "ppl_windows": 1,
                "ppl_seq_len": 8,
            },
        }
    )


async def one_round(
    url: str, served: Path, replica_url: str, work_dir: Path, mix: Sequence[Conversation]
) -> RoundResult:
    store = open_store(StoreConfig(url=url))
    await store.connect()
    services = Services(
        store=store,
        replicas=(replica_url,),
        gateway_url="http://127.0.0.1:9",  # the round's steps 1-4 call no gateway
        admin_token=ADMIN_TOKEN,
        state_file=work_dir / "routing.json",
    )
    try:
        candidate = await prepare_candidate(
            1,
            served,
            services,
            loop_config(work_dir, mix),
            verify=verify,
            strict_verify=None,
            heldout=HELDOUT,
        )
    finally:
        await store.close()
    return candidate.result


def check_round(
    mix: Sequence[Conversation], result: RoundResult, batches: Sequence[Batch], served: Policy
) -> None:
    consented = {mark(c.use, i) for i, c in enumerate(mix) if c.use != "deny"}
    texts: dict[str, str] = {}
    for batch in batches:
        assert batch.ids, batch.trainer  # every trainer's batch holds token ids
        rows = decoded(batch, served)
        texts[batch.trainer] = "\n".join([texts.get(batch.trainer, ""), *rows])
    for trainer, text in texts.items():
        assert leaks(text) == [], trainer
        assert set(MARKED.findall(text)) <= consented, trainer
    # Every phase that stepped was seen, and each phase had data to step on.
    trained = {"rl": "OnPolicyTrainer", "sft": "SftTrainer", "dpo": "DpoTrainer"}
    ran = {trained[phase] for phase in trained if getattr(result, phase).get("steps")}
    assert set(texts) == ran
    paired = any(c.use != "deny" and c.verdict in ("edited", "demonstration") for c in mix)
    assert ran == {"OnPolicyTrainer", "SftTrainer", *(["DpoTrainer"] if paired else [])}
    # What consent admits all reached SFT: its one batch held every example.
    learned = {
        mark(c.use, i) for i, c in enumerate(mix) if c.use != "deny" and c.verdict in LABELLED
    }
    assert set(MARKED.findall(texts["SftTrainer"])) == learned
    redact_learned = any(c.use == "redact" and c.verdict in LABELLED for c in mix)
    assert (SCRUBBED_SECRET in texts["SftTrainer"]) == redact_learned
    # The round's counts: rows withheld from its datasets, episodes from its agent examples.
    judged = [
        c
        for c in mix
        if c.names_episode and c.requests > 1 and c.verdict in ("accepted", "rejected")
    ]
    distilled = [c for c in judged if c.use != "deny" and c.frontier and c.verdict == "accepted"]
    assert result.data["withheld_rows"] == sum(c.requests for c in mix if c.use == "deny")
    assert result.data["agent_episodes_withheld"] == sum(c.use == "deny" for c in judged)
    assert result.data["agent_episodes_train"] == len(distilled)


# -- the property ------------------------------------------------------------------------------


def test_no_denied_or_unscrubbed_content_reaches_an_export_or_a_trainer(
    frontier_sim: Any,
    micro_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
    batches: list[Batch] = []
    monkeypatch.setattr(transformers.Trainer, "training_step", capture_batches(batches))
    served = load_policy(micro_model)
    rollouts = micro_replica(served)

    @settings(
        max_examples=4,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(mix=mixes())
    @example(mix=EVERY_PATH)
    def check(mix: list[Conversation]) -> None:
        folder = Path(tempfile.mkdtemp(prefix="mix-", dir=tmp_path))
        url = record_traffic(frontier_sim.base_url, mix, folder)
        manifests = asyncio.run(export_everything(url, folder / "exports"))
        check_exports(mix, manifests, folder / "exports")
        batches.clear()
        result = asyncio.run(one_round(url, micro_model, rollouts.url, folder / "round", mix))
        check_round(mix, result, batches, served)

    try:
        check()
    finally:
        rollouts.stop()
