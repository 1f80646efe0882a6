"""What finding a request's secrets costs the gateway per request, for a target with ``secrets:
redact`` or ``block``, and what loading the scrubber costs once.

    python -m loadtests.bench.secret_scan [--quick]     (make bench-secret-scan; also a
                                                       section of make bench-gateway)

Each case is timed as the door runs it (:func:`gateway.doors.secret_guard.guard`:
:meth:`~gateway.secrets.scanner.SecretScanner.scan` of the internal body, the redacted body
built where a secret is found):

- ``short``: the gateway benchmark's prompt, no secret (never seen: the memo is empty);
- ``short_secret``: a one-line prompt holding a GitHub token: scanned and redacted, and the
  answer that repeats its placeholder restored (:func:`~gateway.doors.secret_guard.
  restored_result`'s walk);
- ``agent_cold``: a coding agent's turn never seen: a 12k-character system prompt, 40 tools (not
  scanned: definitions), 60 messages of history whose tool results are this repository's own
  source files (code says ``token``, ``key`` and ``secret`` everywhere, so the detectors'
  gates open often), a token and a private key among them;
- ``agent_warm``: the next turn of that conversation (one message more): the history's
  detections come from the memo;
- ``large_cold``: a 400k-character pasted source dump never seen (on a worker thread in the
  gateway: the body is over ``limits.offload_body_bytes``);
- ``agent_cold_rules`` / ``agent_cold_plugins``: the hand-written rules alone, and the
  detect-secrets plugins alone, on the agent turn's texts: where the cold cost goes (what a
  cheaper pre-filter in front of either could save at most);
- ``stream_event_plain`` / ``stream_event_placeholder``: one streamed chunk through the
  restorer, without a ``<`` (passed on as it came) and holding a placeholder (read, restored,
  written again).

Figures are the median CPU time of this thread per request (``time.thread_time``), in
microseconds. The last line of stdout is one JSON object: ``cases_us``, ``chars`` (of the texts
scanned), ``import_s`` (the scrubber's import, detect-secrets with it, in a fresh interpreter),
``repetitions``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from gateway.secrets.scanner import SecretScanner
from gateway.secrets.stream import StreamRestorer
from gateway.secrets.texts import map_request, map_texts
from gateway.wire.sse import encode_event
from loadtests.bench.gateway.loadgen import PROMPT
from loadtests.bench.token_count import text

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ghp_" + "Zq8LmN3pR5tV7xB9dF2hJ4kS6wY1cE0aG3iK"  # random, fake
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBvQm3x8kTqQ2vN9rYtL5hWcJ0sD7fXe4gKpUaZ1iHbMw==\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


def sources(chars: int) -> list[str]:
    """This repository's gateway sources, in a fixed order, about ``chars`` characters."""
    out: list[str] = []
    total = 0
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        if total >= chars:
            break
        out.append(path.read_text())
        total += len(out[-1])
    return out


def agent_turn(rng: random.Random, turns: int) -> dict[str, Any]:
    """A coding agent's request: system prompt, tools, ``turns`` messages of history whose tool
    results are source files, with a token and a private key pasted among them."""
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "description": text(rng, 800)}}
        for i in range(40)
    ]
    files = iter(sources(200_000))
    messages: list[dict[str, Any]] = [{"role": "system", "content": text(rng, 12_000)}]
    for i in range(turns):
        if i % 3 == 2:
            messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": next(files, "")})
        else:
            role = "user" if i % 3 == 0 else "assistant"
            messages.append({"role": role, "content": text(rng, rng.choice((150, 600, 2_000)))})
    messages[10]["content"] = f"GITHUB_TOKEN={TOKEN}\nDEPLOY_KEY:\n{PEM}\n"
    return {"model": "auto", "messages": messages, "tools": tools}


def scanned_texts(body: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def collect(value: str, _encoded: bool) -> str:
        found.append(value)
        return value

    map_request(body, collect)
    return found


def cpu_us(fn: Callable[[], object], reps: int) -> float:
    samples = []
    for _ in range(reps):
        t0 = time.thread_time()
        fn()
        samples.append((time.thread_time() - t0) * 1e6)
    return round(statistics.median(samples), 1)


def import_s() -> float:
    """The scrubber's import (with detect-secrets), in a fresh interpreter."""
    code = (
        "import time; t = time.perf_counter(); import traffic.scrub.scrubber; "
        "print(time.perf_counter() - t)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return round(float(done.stdout.strip().splitlines()[-1]), 3)


def measure(quick: bool = False) -> dict[str, Any]:
    """The figures of the module docstring."""
    reps = 5 if quick else 25
    loaded = import_s()
    from traffic.scrub import plugins, rules, scrubber

    rng = random.Random(47)
    short = {"model": "auto", "messages": [{"role": "user", "content": PROMPT}]}
    secret = {"model": "auto", "messages": [{"role": "user", "content": f"use {TOKEN} to push"}]}
    agent = agent_turn(rng, 60)
    dump = "\n".join(sources(400_000))[:400_000]
    large = {"model": "auto", "messages": [{"role": "user", "content": dump}]}

    def cold(body: dict[str, Any]) -> Callable[[], object]:
        return lambda: SecretScanner().scan(body, None)

    answer = {"choices": [{"message": {"content": "Pushed with <SECRET_GITHUB_TOKEN_1>."}}]}

    def short_secret() -> object:
        redaction = SecretScanner().scan(secret, None)
        assert redaction is not None
        return map_texts(answer, redaction.swap.restore)

    warm = SecretScanner()
    warm.scan(agent, None)  # the turn before: its texts' detections are memoised
    turns = iter(range(10**6))

    def next_turn() -> object:
        new = {"role": "user", "content": text(rng, 300) + str(next(turns))}
        return warm.scan({**agent, "messages": [*agent["messages"], new]}, None)

    texts = scanned_texts(agent)
    redaction = SecretScanner().scan(agent, None)
    assert redaction is not None and redaction.kinds == ("github_token", "private_key_pem")
    plain = encode_event({"choices": [{"index": 0, "delta": {"content": " the answer"}}]})
    held = encode_event(
        {"choices": [{"index": 0, "delta": {"content": " <SECRET_GITHUB_TOKEN_1>"}}]}
    )
    restorer = StreamRestorer(redaction.swap, "openai")
    cases = {
        "short": cpu_us(cold(short), reps * 4),
        "short_secret": cpu_us(short_secret, reps * 4),
        "agent_cold": cpu_us(cold(agent), reps),
        "agent_warm": cpu_us(next_turn, reps),
        "large_cold": cpu_us(cold(large), max(3, reps // 5)),
        "agent_cold_rules": cpu_us(lambda: [rules.detect(t, pii=False) for t in texts], reps),
        "agent_cold_plugins": cpu_us(
            lambda: [plugins.detect(t, scrubber.LIBRARY_PLUGINS) for t in texts], reps
        ),
        "stream_event_plain": cpu_us(lambda: restorer.feed(plain), reps * 40),
        "stream_event_placeholder": cpu_us(lambda: restorer.feed(held), reps * 40),
    }
    chars = {
        "agent_turn": sum(map(len, texts)),
        "large": sum(map(len, scanned_texts(large))),
        "agent_body_json": len(orjson.dumps(agent)),
    }
    return {"cases_us": cases, "chars": chars, "import_s": loaded, "repetitions": reps}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.secret_scan")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    result = measure(parser.parse_args(argv).quick)
    for case, us in result["cases_us"].items():
        print(f"{case:<26} {us:>11.1f} us", file=sys.stderr)
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
