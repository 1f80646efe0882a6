"""What ``transformers``' ``AutoTokenizer.from_pretrained(model_dir)`` builds (a fast tokenizer
and its chat template), without importing ``transformers`` (nor torch with it).

How: the ``tokenizers`` library reads ``tokenizer.json`` as transformers' fast tokenizer
(``TokenizersBackend``) does: its ``post_processor`` as saved (with a ``tokenizer.json``,
transformers ignores the config's ``add_bos_token``), truncation and padding off, special
tokens the config names but the file lacks added. ``jinja2`` renders the chat template in
transformers' environment (``_compile_jinja_template``): sandboxed, ``trim_blocks``,
``lstrip_blocks``, loop controls, its ``tojson`` (no HTML escaping, json.dumps' options),
``raise_exception``, ``strftime_now`` and the ``generation`` tag, with the special tokens
(``bos_token``, ``eos_token``, ...) as variables; ``continue_final_message`` is handled as in
``render_jinja_template``. The template is ``chat_template.jinja`` (and
``additional_chat_templates/*.jinja``) if present, else the config's; a named set gives
``tool_use`` when tools are passed, else ``default``.

Not reproduced: tokenizer classes whose constructor rebuilds the pipeline instead of reading
``tokenizer.json`` (transformers 5's ``Qwen2Tokenizer`` rebuilds the same one), slow
(sentencepiece) tokenizers, and transformers' regex patch for old Mistral checkpoints.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import jinja2
    import jinja2.parser
    from tokenizers import AddedToken, Tokenizer

#: transformers' ``SPECIAL_TOKENS_ATTRIBUTES``: passed to every template as variables.
NAMED_SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
#: transformers marks the end of the message to continue with this, then cuts the text there.
CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    source: str
    compiled: jinja2.Template
    variables: frozenset[str]  # what the template reads (vLLM keeps only these kwargs)
    names_developer: bool  # vLLM's test: a quoted "developer" anywhere in the source


@dataclass(frozen=True, slots=True)
class HfTokenizer:
    """What transformers' ``AutoTokenizer.from_pretrained`` builds from a directory holding a
    ``tokenizer.json``, read with ``tokenizers`` and ``jinja2`` only."""

    tokenizer: Tokenizer
    templates: dict[str, ChatTemplate]
    named_templates: bool  # a set of named templates rather than one
    special_tokens: dict[str, str]  # template variables
    template_error: type[Exception]  # what a template raises (jinja2's, imported with it)

    @classmethod
    def read(cls, model_dir: Path) -> HfTokenizer:
        """Blocking: reads and compiles (``tokenizers`` and ``jinja2`` are imported here, so
        importing the gateway costs neither); raises on missing or invalid files."""
        import jinja2
        from tokenizers import Tokenizer

        config_path = model_dir / "tokenizer_config.json"
        config: dict[str, Any] = (
            json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
        )
        legacy_map = model_dir / "special_tokens_map.json"
        if "added_tokens_decoder" not in config and legacy_map.exists():
            config.update(json.loads(legacy_map.read_text(encoding="utf-8")))
        tokenizer_path = model_dir / "tokenizer.json"
        if not tokenizer_path.is_file():
            raise FileNotFoundError(f"{tokenizer_path} not found")
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        if tokenizer.padding is not None:  # transformers takes its pad token as a default
            config.setdefault("pad_token", tokenizer.padding["pad_token"])
        tokenizer.no_truncation()  # saved or not, transformers turns both off unless asked
        tokenizer.no_padding()
        tokenizer.encode_special_tokens = bool(config.get("split_special_tokens", False))
        special, extra = _special_tokens(config)
        _add_missing_tokens(tokenizer, config, special, extra)
        sources: str | dict[str, str] | None = _config_templates(config.get("chat_template"))
        files = {"default": model_dir / "chat_template.jinja"}
        extra_dir = model_dir / "additional_chat_templates"
        if extra_dir.is_dir():
            files.update({p.stem: p for p in sorted(extra_dir.glob("*.jinja"))})
        found = {name: p.read_text(encoding="utf-8") for name, p in files.items() if p.is_file()}
        if found:
            sources = found["default"] if list(found) == ["default"] else found
        env = _jinja_environment()
        by_name = {"default": sources} if isinstance(sources, str) else sources or {}
        return cls(
            tokenizer,
            {name: _compile(env, source) for name, source in by_name.items()},
            isinstance(sources, dict),
            {k: _token_text(v) for k, v in special.items()},
            jinja2.TemplateError,
        )

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """``tokenizer(text, add_special_tokens=...)["input_ids"]``."""
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        documents: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        **template_kwargs: Any,
    ) -> list[int]:
        """``apply_chat_template(..., tokenize=True, return_dict=False)``, raising as it does
        (``ValueError``, ``TypeError``, :attr:`template_error`)."""
        template = self.template_for(tools)
        if template is None:
            raise ValueError("no chat template (or no default one among the named templates)")
        text = self.render(
            template,
            conversation,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            **template_kwargs,
        )
        return self.encode(text, add_special_tokens=False)

    def template_for(self, tools: list[dict[str, Any]] | None) -> ChatTemplate | None:
        """transformers' ``get_chat_template``: ``tool_use`` when tools are given, else
        ``default``."""
        if self.named_templates and tools is not None and "tool_use" in self.templates:
            return self.templates["tool_use"]
        return self.templates.get("default")

    def render(
        self,
        template: ChatTemplate,
        conversation: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        documents: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        **kwargs: Any,
    ) -> str:
        """transformers' ``render_jinja_template`` for one conversation."""
        if not conversation:
            raise ValueError("Cannot apply chat template to an empty conversation.")
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt are not compatible")
        if tools is not None and not all(isinstance(t, dict) for t in tools):
            raise ValueError("Tools should be JSON schemas")
        if documents is not None and not all(isinstance(d, dict) for d in documents):
            raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
        chat = conversation
        final = ""
        if continue_final_message:
            chat, final = _mark_final_message(conversation, continue_final_message, template)
        text = template.compiled.render(
            messages=chat,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **{**self.special_tokens, **kwargs},
        )
        if not continue_final_message:
            return text
        if final.strip() not in text or CONTINUE_TAG.strip() not in text:
            raise ValueError("continue_final_message is set but the final message was cut")
        at = text.rindex(CONTINUE_TAG.strip())
        if text[at : at + len(CONTINUE_TAG)] == CONTINUE_TAG:
            return text[:at]
        return text[:at].rstrip()  # the template trimmed the tag's space: maybe the text's too


def _mark_final_message(
    conversation: list[dict[str, Any]], key: bool | str, template: ChatTemplate
) -> tuple[list[dict[str, Any]], str]:
    """The conversation with :data:`CONTINUE_TAG` after the text to continue, and that text."""
    chat = copy.deepcopy(conversation)
    field = key if isinstance(key, str) else "content"
    final = chat[-1].get(field)
    if final is None:
        raise ValueError(f'continue_final_message is set but the final message has no "{field}"')
    if field not in template.source:
        raise ValueError(f'continue_final_message is set to "{field}", which the template lacks')
    if isinstance(final, list | tuple):
        for block in reversed(final):
            if "text" in block:
                text = str(block["text"])
                block["text"] = text + CONTINUE_TAG
                return chat, text
        raise ValueError("continue_final_message is set but there is no text to continue")
    chat[-1][field] = final + CONTINUE_TAG
    return chat, str(final)


def _jinja_environment() -> jinja2.Environment:
    """transformers' ``_compile_jinja_template`` environment."""
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}`` (transformers marks assistant text for
        training masks with it) renders its body."""

        tags = {"generation"}

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: Callable[[], str]) -> str:
            return caller()

    def raise_exception(message: str) -> NoReturn:
        raise jinja2.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | str | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        # transformers' filter: no HTML escaping, non-ASCII kept, json.dumps' options exposed.
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def _compile(env: jinja2.Environment, source: str) -> ChatTemplate:
    import jinja2.meta

    variables = frozenset(jinja2.meta.find_undeclared_variables(env.parse(source)))
    developer = '"developer"' in source or "'developer'" in source
    return ChatTemplate(source, env.from_string(source), variables, developer)


def _config_templates(value: Any) -> str | dict[str, str] | None:
    """The config's ``chat_template``: one string, or a list of ``{name, template}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return {str(t["name"]): str(t["template"]) for t in value if isinstance(t, Mapping)}
    return None


def _token_text(value: Any) -> str:
    return str(value.get("content", "")) if isinstance(value, Mapping) else str(value)


def _is_token(value: Any) -> bool:
    """A string, or an ``AddedToken`` as the config serialises it."""
    return isinstance(value, str) or (
        isinstance(value, Mapping) and value.get("__type") == "AddedToken"
    )


def _special_tokens(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """Named special tokens (those of :data:`NAMED_SPECIAL_TOKENS`, other ``*_token`` keys and a
    dict of ``extra_special_tokens``), and a list of extra ones, as transformers reads them."""
    named = {k: config[k] for k in NAMED_SPECIAL_TOKENS if config.get(k) is not None}
    for key, value in config.items():
        if key.endswith("_token") and key not in named and _is_token(value):
            named[key] = value
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    if isinstance(extra, Mapping):
        named.update({k: v for k, v in extra.items() if _is_token(v)})
        extra = []
    return named, [t for t in extra if _is_token(t)]


def _added_token(value: Any, *, special: bool) -> AddedToken:
    from tokenizers import AddedToken

    if isinstance(value, Mapping):
        fields = {k: v for k, v in value.items() if k not in ("__type", "id")}
        fields["special"] = bool(fields.get("special")) or special
        return AddedToken(**fields)
    return AddedToken(str(value), special=True)


def _add_missing_tokens(
    tokenizer: Tokenizer, config: Mapping[str, Any], named: Mapping[str, Any], extra: list[Any]
) -> None:
    """transformers' ``TokenizersBackend.__init__``: tokens of the config's
    ``added_tokens_decoder`` not in ``tokenizer.json`` as they are, then special tokens it names
    that are still missing (usually none)."""
    have = {repr(t) for t in tokenizer.get_added_tokens_decoder().values()}
    decoder = config.get("added_tokens_decoder") or {}
    new = [
        _added_token(decoder[i], special=False)
        for i in sorted(decoder, key=int)
        if isinstance(decoder[i], Mapping)
    ]
    new = [t for t in new if repr(t) not in have]
    texts = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    texts |= {t.content for t in new}
    for value, is_named in (*((v, True) for v in named.values()), *((v, False) for v in extra)):
        if _token_text(value) not in texts:
            new.append(_added_token(value, special=is_named))
            texts.add(_token_text(value))
    if new:
        tokenizer.add_tokens(new)
