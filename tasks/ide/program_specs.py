"""Function templates for the program families (complete, fix, test), with inputs and bugs.

:data:`ONE_LINERS` are docstring -> one ``return`` line functions for ``complete_function``.
:data:`PROGRAMS` are 4-8 line functions for ``fix_assertion`` and ``write_test``; each lists
mutants ``(old, new, note)``: replacing the single occurrence of ``old`` in the rendered source by
``new`` gives a buggy version whose behaviour differs on some input, and ``note`` describes the
change (it becomes feedback when a written test misses it). Every template and mutant terminates
on every input its generator draws, so references are computed in-process. Placeholders:
``{fn}`` is the function name, the others come from ``consts``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Args = tuple[Any, ...]
_WORDS = ("alpha", "Beta", "gamma", "DELTA", "eps", "zeta", "Theta", "iota", "kappa", "lam")


def _k(rng: random.Random) -> dict[str, Any]:
    k = rng.randint(2, 9)
    return {"k": k, "k1": k + 1}


def _ints(low: int, high: int, min_len: int, max_len: int) -> Callable[[random.Random], Any]:
    return lambda rng: [rng.randint(low, high) for _ in range(rng.randint(min_len, max_len))]


def _text(alphabet: str, min_len: int, max_len: int) -> Callable[[random.Random], str]:
    return lambda rng: "".join(rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len)))


def _words(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))


@dataclass(frozen=True, slots=True)
class OneLiner:
    """``def <name>(<param>)`` with docstring ``doc`` returning ``body``; ``wrong`` is a
    plausible wrong return expression."""

    names: tuple[str, ...]
    param: str
    doc: str
    body: str
    wrong: str
    arg: Callable[[random.Random], Any]
    consts: Callable[[random.Random], dict[str, Any]] = _k


_SEPS = {"dash": "-", "underscore": "_", "comma": ", ", "slash": "/", "colon": ":"}


def _int_arg(rng: random.Random) -> int:
    return rng.randint(-20, 20)


ONE_LINERS: tuple[OneLiner, ...] = (
    OneLiner(("add_{k}", "plus_{k}"), "x", "Return x plus {k}.", "x + {k}", "x + {k1}", _int_arg),
    OneLiner(
        ("times_{k}", "multiply_by_{k}"), "x", "Return x multiplied by {k}.", "x * {k}",
        "x + {k}", _int_arg,
    ),
    OneLiner(
        ("minus_{k}", "subtract_{k}"), "x", "Return x minus {k}.", "x - {k}", "{k} - x",
        _int_arg,
    ),
    OneLiner(
        ("is_multiple_of_{k}", "divisible_by_{k}"), "n", "Return True if n is divisible by {k}.",
        "n % {k} == 0", "n % {k} == 1", lambda rng: rng.randint(0, 40),
    ),
    OneLiner(
        ("first_{k}", "head_{k}"), "seq", "Return the first {k} items of seq.", "seq[:{k}]",
        "seq[{k}:]", _ints(0, 9, 0, 12),
    ),
    OneLiner(
        ("last_{k}", "tail_{k}"), "seq", "Return the last {k} items of seq.", "seq[-{k}:]",
        "seq[:-{k}]", _ints(0, 9, 1, 12),
    ),
    OneLiner(
        ("repeat_{k}",), "s", "Return s repeated {k} times.", "s * {k}", "s * {k1}",
        _text("abcxyz", 1, 4),
    ),
    OneLiner(
        ("count_{c}", "count_letter_{c}"), "s", "Return how many times '{c}' occurs in s.",
        "s.count('{c}')", "len(s)", _text("abcde", 1, 9),
        lambda rng: {"c": rng.choice("abcde")},
    ),
    OneLiner(
        ("starts_with_{w}", "has_prefix_{w}"), "s", "Return True if s starts with '{w}'.",
        "s.startswith('{w}')", "s.endswith('{w}')", _text("ab", 1, 5),
        lambda rng: {"w": rng.choice(("a", "b", "ab", "ba"))},
    ),
    OneLiner(
        ("at_most_{k}", "cap_{k}"), "x", "Return the smaller of x and {k}.", "min(x, {k})",
        "max(x, {k})", _int_arg,
    ),
    OneLiner(
        ("join_with_{name}",), "words", "Return the words joined by '{sep}'.",
        "'{sep}'.join(words)", "' '.join(words)", lambda rng: _words(rng).split(),
        lambda rng: dict(zip(("name", "sep"), rng.choice(sorted(_SEPS.items())), strict=True)),
    ),
    OneLiner(
        ("total", "sum_all"), "nums", "Return the sum of nums.", "sum(nums)", "max(nums)",
        _ints(-9, 9, 1, 6),
    ),
    OneLiner(
        ("largest", "max_value"), "nums", "Return the largest number in nums.", "max(nums)",
        "min(nums)", _ints(-9, 9, 1, 6),
    ),
    OneLiner(("square",), "x", "Return x squared.", "x * x", "x * 2", _int_arg),
    OneLiner(
        ("is_empty",), "seq", "Return True if seq has no items.", "len(seq) == 0",
        "len(seq) == 1", _ints(0, 9, 0, 3),
    ),
    OneLiner(
        ("shout", "loud"), "s", "Return s stripped of surrounding spaces and upper-cased.",
        "s.strip().upper()", "s.upper()", lambda rng: " " * rng.randint(0, 2) + _words(rng) + " ",
    ),
    OneLiner(
        ("halve",), "x", "Return x divided by 2, rounded down.", "x // 2", "x / 2", _int_arg
    ),
    OneLiner(
        ("above_{k}", "greater_than_{k}"), "x", "Return True if x is greater than {k}.",
        "x > {k}", "x >= {k}", lambda rng: rng.randint(0, 12),
    ),
    OneLiner(
        ("reverse_text", "backwards"), "s", "Return s reversed.", "s[::-1]", "s[1:]",
        _text("abcdef", 1, 7),
    ),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Program:
    """A multi-line function template with argument generator and mutants."""

    key: str
    names: tuple[str, ...]
    source: str
    args: Callable[[random.Random, dict[str, Any]], Args]
    mutants: tuple[tuple[str, str, str], ...]
    consts: Callable[[random.Random], dict[str, Any]] = lambda rng: {}


PROGRAMS: tuple[Program, ...] = (
    Program(
        "count_chars",
        ("count_matching", "count_hits", "tally_letters"),
        'def {fn}(text):\n    count = 0\n    for ch in text.lower():\n        if ch in "{chars}":'
        "\n            count += 1\n    return count\n",
        lambda rng, c: (_text(c["chars"] + c["chars"].upper() + "xyz", 2, 10)(rng),),
        (
            ("text.lower()", "text", "the text is not lower-cased first"),
            ('ch in "', 'ch not in "', "the membership test is inverted"),
            ("count += 1", "count += 2", "each match is counted twice"),
            ("count = 0", "count = 1", "the count starts at 1"),
        ),
        lambda rng: {"chars": "".join(sorted(rng.sample("abcdefghmnoprst", 3)))},
    ),
    Program(
        "sum_multiples",
        ("sum_multiples", "total_of_multiples", "add_multiples"),
        "def {fn}(nums):\n    total = 0\n    for n in nums:\n        if n % {k} == 0:\n"
        "            total += n\n    return total\n",
        lambda rng, c: (_ints(-10, 30, 0, 7)(rng),),
        (
            ("== 0", "!= 0", "the divisibility test is inverted"),
            ("total += n", "total += 1", "matches are counted instead of summed"),
            ("for n in nums:", "for n in nums[1:]:", "the first number is skipped"),
            ("total = 0", "total = {k}", "the total does not start at 0"),
        ),
        lambda rng: {"k": rng.randint(2, 5)},
    ),
    Program(
        "first_above",
        ("first_above", "index_over", "find_first_greater"),
        "def {fn}(values, limit):\n    for i in range(len(values)):\n"
        "        if values[i] > limit:\n            return i\n    return -1\n",
        lambda rng, c: (_ints(0, 20, 0, 7)(rng), rng.randint(0, 20)),
        (
            ("values[i] > limit", "values[i] >= limit", "`>` became `>=`"),
            ("return -1", "return len(values)", "no match returns len(values) instead of -1"),
            ("range(len(values))", "range(1, len(values))", "index 0 is never checked"),
            ("return i\n", "return i + 1\n", "the index is off by one"),
        ),
    ),
    Program(
        "pairwise_diffs",
        ("pairwise_diffs", "deltas", "steps_between"),
        "def {fn}(nums):\n    out = []\n    for a, b in zip(nums, nums[1:]):\n"
        "        out.append(b - a)\n    return out\n",
        lambda rng, c: (_ints(-10, 20, 2, 7)(rng),),
        (
            ("b - a", "a - b", "the difference is taken the wrong way round"),
            ("nums[1:]", "nums[2:]", "pairs skip an element"),
            ("out.append(b - a)", "out.append(abs(b - a))", "differences lose their sign"),
        ),
    ),
    Program(
        "dedupe",
        ("dedupe", "unique_in_order", "drop_repeats"),
        "def {fn}(items):\n    seen = set()\n    out = []\n    for item in items:\n"
        "        if item not in seen:\n            seen.add(item)\n            out.append(item)\n"
        "    return out\n",
        lambda rng, c: (_ints(0, 5, 0, 8)(rng),),
        (
            ("            seen.add(item)\n", "", "items are never remembered as seen"),
            ("out.append(item)", "out.insert(0, item)", "the order is reversed"),
            ("for item in items:", "for item in sorted(items):", "the order is sorted"),
        ),
    ),
    Program(
        "run_lengths",
        ("run_lengths", "encode_runs", "group_runs"),
        "def {fn}(text):\n    out = []\n    for ch in text:\n"
        "        if out and out[-1][0] == ch:\n            out[-1][1] += 1\n        else:\n"
        "            out.append([ch, 1])\n    return out\n",
        lambda rng, c: (_text("aabbc", 0, 9)(rng),),
        (
            ("out[-1][1] += 1", "out[-1][1] = 2", "runs longer than 2 are capped at 2"),
            ("[ch, 1]", "[ch, 0]", "every run is one short"),
            ("out[-1][0] == ch", "out[0][0] == ch", "runs are compared with the first run"),
        ),
    ),
    Program(
        "digit_sum",
        ("digit_sum", "sum_digits", "add_digits"),
        "def {fn}(n):\n    n = abs(n)\n    total = 0\n    while n > 0:\n"
        "        total += n % 10\n        n //= 10\n    return total\n",
        lambda rng, c: (rng.randint(-999, 99999),),
        (
            ("n = abs(n)", "n = n", "negative numbers give 0"),
            ("total += n % 10", "total += n // 10", "the wrong part of n is added"),
            ("n //= 10", "n //= 100", "every other digit is skipped"),
        ),
    ),
    Program(
        "chunked",
        ("chunked", "split_into_chunks", "batches"),
        "def {fn}(items, size):\n    out = []\n    for start in range(0, len(items), size):\n"
        "        out.append(items[start:start + size])\n    return out\n",
        lambda rng, c: (_ints(0, 9, 0, 9)(rng), rng.randint(1, 4)),
        (
            ("items[start:start + size]", "items[start:start + size - 1]", "chunks are short"),
            ("len(items), size", "len(items) - 1, size", "the last item can be dropped"),
            ("range(0, ", "range(1, ", "the first item is skipped"),
        ),
    ),
    Program(
        "window_sums",
        ("window_sums", "moving_totals", "rolling_sum"),
        "def {fn}(nums, width):\n    sums = []\n    for i in range(len(nums) - width + 1):\n"
        "        sums.append(sum(nums[i:i + width]))\n    return sums\n",
        lambda rng, c: (_ints(0, 9, 3, 8)(rng), rng.randint(1, 3)),
        (
            ("len(nums) - width + 1", "len(nums) - width", "the last window is missing"),
            ("nums[i:i + width]", "nums[i:i + width - 1]", "windows are one short"),
            ("sum(nums", "max(nums", "windows are maxed instead of summed"),
        ),
    ),
    Program(
        "title_words",
        ("title_words", "capitalize_words", "headline"),
        "def {fn}(text):\n    words = text.split()\n"
        '    return "{sep}".join(w[:1].upper() + w[1:].lower() for w in words)\n',
        lambda rng, c: (_words(rng),),
        (
            ("w[1:].lower()", "w[1:]", "the rest of each word keeps its case"),
            ("w[:1].upper()", "w[:1]", "first letters are not upper-cased"),
            ("text.split()", "text.split()[1:]", "the first word is dropped"),
        ),
        lambda rng: {"sep": rng.choice((" ", "-", "_"))},
    ),
    Program(
        "clamp_all",
        ("clamp_all", "limit_values", "bound_each"),
        "def {fn}(values, low, high):\n    out = []\n    for v in values:\n        if v < low:\n"
        "            v = low\n        elif v > high:\n            v = high\n        out.append(v)\n"
        "    return out\n",
        lambda rng, c: (_ints(-5, 15, 3, 7)(rng), rng.randint(0, 3), rng.randint(6, 10)),
        (
            ("v = high", "v = high - 1", "large values end one below high"),
            ("v = low\n", "v = low + 1\n", "small values end one above low"),
            ("elif v > high:", "elif v > high + 1:", "high + 1 is not clamped"),
        ),
    ),
    Program(
        "longest_word",
        ("longest_word", "widest_token", "pick_longest"),
        'def {fn}(text):\n    best = ""\n    for word in text.split():\n'
        "        if len(word) > len(best):\n            best = word\n    return best\n",
        lambda rng, c: (_words(rng) + " " + _words(rng),),
        (
            ("len(word) > len(best)", "len(word) >= len(best)", "ties keep the last word"),
            ("best = word", "best = word.lower()", "the word is lower-cased"),
            ("text.split()", "text.split()[:-1]", "the last word is ignored"),
        ),
    ),
)
