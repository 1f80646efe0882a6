"""The gateway's prompt tokenizer gives the token ids ``transformers`` gives, without importing it:
``apply_chat_template(..., tokenize=True)`` on a corpus of conversations and ``tokenizer(prompt)``
on completions prompts, on the project's own checkpoint and on tokenizer directories built here
(a Qwen3-style one with its published chat template, one with a BOS post-processor, a named
template set). Request bodies become the conversation, tools and kwargs vLLM renders; loading
happens off the request path, in the background."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import jinja2
import pytest
from tokenizers import Tokenizer, processors
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from gateway.local.hf_tokenizer import HfTokenizer
from gateway.local.prompt_tokens import PromptTokenizer
from serving.build import ensure_demo_model
from tests.fixtures.vllm_fixture import cache_dir
from tests.gateway.prompt_token_corpus import (
    BODIES,
    CORPUS,
    FEATURE_TEMPLATE,
    PLAIN_TEMPLATE,
    QWEN3_TEMPLATE,
    TOOL_USE_TEMPLATE,
)


# Qwen3's published chat template (Qwen/Qwen3-*), verbatim.
def _write_config(directory: Path, config: dict[str, Any]) -> None:
    (directory / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False))


def _added_tokens_decoder(tokenizer_json: Path) -> dict[str, dict[str, Any]]:
    added = json.loads(tokenizer_json.read_text())["added_tokens"]
    return {str(t.pop("id")): t for t in added}


@pytest.fixture(scope="module")
def model_dir() -> Path:
    """The project's own checkpoint: its trained tokenizer and ChatML chat template."""
    return ensure_demo_model(cache_dir())


@pytest.fixture(scope="module")
def qwen_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3's layout: class ``Qwen2Tokenizer`` (transformers rebuilds it from the vocabulary),
    its published template, extra special tokens, no BOS."""
    d = tmp_path_factory.mktemp("qwen3")
    shutil.copy(model_dir / "tokenizer.json", d / "tokenizer.json")
    _write_config(
        d,
        {
            "add_prefix_space": False,
            "added_tokens_decoder": _added_tokens_decoder(d / "tokenizer.json"),
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "bos_token": None,
            "chat_template": QWEN3_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "eos_token": "<|im_end|>",
            "errors": "replace",
            "model_max_length": 131072,
            "pad_token": "<|endoftext|>",
            "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": None,
        },
    )
    return d


@pytest.fixture(scope="module")
def bos_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BOS added by ``tokenizer.json``'s post-processor, a BOS token the file lacks (added from
    the config), ``chat_template.jinja`` winning over the config's template, an ``add_bos_token``
    transformers ignores, truncation and padding saved in the file."""
    d = tmp_path_factory.mktemp("bos")
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", pair="<|endoftext|> $A $B", special_tokens=[("<|endoftext|>", 0)]
    )
    tokenizer.enable_truncation(max_length=8)  # saved, and off when transformers encodes
    tokenizer.enable_padding(length=512, pad_id=0, pad_token="<|endoftext|>")
    tokenizer.save(str(d / "tokenizer.json"))
    (d / "chat_template.jinja").write_text(FEATURE_TEMPLATE)
    _write_config(
        d,
        {
            "add_bos_token": True,
            "bos_token": "<|begin_of_text|>",
            "chat_template": "{{ raise_exception('the .jinja file wins') }}",
            "eos_token": "<|im_end|>",
            "image_token": "<|image|>",
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
    )
    return d


@pytest.fixture(scope="module")
def named_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A named template set, and special tokens from the legacy ``special_tokens_map.json``."""
    d = tmp_path_factory.mktemp("named")
    shutil.copy(model_dir / "tokenizer.json", d / "tokenizer.json")
    _write_config(
        d,
        {
            "chat_template": [
                {"name": "default", "template": PLAIN_TEMPLATE},
                {"name": "tool_use", "template": TOOL_USE_TEMPLATE},
            ],
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
    )
    special = {
        "eos_token": {"content": "<|im_end|>", "special": True},
        "pad_token": "<|endoftext|>",
    }
    (d / "special_tokens_map.json").write_text(json.dumps(special))
    return d


DIRS = ["model_dir", "qwen_dir", "bos_dir", "named_dir"]


@pytest.fixture(scope="module")
def pair(request: pytest.FixtureRequest) -> tuple[HfTokenizer, PreTrainedTokenizerBase]:
    """Ours and transformers' tokenizer of one directory."""
    d: Path = request.getfixturevalue(request.param)
    return HfTokenizer.read(d), AutoTokenizer.from_pretrained(str(d))


def _outcome(render: Any) -> Any:
    try:
        return render()
    except (ValueError, TypeError, jinja2.TemplateError) as exc:
        return type(exc).__name__


@pytest.mark.parametrize("pair", DIRS, indirect=True)
@pytest.mark.parametrize(("name", "conversation", "kwargs"), CORPUS, ids=[c[0] for c in CORPUS])
def test_chat_ids_equal_transformers(
    pair: tuple[HfTokenizer, PreTrainedTokenizerBase],
    name: str,
    conversation: list[dict[str, Any]],
    kwargs: dict[str, Any],
) -> None:
    ours, theirs = pair
    expected = _outcome(
        lambda: theirs.apply_chat_template(conversation, tokenize=True, return_dict=False, **kwargs)
    )
    assert _outcome(lambda: ours.apply_chat_template(conversation, **kwargs)) == expected


@pytest.mark.parametrize("pair", DIRS, indirect=True)
def test_template_variables_are_transformers_special_tokens(
    pair: tuple[HfTokenizer, PreTrainedTokenizerBase],
) -> None:
    ours, theirs = pair
    assert ours.special_tokens == theirs.special_tokens_map


@pytest.mark.parametrize("pair", DIRS, indirect=True)
@pytest.mark.parametrize(
    "text",
    ["Hello world", "  leading spaces\n\ttabs", "<|im_start|>user\nhi<|im_end|>", "日本語 😀", ""],
)
def test_completion_ids_equal_transformers(
    pair: tuple[HfTokenizer, PreTrainedTokenizerBase], text: str
) -> None:
    ours, theirs = pair
    for special in (True, False):
        assert ours.encode(text, special) == theirs(text, add_special_tokens=special)["input_ids"]


def test_the_bos_post_processor_and_the_config_bos_are_used(bos_dir: Path) -> None:
    ours = HfTokenizer.read(bos_dir)
    assert ours.encode("hi")[0] == 0  # the post-processor's <|endoftext|>
    bos = ours.tokenizer.token_to_id("<|begin_of_text|>")
    assert bos is not None
    assert ours.apply_chat_template([{"role": "user", "content": "hi"}])[0] == bos
    with pytest.raises(jinja2.TemplateError, match="unknown role robot"):
        ours.apply_chat_template([{"role": "robot", "content": "beep"}])


@pytest.mark.parametrize("pair", DIRS, indirect=True)
@pytest.mark.parametrize(
    ("name", "body", "conversation", "kwargs"), BODIES, ids=[b[0] for b in BODIES]
)
def test_request_body_ids_equal_transformers_on_vllms_conversation(
    pair: tuple[HfTokenizer, PreTrainedTokenizerBase],
    name: str,
    body: dict[str, Any],
    conversation: list[dict[str, Any]],
    kwargs: dict[str, Any],
) -> None:
    _, theirs = pair
    tokenizer = PromptTokenizer.load(theirs.name_or_path)
    expected = theirs.apply_chat_template(conversation, tokenize=True, return_dict=False, **kwargs)
    assert tokenizer.chat_token_ids(body) == tuple(expected)


def test_chat_add_special_tokens_and_completions_follow_the_request(bos_dir: Path) -> None:
    theirs = AutoTokenizer.from_pretrained(str(bos_dir))
    tokenizer = PromptTokenizer.load(bos_dir)
    messages = [{"role": "user", "content": "hi"}]
    text = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    body = {"messages": messages, "add_special_tokens": True}
    assert tokenizer.chat_token_ids(body) == tuple(theirs(text)["input_ids"])
    prompt = "def f(x):\n    return x"
    assert tokenizer.completion_token_ids({"prompt": prompt}) == tuple(theirs(prompt)["input_ids"])
    assert tokenizer.completion_token_ids({"prompt": [prompt]}) == tuple(
        theirs(prompt)["input_ids"]
    )
    unspecial = {"prompt": prompt, "add_special_tokens": False}
    assert tokenizer.completion_token_ids(unspecial) == tuple(
        theirs(prompt, add_special_tokens=False)["input_ids"]
    )
    assert tokenizer.completion_token_ids({"prompt": [5, 6, 7]}) == (5, 6, 7)
    assert tokenizer.token_ids("completions", {"prompt": ["a", "b"]}) is None  # a batch


def test_what_vllm_would_refuse_or_we_cannot_reproduce_is_none(model_dir: Path) -> None:
    tokenizer = PromptTokenizer.load(model_dir)
    user = {"role": "user", "content": "hi"}
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    body: dict[str, Any]
    for body in (
        {"messages": []},
        {"messages": [{"role": "user", "content": [image]}]},
        {"messages": [user], "tools": [{"type": "function"}]},
        {"messages": [user], "chat_template_kwargs": {"truncation": True, "max_length": 2}},
        {"messages": [user], "continue_final_message": True},  # no assistant text to continue
        {
            "messages": [
                user,
                {
                    "role": "assistant",
                    "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}],
                },
            ]
        },
    ):
        assert tokenizer.chat_token_ids(body) is None, body
    assert tokenizer.token_ids("embeddings", {"input": "x"}) is None


async def test_loading_happens_in_the_background_and_is_logged(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    tokenizer = PromptTokenizer(model_dir)
    assert not tokenizer.loaded
    assert tokenizer.chat_token_ids(body) is None  # the selector scores on load alone
    assert await tokenizer.atoken_ids("chat.completions", body) is None
    assert await tokenizer.atoken_ids("completions", {"prompt": [1, 2]}) == (1, 2)  # no tokenizer
    with caplog.at_level(logging.INFO, logger="gateway.local.prompt_tokens"):
        tokenizer.load_in_background()
        tokenizer.load_in_background()  # already loading: no second thread
        assert tokenizer.wait(60)
    assert f"tokenizer {model_dir} loaded in" in caplog.text
    expected = PromptTokenizer.load(model_dir).chat_token_ids(body)
    assert expected is not None
    assert await tokenizer.atoken_ids("chat.completions", body) == expected


def test_a_failed_load_is_reported_and_can_be_retried(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokenizer = PromptTokenizer(tmp_path)
    tokenizer.load_in_background()
    assert not tokenizer.wait(60)
    assert tokenizer.failed and "tokenizer.json" in (tokenizer.error or "")
    assert "did not load" in caplog.text
    assert tokenizer.token_ids("chat.completions", {"messages": [{"role": "user"}]}) is None
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model_dir / name, tmp_path / name)
    tokenizer.load_in_background()
    assert tokenizer.wait(60) and not tokenizer.failed
    with pytest.raises(FileNotFoundError):
        PromptTokenizer.load(tmp_path / "missing")
