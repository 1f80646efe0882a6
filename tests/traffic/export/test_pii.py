"""Scrubbing exported texts: messages, tool-call arguments and answers through the one
scrubber (traffic.scrub; its own tests say what must go and what must stay), counted per
category for the manifest."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

from traffic.export.pii import CachingScrubber, scrub_messages, scrub_text, scrub_turn
from traffic.export.turns import AssistantTurn, ToolCall


def test_mixed_text_counts_every_category() -> None:
    text = (
        "Hi, I'm at jo@corp.io or +1 212 555 0147; prod box 198.51.99.7, "
        "key sk-abcdefghijklmnopqrstuvwxyz123456, card 4242424242424242."
    )
    out, counts = scrub_text(text)
    assert out == (
        "Hi, I'm at <EMAIL_1> or <PHONE_1>; prod box <IP_1>, key <SECRET_OPENAI_KEY_1>, "
        "card <CREDIT_CARD_1>."
    )
    assert counts == {"email": 1, "phone": 1, "ip": 1, "secret": 1, "credit_card": 1}


def test_a_text_without_findings_comes_back_as_it_is() -> None:
    text = "git checkout 720dddd44ce842174204349df0547349ffe9de50 && npm ci"
    assert scrub_text(text) == (text, {})


def test_secret_inside_json_arguments_keeps_json_valid() -> None:
    args = json.dumps(
        {"headers": {"Authorization": "Bearer abcdefghij0123456789"}, "to": "ops@corp.io"}
    )
    out, counts = scrub_text(args)
    assert json.loads(out) == {
        "headers": {"Authorization": "Bearer <SECRET_BEARER_TOKEN_1>"},
        "to": "<EMAIL_1>",
    }
    assert counts == {"secret": 1, "email": 1}


def test_scrub_messages_covers_content_and_tool_arguments_without_mutation() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "admin is root@corp.io"},
        {"role": "user", "content": "deploy to 203.0.113.9"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "ssh", "arguments": '{"host":"203.0.113.9"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    before = copy.deepcopy(messages)
    out, counts = scrub_messages(messages)
    assert messages == before
    assert out[0]["content"] == "admin is <EMAIL_1>"
    assert out[1]["content"] == "deploy to <IP_1>"
    assert out[2]["tool_calls"][0]["function"]["arguments"] == '{"host":"<IP_1>"}'
    assert out[2]["tool_calls"][0]["id"] == "c1"
    assert out[3] == messages[3]
    assert counts == {"email": 1, "ip": 2}


def test_scrub_turn_covers_the_answer_and_its_tool_calls() -> None:
    answer = AssistantTurn(
        "Set HF_TOKEN=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 first.",
        (ToolCall("c1", "shell", '{"cmd": "curl -u deploy:Maple55-db https://ci"}'),),
    )
    counts: Counter[str] = Counter()
    out = scrub_turn(answer, scrub_text, counts)
    assert out is not None
    assert out.content == "Set HF_TOKEN=<SECRET_HUGGINGFACE_TOKEN_1> first."
    assert out.tool_calls[0].arguments == '{"cmd": "curl -u deploy:<SECRET_PASSWORD_1> https://ci"}'
    assert counts == {"secret": 2}
    assert scrub_turn(None, scrub_text, counts) is None


def test_the_caching_scrubber_answers_as_scrub_text_does() -> None:
    cached = CachingScrubber(max_chars=64)
    texts = ["mail jo@corp.io", "nothing here", "mail jo@corp.io", "x" * 80, "ip 8.8.8.8"]
    for text in texts:
        out, counts = cached(text)
        assert (out, counts) == scrub_text(text)
        counts["secret"] += 1  # callers own the counter they get
    assert cached("mail jo@corp.io")[1] == {"email": 1}
