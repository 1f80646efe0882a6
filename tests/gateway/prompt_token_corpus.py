"""Chat templates, conversations and request bodies that the prompt-token tests render both ways
(ours and transformers'); data only."""

from __future__ import annotations

from typing import Any

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
