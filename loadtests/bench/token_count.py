"""What counting a prompt's tokens before the call costs the gateway per request, and what loading
tiktoken's encodings costs once.

    python -m loadtests.bench.token_count [--quick]     (make bench-token-count; also a
                                                        section of make bench-gateway)

Each case is timed as the door runs it (:func:`gateway.doors.prompt_gate.plan_prompt`: the chain
fitted to the targets' context windows, then the first target's count when the key has a tpm
limit or a fleet budget), for an OpenAI target (gpt-4o-mini: tiktoken o200k_base, exact) and an
Anthropic one (claude-haiku-4-5: o200k_base too, calibrated as an estimate):

- ``short``: the gateway benchmark's prompt, a key without limits: the bound without a count fits
  the window, nothing is encoded;
- ``short_keyed``: the same for a key with a tpm limit: one count;
- ``agent_cold``: a coding agent's turn (a 12k-character system prompt, 40k characters of tools,
  60 messages of history), never seen: all of it encoded;
- ``agent_warm``: the next turn of that conversation (one message more): only what is new is
  encoded, the rest comes from the cache of long texts;
- ``large_cold``: a 400k-character conversation never seen (a pasted log): all of it encoded
  (on a worker thread in the gateway: the body is over ``limits.offload_body_bytes``).

Figures are the median CPU time of this thread per request (``time.thread_time``), in
microseconds, over the repetitions (fewer with ``--quick``). The last line of stdout is one JSON
object: ``cases_us`` (case -> target -> us), ``load_s`` (encoding -> seconds to load, tiktoken's
import in the first), ``encoding_rss_mb`` (what each added to this process's resident memory,
after a collection and ``malloc_trim``).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from gateway.backends.pricing import PriceBook
from gateway.backends.prompt_count import PromptCounter, prompt_texts
from gateway.backends.tiktoken_files import Encodings
from gateway.config import TokenCountConfig, parse_config
from gateway.doors.prompt_gate import plan_prompt
from gateway.memory_trim import load_malloc_trim
from gateway.routing.table import Routing
from router.decision import RouteDecision
from router.features import RequestFeatures
from router.policy import RulePolicy

TARGETS = {"openai": "openai/gpt-4o-mini", "anthropic": "anthropic/claude-haiku-4-5"}
WORDS = ("def", "return", "self", "value", "index", "request", "the", "of", "to", "window")


def text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def agent_turn(rng: random.Random, turns: int) -> dict[str, Any]:
    """A coding agent's request: system prompt, tools, ``turns`` messages of history."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": text(rng, 800),
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
        for i in range(40)
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": text(rng, 12_000)}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": text(rng, rng.choice((150, 600, 2_000)))})
    return {"model": "auto", "messages": messages, "tools": tools}


def routing_for(target: str) -> Routing:
    config = parse_config(
        {
            "backends": {"t": {"kind": "litellm", "model": TARGETS[target]}},
            "routing": {"default": "t", "aliases": {"auto": None}},
            "store": {"enabled": False},
            "auth": {"required": False},
        }
    )
    return Routing(RulePolicy(config.routing, config.backends), {}, config)


def target_cases(
    target: str,
    encodings: Encodings,
    prices: PriceBook,
    bodies: dict[str, dict[str, Any]],
    reps: int,
) -> dict[str, float]:
    """The cases of the module docstring for one target: CPU us per request."""
    routing = routing_for(target)
    decision = routing.policy.decide(RequestFeatures("chat.completions", "auto", 1))
    config = TokenCountConfig()
    rng = random.Random(target)

    def plan(counter: PromptCounter, body: dict[str, Any], keyed: bool) -> RouteDecision:
        return plan_prompt(counter, prices, routing, decision, body, keyed).decision

    def cold(body: dict[str, Any], keyed: bool = True) -> Callable[[], object]:
        return lambda: plan(PromptCounter(config, encodings), body, keyed)

    agent = bodies["agent"]
    warm = PromptCounter(config, encodings)
    plan(warm, agent, True)  # the turn before: its long texts are cached
    turns = iter(range(10**6))

    def next_turn() -> object:
        new = {"role": "user", "content": text(rng, 300) + str(next(turns))}
        return plan(warm, {**agent, "messages": [*agent["messages"], new]}, True)

    return {
        "short": cpu_us(cold(bodies["short"], keyed=False), reps),
        "short_keyed": cpu_us(cold(bodies["short"]), reps),
        "agent_cold": cpu_us(cold(agent), reps),
        "agent_warm": cpu_us(next_turn, reps),
        "large_cold": cpu_us(cold(bodies["large"]), max(3, reps // 5)),
    }


def cpu_us(fn: Callable[[], object], reps: int) -> float:
    samples = []
    for _ in range(reps):
        t0 = time.thread_time()
        fn()
        samples.append((time.thread_time() - t0) * 1e6)
    return round(statistics.median(samples), 1)


def measure(quick: bool = False) -> dict[str, Any]:
    """The figures of the module docstring."""
    reps = 5 if quick else 25
    load_s: dict[str, float] = {}
    rss_before = _rss_mb()
    encodings = Encodings()
    rss_mb: dict[str, float] = {}
    for name in ("o200k_base", "cl100k_base"):
        t0 = time.perf_counter()
        encodings.load_in_background([name])
        encodings.wait(120)
        load_s[name] = round(time.perf_counter() - t0, 3)
        gc.collect()
        trim = load_malloc_trim()
        if trim is not None:
            trim(0)
        rss_mb[name] = round(_rss_mb() - rss_before, 1)
        rss_before += rss_mb[name]
    prices = PriceBook.load()
    rng = random.Random(45)
    short = {"model": "auto", "messages": [{"role": "user", "content": "Say hello in one line."}]}
    agent = agent_turn(rng, 60)
    large = {"model": "auto", "messages": [{"role": "user", "content": text(rng, 400_000)}]}
    bodies = {"short": short, "agent": agent, "large": large}
    cases: dict[str, dict[str, float]] = {}
    for target in TARGETS:
        for case, us in target_cases(target, encodings, prices, bodies, reps).items():
            cases.setdefault(case, {})[target] = us
    chars = {
        "agent_turn": sum(len(t) for t in prompt_texts(agent)[0]),
        "large": sum(len(t) for t in prompt_texts(large)[0]),
    }
    return {
        "cases_us": cases,
        "chars": chars,
        "load_s": load_s,
        "encoding_rss_mb": rss_mb,
        "repetitions": reps,
    }


def _rss_mb() -> float:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.token_count")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    result = measure(parser.parse_args(argv).quick)
    for case, by_target in result["cases_us"].items():
        row = "  ".join(f"{t}: {us:>9.1f} us" for t, us in by_target.items())
        print(f"{case:<12} {row}", file=sys.stderr)
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
