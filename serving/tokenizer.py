"""Train the self-hosted model's tokenizer from local text only.

How it works: a byte-level BPE (the GPT-2/Qwen family: text is split by a Qwen-style regex into
words, numbers, punctuation runs and whitespace runs, each piece is mapped to bytes, and merges
are learned over those bytes) is trained with the `tokenizers` library on a bounded,
deterministic sample of the Python standard library's own `.py` sources. Nothing is fetched
from a model hub. The result is saved as a Hugging Face fast tokenizer (`tokenizer.json` +
`tokenizer_config.json`) with a Qwen-style ChatML chat template that renders tools the hermes
way, which is what vLLM's `--tool-call-parser hermes` expects the model to emit.

Token ids are fixed: `<|endoftext|>`=0, `<|im_start|>`=1, `<|im_end|>`=2, `<tool_call>`=3,
`</tool_call>`=4; the learned vocabulary follows. `len(tokenizer) == spec.vocab_size` whenever
the sample is large enough to learn that many merges. eos is `<|im_end|>` (the end of an
assistant turn), pad is `<|endoftext|>`; there is no bos.
"""

from __future__ import annotations

import hashlib
import json
import random
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers.trainers import BpeTrainer
from tqdm import tqdm
from transformers import PreTrainedTokenizerFast

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

#: Control tokens, never produced by splitting text; skipped when decoding with
#: `skip_special_tokens=True`.
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END)
#: Tokens that must survive decoding (vLLM's hermes parser looks for them in the text).
TOOL_TOKENS: tuple[str, ...] = (TOOL_CALL_START, TOOL_CALL_END)

# Qwen2's pre-tokenizer split: contractions, letter runs with one leading non-letter, single
# digits, punctuation runs, newline runs, other whitespace.
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: ChatML with hermes-style tools, as in Qwen2.5: tools are listed in the system turn inside
#: <tools></tools>, assistant tool calls are `<tool_call>{"name", "arguments"}</tool_call>`,
#: consecutive `tool` messages become one user turn of <tool_response> blocks.
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages and messages[0].role == 'system' %}{{- (messages[0].content or '') + '\\n\\n' }}\
{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and \
arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, \
"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages and messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + (messages[0].content or '') + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'assistant' and message.tool_calls %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}\
{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}\
{%- endif %}
{{- '\\n<tool_response>\\n' + (message.content or '') + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}\
{%- endif %}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


class TokenizerSpec(BaseModel):
    """What to train: vocabulary size and how much local text to learn it from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(
        default=8192, ge=512, description="Total ids, special and tool tokens included."
    )
    sample_bytes: int = Field(
        default=4_000_000, ge=10_000, description="Upper bound on training text, in bytes."
    )
    max_bytes_per_file: int = Field(
        default=32_000, ge=1_000, description="Cap per source file, so the sample is varied."
    )
    min_frequency: int = Field(default=2, ge=1, description="Minimum pair count for a merge.")
    sample_seed: int = Field(default=0, description="Seed of the file order of the sample.")
    model_max_length: int = Field(default=4096, ge=16, description="Written to the config.")

    def fingerprint(self) -> str:
        """Hex digest of everything that shapes the trained files: this spec, the reserved
        tokens, the split pattern and the chat template. Changes when any of them does."""
        parts = (self.model_dump_json(), *SPECIAL_TOKENS, *TOOL_TOKENS, _SPLIT_PATTERN)
        return hashlib.sha256("\0".join((*parts, CHAT_TEMPLATE)).encode()).hexdigest()


#: Files of a saved tokenizer; they belong to a checkpoint's identity (see serving.build).
TOKENIZER_FILES: tuple[str, ...] = ("tokenizer.json", "tokenizer_config.json")


def stdlib_sources() -> list[Path]:
    """The standard library's `.py` files (site-packages excluded), in a stable sorted order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(
        path for path in root.rglob("*.py") if "site-packages" not in path.relative_to(root).parts
    )


def training_sample(spec: TokenizerSpec, files: list[Path] | None = None) -> list[str]:
    """A deterministic sample of source texts: files shuffled with `spec.sample_seed`, each cut
    to `max_bytes_per_file`, taken until `sample_bytes` is reached. Unreadable files are skipped.
    """
    order = list(stdlib_sources() if files is None else files)
    random.Random(spec.sample_seed).shuffle(order)
    texts: list[str] = []
    total = 0
    for path in order:
        if total >= spec.sample_bytes:
            break
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        chunk = raw[: min(spec.max_bytes_per_file, spec.sample_bytes - total)]
        texts.append(chunk.decode("utf-8", errors="ignore"))
        total += len(chunk)
    return texts


def _new_bpe() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_tokenizer(
    spec: TokenizerSpec, out_dir: Path, *, progress: bool = False
) -> PreTrainedTokenizerFast:
    """Train on `training_sample(spec)` and save a HF fast tokenizer into `out_dir`.

    With `progress`, the corpus read and the BPE merges show progress bars on stderr. Returns
    the tokenizer as loaded back from `out_dir`.
    """
    texts = training_sample(spec)
    tokenizer = _new_bpe()
    reserved = (*SPECIAL_TOKENS, *TOOL_TOKENS)
    trainer = BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=spec.min_frequency,
        special_tokens=list(reserved),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=progress,
    )
    corpus: Iterator[str] = iter(
        tqdm(texts, desc="tokenizer corpus", unit="file", disable=not progress)
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer, length=len(texts))
    # The trainer registers every reserved token as special; the tool tags must not be, or
    # `skip_special_tokens` would strip them before the tool parser sees them.
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])

    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        bos_token=None,
        unk_token=None,
        model_max_length=spec.model_max_length,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    save_tokenizer(fast, out_dir)
    return load_tokenizer(out_dir)


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: Path) -> None:
    """Save `tokenizer.json` + `tokenizer_config.json`, the chat template inline (not a separate
    .jinja file) and the class named `PreTrainedTokenizerFast` (transformers 5 writes its own
    `TokenizersBackend`, which transformers 4, e.g. an older vLLM on a GPU box, cannot load)."""
    tokenizer.save_pretrained(str(out_dir), save_jinja_files=False)
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def load_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved by `train_tokenizer` (or a checkpoint directory holding one)."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        raise TypeError(f"{path} holds a {type(tokenizer).__name__}, not a fast tokenizer")
    return tokenizer
