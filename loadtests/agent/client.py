"""The simulated agent client: runs agent episodes through the gateway, as IDE agents do.

One episode (:func:`run_episode`):
1. with ``oracle_url`` set, registers the task with the frontier simulator directly
   (``POST /sim/oracle`` with the request's prompt hash and the task id: the channel the gateway
   never sees, as ``loadtests.ide_client`` does), so the simulator can play the agent;
2. sends the conversation (``wire.py``: Chat Completions or the Responses API, streamed or not)
   through the gateway; each answer's tool calls run in the episode's sandbox workspace
   (``sandbox.py``) and their results go back in the next request, until the model answers in
   text, ``max_steps`` requests were made, or a request failed;
3. judges the episode (``verifier.py``) and posts the verdict as feedback on the episode's last
   answered inference: ``accepted``, or ``rejected`` with the verifier's feedback as
   ``payload.reason``; ``payload.scope`` is ``"episode"`` (the judgement is of the whole
   trajectory, whose last turn holds every step) and ``payload.steps`` the number of requests.
   One feedback per episode, on its last inference: the record rebuilds the trajectory from that
   turn, and every earlier turn is reached through the episode id.

The client keeps its own bookkeeping (task id, kind, verdict) in :class:`EpisodeResult`; requests
carry only what the real client sends. Blocking work (the sandbox, the verifier) runs in worker
threads. Talks HTTP only.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

from loadtests.agent.wire import Conversation, ModelTurn, WireError, start_conversation
from tasks.agent.sandbox import OutcomeStatus, SandboxConfig, SandboxRunner, Workspace
from tasks.agent.tasks import AGENT_KINDS, AgentKind, AgentTask, sample_agent_tasks
from tasks.agent.tools import FLAVOUR_TOOLS, Flavour
from tasks.agent.verifier import AgentVerdict, verify_episode
from tasks.ide.clients import prompt_hash
from tasks.ide.task import Split

StreamMode = Literal["on", "off", "mixed"]
TARGET_HEADER = "x-switchyard-target"
REQUEST_ID_HEADER = "x-request-id"
COST_HEADER = "x-switchyard-cost-usd"
REASON_CHARS = 300


class AgentClientConfig(BaseModel):
    """One run of the simulated agent client; each field is also a CLI flag (``run.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gateway: str = Field(description="The gateway's base URL.")
    oracle_url: str | None = Field(
        default=None, description="The frontier simulator to register tasks with (None: none)."
    )
    api_key: str = Field(default="", description="The client's API key (none when empty).")
    model: str = Field(default="auto", description="The model name the client asks for.")
    episodes: int = Field(default=10, ge=0, description="Episodes to run.")
    seed: int = Field(default=1, description="Seeds the task draw.")
    split: Split = Field(default="train", description="Task seeds of the train or held-out split.")
    kinds: tuple[AgentKind, ...] = Field(default=AGENT_KINDS, min_length=1)
    wires: tuple[Flavour, ...] = Field(
        default=("chat", "responses"), min_length=1, description="APIs, taken in turn."
    )
    stream: StreamMode = Field(default="mixed", description="Stream answers: on, off, mixed.")
    max_steps: int = Field(default=12, ge=1, description="Requests per episode at most.")
    max_tokens: int = Field(default=1024, ge=1, description="Answer token limit per request.")
    concurrency: int = Field(default=2, ge=1, description="Episodes in flight at once.")
    timeout_s: float = Field(default=120.0, gt=0, description="Per-request time limit.")
    send_feedback: bool = Field(default=True, description="Post each episode's verdict.")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)


@dataclass(frozen=True, slots=True)
class CallResult:
    """One tool call the client executed."""

    name: str
    status: OutcomeStatus
    changed: bool
    stopped_by: str | None = None


@dataclass(frozen=True, slots=True)
class StepResult:
    """One request of an episode, as the client saw it."""

    request_id: str | None
    status: int
    target: str | None
    latency_ms: float
    cost_usd: float | None
    text: str = ""
    calls: tuple[CallResult, ...] = ()
    error: str | None = None


@dataclass(slots=True)
class EpisodeResult:
    """The client's own record of one episode (the gateway never sees the task)."""

    task_id: str
    kind: AgentKind
    flavour: Flavour
    stream: bool
    episode_id: str
    steps: list[StepResult] = field(default_factory=list)
    final_text: str = ""
    verdict: AgentVerdict | None = None
    failed_request: bool = False
    feedback_posted: bool = False

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.passed

    @property
    def last_request_id(self) -> str | None:
        return next((s.request_id for s in reversed(self.steps) if s.request_id), None)

    @property
    def ran_tests_after_last_change(self) -> bool:
        """Whether tests ran after the last call that changed the repository (an audit fact;
        True when nothing changed)."""
        calls = [c for s in self.steps for c in s.calls]
        last_change = max((i for i, c in enumerate(calls) if c.changed), default=None)
        if last_change is None:
            return True
        return any(c.name == "run_tests" for c in calls[last_change + 1 :])

    def as_dict(self) -> dict[str, Any]:
        verdict = self.verdict
        return {
            "task_id": self.task_id,
            "kind": self.kind,
            "flavour": self.flavour,
            "stream": self.stream,
            "episode_id": self.episode_id,
            "passed": self.passed,
            "feedback": verdict.feedback if verdict else None,
            "tests_modified": verdict.tests_modified if verdict else False,
            "ran_tests_after_last_change": self.ran_tests_after_last_change,
            "failed_request": self.failed_request,
            "steps": [
                {"request_id": s.request_id, "status": s.status, "target": s.target,
                 "latency_ms": round(s.latency_ms, 2), "cost_usd": s.cost_usd,
                 "calls": [[c.name, c.status, c.changed] for c in s.calls], "error": s.error}
                for s in self.steps
            ],
        }  # fmt: skip


@dataclass(slots=True)
class AgentRunStats:
    """What a run measured, overall and per task kind and per API."""

    episodes: list[EpisodeResult] = field(default_factory=list)
    oracle_failed: int = 0
    wall_s: float = 0.0

    def summary(self, of: Sequence[EpisodeResult] | None = None) -> dict[str, Any]:
        """Success rate, steps per success, tool-call validity, targets, cost, failures."""
        group = list(self.episodes if of is None else of)
        calls = [c for e in group for s in e.steps for c in s.calls]
        passed = [e for e in group if e.passed]
        targets = Counter(s.target or "none" for e in group for s in e.steps)
        costs = [sum(s.cost_usd or 0.0 for s in e.steps) for e in group]
        return {
            "episodes": len(group),
            "success_rate": len(passed) / len(group) if group else None,
            "steps_per_success": statistics.mean(len(e.steps) for e in passed) if passed else None,
            "tool_calls": len(calls),
            "tool_call_validity": (
                sum(c.status != "invalid" for c in calls) / len(calls) if calls else None
            ),
            "steps_by_target": dict(targets),
            "cost_per_episode_usd": statistics.mean(costs) if costs else None,
            "failed_requests": sum(e.failed_request for e in group),
            "feedback_posted": sum(e.feedback_posted for e in group),
        }

    def report(self) -> dict[str, Any]:
        by_kind = {
            kind: self.summary([e for e in self.episodes if e.kind == kind])
            for kind in sorted({e.kind for e in self.episodes})
        }
        by_api = {
            flavour: self.summary([e for e in self.episodes if e.flavour == flavour])
            for flavour in sorted({e.flavour for e in self.episodes})
        }
        return {
            "total": self.summary(),
            "by_kind": by_kind,
            "by_api": by_api,
            "oracle_failed": self.oracle_failed,
            "wall_s": round(self.wall_s, 2),
        }


class _Episode:
    """The state of one episode while it runs."""

    def __init__(
        self,
        config: AgentClientConfig,
        session: aiohttp.ClientSession,
        runner: SandboxRunner,
        task: AgentTask,
        flavour: Flavour,
        stream: bool,
    ) -> None:
        self.config, self.session, self.runner, self.task = config, session, runner, task
        self.base = config.gateway.rstrip("/")
        self.auth = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.conversation: Conversation = start_conversation(
            flavour, task.prompt, uuid.uuid4().hex, model=config.model, stream=stream,
            max_tokens=config.max_tokens,
        )  # fmt: skip
        self.result = EpisodeResult(
            task.task_id, task.kind, flavour, stream, self.conversation.episode_id
        )

    async def send(self) -> tuple[StepResult, ModelTurn | None]:
        conv = self.conversation
        started = time.perf_counter()
        try:
            async with self.session.post(
                self.base + conv.path, json=conv.body(), headers={**self.auth, **conv.headers()}
            ) as resp:
                headers = resp.headers
                if resp.status != 200:
                    detail = (await resp.text())[:300]
                    turn, error = None, f"HTTP {resp.status}: {detail}"
                else:
                    turn, error = await conv.read(resp), None
        except (aiohttp.ClientError, TimeoutError, WireError) as exc:
            elapsed = (time.perf_counter() - started) * 1000
            return StepResult(None, 0, None, elapsed, None, error=repr(exc)[:300]), None
        cost = headers.get(COST_HEADER)
        step = StepResult(
            headers.get(REQUEST_ID_HEADER),
            resp.status,
            headers.get(TARGET_HEADER),
            (time.perf_counter() - started) * 1000,
            float(cost) if cost is not None else None,
            text=turn.text if turn else "",
            error=error,
        )
        return step, turn

    async def run(self, workspace: Workspace) -> EpisodeResult:
        result = self.result
        for _ in range(self.config.max_steps):
            step, turn = await self.send()
            if turn is None:
                result.steps.append(step)
                result.failed_request = True
                break
            self.conversation.add_turn(turn)
            outcomes: list[CallResult] = []
            for call in turn.calls:
                outcome = await asyncio.to_thread(workspace.execute, call.name, call.arguments)
                self.conversation.add_result(call, outcome.text)
                outcomes.append(
                    CallResult(call.name, outcome.status, outcome.changed, outcome.stopped_by)
                )
            result.steps.append(_with_calls(step, tuple(outcomes)))
            if not turn.calls:
                result.final_text = turn.text
                break
        result.verdict = await asyncio.to_thread(
            verify_episode, self.task, workspace, result.final_text
        )
        return result

    async def post_feedback(self) -> None:
        result, verdict = self.result, self.result.verdict
        inference_id = result.last_request_id
        if verdict is None or inference_id is None:
            return
        payload = {
            "reason": verdict.feedback[:REASON_CHARS],
            "scope": "episode",
            "steps": len(result.steps),
        }
        body = {
            "inference_id": inference_id,
            "kind": "accepted" if verdict.passed else "rejected",
            "payload": payload,
        }
        try:
            async with self.session.post(
                f"{self.base}/v1/feedback", json=body, headers=self.auth
            ) as resp:
                result.feedback_posted = resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            result.feedback_posted = False


def _with_calls(step: StepResult, calls: tuple[CallResult, ...]) -> StepResult:
    return StepResult(
        step.request_id, step.status, step.target, step.latency_ms, step.cost_usd, step.text,
        calls, step.error,
    )  # fmt: skip


async def register_task(
    session: aiohttp.ClientSession, oracle_url: str | None, task: AgentTask
) -> bool:
    """Tell the simulator which task the request is (never through the gateway)."""
    if oracle_url is None:
        return True
    entry = {"prompt_hash": prompt_hash(task.prompt), "task_id": task.task_id}
    try:
        async with session.post(f"{oracle_url.rstrip('/')}/sim/oracle", json=entry) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def run_episode(
    config: AgentClientConfig,
    session: aiohttp.ClientSession,
    runner: SandboxRunner,
    task: AgentTask,
    flavour: Flavour,
    stream: bool,
) -> tuple[EpisodeResult, bool]:
    """One episode of ``task`` over ``flavour``'s API; also whether its registration worked."""
    registered = await register_task(session, config.oracle_url, task)
    episode = _Episode(config, session, runner, task, flavour, stream)
    tools = FLAVOUR_TOOLS[flavour]
    workspace = await asyncio.to_thread(Workspace, task.files, runner, tools)
    try:
        await episode.run(workspace)
    finally:
        await asyncio.to_thread(workspace.close)
    if config.send_feedback:
        await episode.post_feedback()
    return episode.result, registered


def episode_plan(config: AgentClientConfig, index: int) -> tuple[Flavour, bool]:
    """The API and streaming of episode ``index``: APIs in turn, streaming alternating."""
    flavour = config.wires[index % len(config.wires)]
    if config.stream == "mixed":
        return flavour, (index // len(config.wires)) % 2 == 0
    return flavour, config.stream == "on"


async def run_agent_client(
    config: AgentClientConfig,
    tasks: Sequence[AgentTask] | None = None,
    session: aiohttp.ClientSession | None = None,
) -> AgentRunStats:
    """Run ``tasks`` (default: ``config.episodes`` drawn from ``config.kinds``)."""
    if tasks is None:
        tasks = await asyncio.to_thread(
            sample_agent_tasks, config.episodes, config.seed, config.split, config.kinds
        )
    runner = await asyncio.to_thread(SandboxRunner.create, config.sandbox)
    own = session is None
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    client = session or aiohttp.ClientSession(timeout=timeout)
    stats = AgentRunStats()
    limit = asyncio.Semaphore(config.concurrency)
    results: list[EpisodeResult | None] = [None] * len(tasks)

    async def bounded(index: int, task: AgentTask) -> None:
        async with limit:
            flavour, stream = episode_plan(config, index)
            results[index], registered = await run_episode(
                config, client, runner, task, flavour, stream
            )
            stats.oracle_failed += not registered

    started = time.perf_counter()
    try:
        await asyncio.gather(*(bounded(i, t) for i, t in enumerate(tasks)))
    finally:
        if own:
            await client.close()
    stats.episodes = [r for r in results if r is not None]
    stats.wall_s = time.perf_counter() - started
    return stats
