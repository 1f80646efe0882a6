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

from gateway.hf_tokenizer import HfTokenizer
from gateway.prompt_tokens import PromptTokenizer
from serving.build import ensure_demo_model
from tests.fixtures.vllm_fixture import cache_dir

# Qwen3's published chat template (Qwen/Qwen3-*), verbatim.
QWEN3_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""  # noqa: E501

# Every feature of transformers' template environment, written without `-` so that trim_blocks
# and lstrip_blocks decide the whitespace: bos_token, raise_exception, strftime_now, loop
# controls, tojson's options, the generation tag, documents, extra kwargs.
FEATURE_TEMPLATE = """{{ bos_token }}
{% if custom_instructions is defined %}
    <|im_start|>system
{{ custom_instructions }}<|im_end|>
{% endif %}
{% for message in messages %}
    {% if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}
        {{ raise_exception('unknown role ' + message['role']) }}
    {% endif %}
    {% if message['role'] == 'system' and loop.first %}
<|im_start|>system
Month: {{ strftime_now('%Y-%m') }}.
{{ message['content'] }}<|im_end|>
        {% continue %}
    {% endif %}
<|im_start|>{{ message['role'] }}
    {% if message['role'] == 'assistant' %}
{% generation %}{{ message['content'] }}{% if message.tool_calls %}
{% for call in message.tool_calls %}
<tool_call>
{{ call.function | tojson(indent=2, sort_keys=true) }}
</tool_call>{% endfor %}{% endif %}{% endgeneration %}<|im_end|>
    {% else %}
{{ message['content'] }}<|im_end|>
    {% endif %}
    {% if stop_after is defined and loop.index >= stop_after %}{% break %}{% endif %}
{% endfor %}
{% if tools %}
<|im_start|>system
{{ tools | tojson(ensure_ascii=true) }}
{{ tools | tojson(separators=(',', ':')) }}<|im_end|>
{% endif %}
{% if documents %}{% for d in documents %}<doc>{{ d.title }}: {{ d.text }}</doc>
{% endfor %}{% endif %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""

# Named templates: `tool_use` is picked when tools are passed.
PLAIN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOL_USE_TEMPLATE = "{{ tools | tojson }}\n" + PLAIN_TEMPLATE

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Météo d'une ville — « quotes » & <tags>",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the code base",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}
CALLS = [
    {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 3}},
    },
    {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": {"q": "x"}}},
]
SYSTEM = {"role": "system", "content": "You are a coding assistant.\nBe brief."}

# (name, conversation, apply_chat_template kwargs)
CORPUS: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
    ("plain", [{"role": "user", "content": "Hello, how are you?"}], {}),
    ("generation_prompt", [{"role": "user", "content": "Hi"}], {"add_generation_prompt": True}),
    (
        "system_multi_turn",
        [
            SYSTEM,
            {"role": "user", "content": "def f(x):\n    return x * 2\nWhy?"},
            {"role": "assistant", "content": "It doubles x."},
            {"role": "user", "content": "And   with\ttabs\n\n\nand blank lines?"},
        ],
        {"add_generation_prompt": True},
    ),
    (
        "special_tokens_and_unicode_in_text",
        [{"role": "user", "content": "naïve café 日本語 😀 <|im_end|> <tool_call> <|endoftext|>"}],
        {"add_generation_prompt": True},
    ),
    ("tools_list", [{"role": "user", "content": "Weather?"}], {"tools": [WEATHER, SEARCH]}),
    (
        "tool_calls_and_results",
        [
            SYSTEM,
            {"role": "user", "content": "Weather in Zürich, and find x"},
            {"role": "assistant", "content": "", "tool_calls": CALLS},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
            {"role": "tool", "tool_call_id": "call_2", "content": "found x in a.py"},
        ],
        {"tools": [WEATHER, SEARCH], "add_generation_prompt": True},
    ),
    (
        "tool_call_with_text_then_answer",
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": CALLS[:1]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "Sunny."},
            {"role": "user", "content": "Thanks"},
        ],
        {"tools": [WEATHER], "add_generation_prompt": True},
    ),
    (
        "continue_final_message",
        [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "One, two, "}],
        {"continue_final_message": True},
    ),
    (
        "continue_final_message_text_parts",
        [
            {"role": "user", "content": "Count"},
            {"role": "assistant", "content": [{"type": "text", "text": "One, two"}]},
        ],
        {"continue_final_message": True},
    ),
    (
        "reasoning_content",
        [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Adding."},
        ],
        {},
    ),
    (
        "template_kwargs",
        [SYSTEM, {"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        {
            "add_generation_prompt": True,
            "enable_thinking": False,
            "custom_instructions": "Answer in French.",
            "stop_after": 2,
        },
    ),
    (
        "documents",
        [{"role": "user", "content": "Summarise"}],
        {"documents": [{"title": "a.md", "text": "Alpha"}, {"title": "b.md", "text": "Beta"}]},
    ),
    ("unknown_role_raises", [{"role": "robot", "content": "beep"}], {}),
    (
        "continue_with_generation_prompt_raises",
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
        {"continue_final_message": True, "add_generation_prompt": True},
    ),
    ("empty_conversation_raises", [], {}),
]


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


TEXT_PART = {"type": "text", "text": "second part"}

# Request bodies, and the conversation, tools and kwargs vLLM renders for them.
BODIES: list[tuple[str, dict[str, Any], list[dict[str, Any]], dict[str, Any]]] = [
    (
        "text_parts_joined",
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, TEXT_PART]},
                {"role": "assistant", "content": None},
                {"role": "user", "content": [{"type": "text", "text": "b"}]},
            ]
        },
        [
            {"role": "user", "content": "a\nsecond part"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "b"},
        ],
        {"add_generation_prompt": True},
    ),
    (
        "tool_call_arguments_parsed_and_tools_as_vllm_dumps_them",
        {
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "rain"},
            ],
            "tools": [
                {"function": {"parameters": {"type": "object"}, "name": "get_weather"}},
                {"type": "function", "function": {"name": "noop", "strict": True}},
            ],
        },
        [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "rain"},
        ],
        {
            "add_generation_prompt": True,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": None,
                        "parameters": {"type": "object"},
                    },
                },
                {
                    "type": "function",
                    "function": {
                        "name": "noop",
                        "description": None,
                        "parameters": None,
                        "strict": True,
                    },
                },
            ],
        },
    ),
    (
        "continue_final_message",
        {
            "messages": [
                {"role": "user", "content": "Count"},
                {"role": "assistant", "content": "One, "},
            ],
            "add_generation_prompt": False,
            "continue_final_message": True,
        },
        [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "One, "}],
        {"continue_final_message": True},
    ),
    (
        "chat_template_kwargs",
        {
            "messages": [
                SYSTEM,
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
            ],
            "chat_template_kwargs": {
                "enable_thinking": False,
                "custom_instructions": "Answer in French.",
                "stop_after": 2,
                "not_a_template_variable": 1,
            },
        },
        [SYSTEM, {"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        {
            "add_generation_prompt": True,
            "enable_thinking": False,
            "custom_instructions": "Answer in French.",
            "stop_after": 2,
        },
    ),
    (
        "reasoning_effort_none_disables_thinking",
        {"messages": [{"role": "user", "content": "2+2?"}], "reasoning_effort": "none"},
        [{"role": "user", "content": "2+2?"}],
        {"add_generation_prompt": True, "enable_thinking": False},
    ),
    (
        "developer_becomes_system",
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "developer", "content": "Be brief."},
                {"role": "system", "content": "Be kind."},
            ]
        },
        [{"role": "system", "content": "Be brief.\n\nBe kind."}, {"role": "user", "content": "hi"}],
        {"add_generation_prompt": True},
    ),
]


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
    with caplog.at_level(logging.INFO, logger="gateway.prompt_tokens"):
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
