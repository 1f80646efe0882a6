"""Small Python repositories for agent tasks, generated deterministically from a seed.

Every repository has the same shape, as a small project of a real user would::

    README.md
    <pkg>/__init__.py
    <pkg>/<numbers>.py     four numeric helpers (one reads a list and returns a number)
    <pkg>/<text>.py        four text helpers (one maps a string to a string)
    <pkg>/<report>.py      two functions built on one helper of each module (imported by name)
    tests/test_<numbers>.py, tests/test_<text>.py, tests/test_<report>.py

The helpers come from :data:`NUMERIC` and :data:`TEXT`: small pure functions with a few
alternative names and the calls their tests make. Test expectations are computed by running the
reference source (trusted, generated here), so a generated repository's tests always pass before a
task breaks it. The two helpers ``report`` imports are tested through ``report`` only (their own
module's tests leave them out), so renaming one touches exactly two files. Names, module names
and which helpers appear are drawn from one ``random.Random(seed)``: the same seed gives the same
files.

Every name has a split. The train split's repositories (:func:`tasks.ide.task.split_of`)
draw helper, package, module and report-function names from :data:`TRAIN_NAMES` and each
helper's ``names``; the held-out split's from :data:`HELDOUT_NAMES` and each helper's
``heldout_names``, which no train-split repository contains. A held-out task therefore asks about
symbols and paths training never showed: solving it takes reading, not recall.

Most train-split names are not from the pools at all: a train repository names its package,
its modules and most helpers with compounds of :data:`TRAIN_WORDS` (``cedar_quill``), drawn
fresh per repository. With the pools' 18 helper names alone, the tiny model learned the names
rather than to copy them from the request and the tool result, and solved no held-out task
whose names it had not seen (docs/agent_learnability.md). Real repositories are like the
compounds: their identifiers are whatever their authors chose.
"""

from __future__ import annotations

import keyword
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tasks.ide.task import Split, split_of

Role = Literal["list_to_number", "str_to_str", "other"]


@dataclass(frozen=True, slots=True)
class Helper:
    """One catalogue function: alternative names, signature, body and the calls its test makes.

    ``names`` are the train split's names, ``heldout_names`` the held-out split's (disjoint).
    ``body`` is the function's indented body; ``calls`` are argument lists as Python source.
    ``role`` says whether ``report`` can build on it (a list -> number or a str -> str helper).
    """

    names: tuple[str, ...]
    heldout_names: tuple[str, ...]
    params: str
    doc: str
    body: str
    calls: tuple[str, ...]
    role: Role = "other"

    def names_in(self, split: Split) -> tuple[str, ...]:
        """The names this helper may have in a repository of ``split``."""
        return self.names if split == "train" else self.heldout_names


NUMERIC: tuple[Helper, ...] = (
    Helper(("clamp", "bound", "limit_to"),
           ("constrain", "clip_value", "keep_within"),
           "value, low, high",
           "Return value kept within [low, high].",
           "    return max(low, min(value, high))",
           ("5, 0, 10", "-3, 0, 10", "12, 0, 10")),
    Helper(("mean", "average", "arithmetic_mean"),
           ("avg", "avg_of", "expected_value"),
           "values",
           "Return the arithmetic mean of values.",
           "    return sum(values) / len(values)",
           ("[1, 2, 3, 4]", "[10]", "[2, 7]"), "list_to_number"),
    Helper(("span", "value_range", "spread"),
           ("extent", "max_minus_min", "range_width"),
           "values",
           "Return the difference between the largest and smallest value.",
           "    return max(values) - min(values)",
           ("[3, 9, 4]", "[5]", "[-2, 8, 1]"), "list_to_number"),
    Helper(("count_positive", "positives", "num_positive"),
           ("positive_count", "n_positive", "count_above_zero"),
           "values",
           "Return how many values are greater than zero.",
           "    return sum(1 for v in values if v > 0)",
           ("[1, -2, 3, 0]", "[-1, -5]", "[4, 4, 4]"), "list_to_number"),
    Helper(("running_total", "cumulative", "prefix_sums"),
           ("accumulate", "partial_sums", "cumsum"),
           "values",
           "Return the running totals of values.",
           "    total = 0\n    out = []\n    for v in values:\n        total += v\n"
           "        out.append(total)\n    return out",
           ("[1, 2, 3]", "[]", "[5, -5, 5]")),
    Helper(("percent", "percentage", "share_of"),
           ("pct", "pct_of", "ratio_pct"),
           "part, whole",
           "Return part as a percentage of whole, rounded to one decimal.",
           "    return round(100 * part / whole, 1)",
           ("1, 4", "2, 3", "5, 5")),
    Helper(("is_even", "even", "divisible_by_two"),
           ("is_multiple_of_two", "parity_zero", "divides_by_2"),
           "n",
           "Return whether n is even.",
           "    return n % 2 == 0",
           ("4", "7", "0")),
    Helper(("last_index", "rindex_of", "find_last"),
           ("rfind_value", "last_position", "index_of_last"),
           "values, target",
           "Return the index of the last occurrence of target, or -1.",
           "    for i in range(len(values) - 1, -1, -1):\n        if values[i] == target:\n"
           "            return i\n    return -1",
           ("[1, 2, 1, 3], 1", "[4, 5], 9", "[7], 7")),
    Helper(("digit_sum", "sum_of_digits", "digits_total"),
           ("add_digits", "digit_total", "cross_sum"),
           "n",
           "Return the sum of the decimal digits of n.",
           "    return sum(int(d) for d in str(abs(n)))",
           ("123", "-45", "0")),
)  # fmt: skip

TEXT: tuple[Helper, ...] = (
    Helper(("initials", "name_initials", "monogram"),
           ("acronym_of", "first_letters", "name_abbrev"),
           "name",
           "Return the upper-case initials of a name.",
           '    return "".join(part[0].upper() for part in name.split())',
           ('"ada lovelace"', '"Grace Brewster Hopper"', '"alan"'), "str_to_str"),
    Helper(("count_vowels", "vowel_count", "vowels_in"),
           ("vowel_total", "num_vowels", "tally_vowels"),
           "text",
           "Return how many vowels text contains.",
           '    return sum(1 for ch in text.lower() if ch in "aeiou")',
           ('"Hello World"', '"rhythm"', '"AEIOU"')),
    Helper(("is_palindrome", "palindromic", "reads_same_backwards"),
           ("palindrome_check", "is_mirror_text", "symmetric_text"),
           "text",
           "Return whether text reads the same backwards, ignoring case and spaces.",
           '    cleaned = text.lower().replace(" ", "")\n    return cleaned == cleaned[::-1]',
           ('"Never odd or even"', '"python"', '"a"')),
    Helper(("slugify", "to_slug", "slug"),
           ("kebab_case", "dasherize", "hyphenate"),
           "text",
           "Return text in lower case with words joined by dashes.",
           '    return "-".join(text.lower().split())',
           ('"Hello World"', '"  Many   spaces here "', '"one"'), "str_to_str"),
    Helper(("truncate", "shorten", "clip_text"),
           ("ellipsize", "cut_text", "abbreviate"),
           "text, width",
           "Return text cut to width characters, ending in '...' when cut.",
           '    if len(text) <= width:\n        return text\n    return text[: width - 3] + "..."',
           ('"short", 10', '"a long sentence here", 10', '"exactly", 7')),
    Helper(("title_words", "capitalize_words", "title_case"),
           ("titlecase", "capitalise_all", "headline_case"),
           "text",
           "Return text with every word capitalized.",
           '    return " ".join(word.capitalize() for word in text.split())',
           ('"hello big world"', '"ALREADY up"', '""'), "str_to_str"),
    Helper(("pad_left", "left_pad", "align_right"),
           ("lpad", "fill_left", "right_justify"),
           "text, width, fill",
           "Return text padded on the left with fill up to width characters.",
           "    return fill * (width - len(text)) + text",
           ('"7", 3, "0"', '"abc", 2, "*"', '"x", 4, "."')),
    Helper(("longest_word", "max_word", "widest_word"),
           ("biggest_word", "longest_token", "max_len_word"),
           "text",
           "Return the longest word of text (the first one on ties).",
           "    return max(text.split(), key=len)",
           ('"a quick brown fox"', '"tie tie"', '"single"')),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class NamePools:
    """The package, module and report-function names of one split's repositories."""

    packages: tuple[str, ...]
    numeric_modules: tuple[str, ...]
    text_modules: tuple[str, ...]
    report_modules: tuple[str, ...]
    describe: tuple[str, ...]
    tabulate: tuple[str, ...]


TRAIN_NAMES = NamePools(
    packages=("acme", "corelib", "kit", "toolbox", "shop"),
    numeric_modules=("mathutil", "numbers_ops", "calc", "arith"),
    text_modules=("textutil", "strings", "text_ops", "wordtools"),
    report_modules=("report", "summary", "render", "formatting"),
    describe=("describe", "summarize_values", "figure_line"),
    tabulate=("tabulate", "report_lines", "all_lines"),
)
HELDOUT_NAMES = NamePools(
    packages=("ledger", "orchard", "harbor", "beacon", "quarry"),
    numeric_modules=("numeric", "mathops", "figures", "numutil"),
    text_modules=("textops", "wording", "strutil", "phrasing"),
    report_modules=("digest", "overview", "briefing", "presenter"),
    describe=("label_line", "format_entry", "entry_text"),
    tabulate=("rows_as_lines", "table_lines", "format_all"),
)
HELPERS_PER_MODULE = 4
# Words a train repository's generated names are made of. None is part of a held-out name
# (tests/tasks/agent/test_tasks.py checks the names made of them); a name that would be a
# keyword or shadow a standard library module (a package called ``trace``) is drawn again.
TRAIN_WORDS: tuple[str, ...] = (
    "amber", "birch", "cedar", "delta", "ember", "falcon", "garnet", "hazel", "indigo",
    "jasper", "kestrel", "lumen", "maple", "nimbus", "onyx", "pebble", "quill", "raven",
    "sable", "tundra", "umber", "violet", "willow", "yarrow", "zephyr", "atlas", "bramble",
    "cobalt", "dune", "fjord", "glacier", "heron", "juniper", "lotus", "meadow", "nectar",
    "opal", "prism", "quartz", "ridge", "summit", "thistle", "vortex", "wren", "basil",
    "clover", "dahlia", "fern", "ginger", "hollow", "lark", "marsh", "nova", "pine", "rune",
    "spruce", "topaz", "vale", "aspen", "coral", "flint", "grove", "iron", "jade", "koala",
    "lemur", "mango", "otter", "panda", "robin", "tiger", "walrus", "bison", "crane",
    "dingo", "egret", "finch", "gecko", "ibis", "lynx", "moose", "newt", "orca", "puffin",
    "quail", "stork", "toucan", "viper", "yak", "zebra", "scan", "merge", "pick", "fold",
    "weave", "sift", "stack", "trace", "blend", "carve", "forge", "mint", "press", "spin",
)  # fmt: skip
# The share of a train repository's helpers (and its package and modules) named by compound.
GENERATED_NAME_SHARE = 0.75
_REPORT_ROWS = '[("weekly sales", [3, 5, 4]), ("Team Size", [8, 2])]'


@dataclass(frozen=True, slots=True)
class PlacedHelper:
    """A catalogue helper as it appears in one repository: its name and module."""

    helper: Helper
    name: str
    module: str  # path, e.g. "acme/mathutil.py"

    def source(self) -> str:
        return f'def {self.name}({self.helper.params}):\n    """{self.helper.doc}"""\n' + (
            self.helper.body
        )


@dataclass(frozen=True, slots=True)
class Repo:
    """A generated repository: its files and what the tasks need to know about them."""

    seed: int
    package: str
    numeric_module: str
    text_module: str
    report_module: str
    helpers: tuple[PlacedHelper, ...]
    report_numeric: PlacedHelper  # the numeric helper report imports
    report_text: PlacedHelper  # the text helper report imports
    describe: str
    tabulate: str
    files: Mapping[str, str]

    @property
    def split(self) -> Split:
        return split_of(self.seed)

    def helper(self, name: str) -> PlacedHelper:
        return next(h for h in self.helpers if h.name == name)

    def directly_tested(self) -> tuple[PlacedHelper, ...]:
        """Helpers their own module's test file calls (not the two report builds on)."""
        imported = (self.report_numeric.name, self.report_text.name)
        return tuple(h for h in self.helpers if h.name not in imported)

    def test_path(self, module: str) -> str:
        return f"tests/test_{module.rsplit('/', 1)[-1]}"


class _Namer:
    """One repository's names: a pool's, or (train split, :data:`GENERATED_NAME_SHARE` of the
    time) a compound of :data:`TRAIN_WORDS`; never one the repository already uses."""

    def __init__(self, rng: random.Random, split: Split) -> None:
        self._rng, self._split, self._taken = rng, split, set[str]()

    def pick(self, pool: tuple[str, ...], words: int = 2) -> str:
        while True:
            if self._split == "train" and self._rng.random() < GENERATED_NAME_SHARE:
                name = "_".join(self._rng.sample(TRAIN_WORDS, words))
            else:
                name = self._rng.choice(pool)
            if name not in self._taken and _definable(name):
                self._taken.add(name)
                return name


def _definable(name: str) -> bool:
    """Whether ``name`` can name a function, module or package without shadowing Python's."""
    return not keyword.iskeyword(name) and name not in sys.stdlib_module_names


def _pick(rng: random.Random, pool: tuple[Helper, ...], role: Role) -> tuple[list[Helper], Helper]:
    """``HELPERS_PER_MODULE`` helpers of ``pool``, one of them of ``role`` (report's)."""
    for_report = rng.choice([h for h in pool if h.role == role])
    rest = rng.sample([h for h in pool if h is not for_report], HELPERS_PER_MODULE - 1)
    chosen = [for_report, *rest]
    rng.shuffle(chosen)
    return chosen, for_report


def _module_source(doc: str, helpers: list[PlacedHelper]) -> str:
    return f'"""{doc}"""\n\n\n' + "\n\n\n".join(h.source() for h in helpers) + "\n"


def _evaluate(source: str, call: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<generated>", "exec"), namespace)  # our own generated source
    return eval(call, namespace)


def _test_source(import_line: str, cases: list[tuple[str, list[tuple[str, Any]]]]) -> str:
    parts = [import_line]
    for test_name, checks in cases:
        lines = [f"def test_{test_name}():"]
        lines.extend(f"    assert {call} == {want!r}" for call, want in checks)
        parts.append("\n".join(lines))
    return "\n\n\n".join(parts) + "\n"


def report_source(
    numeric: PlacedHelper, text: PlacedHelper, names: tuple[str, str], module_paths: tuple[str, str]
) -> str:
    """The report module's source: imports one helper of each module and builds two lines."""
    describe, tabulate = names
    num_mod, txt_mod = (p.removesuffix(".py").replace("/", ".") for p in module_paths)
    return (
        '"""Lines of the weekly report."""\n\n'
        f"from {num_mod} import {numeric.name}\n"
        f"from {txt_mod} import {text.name}\n\n\n"
        f"def {describe}(label, values):\n"
        '    """The label and the figure of its values, on one line."""\n'
        f"    figure = {numeric.name}(values)\n"
        f'    return f"{{{text.name}(label)}}: {{figure}}"\n\n\n'
        f"def {tabulate}(rows):\n"
        '    """One line per (label, values) pair."""\n'
        f"    return [{describe}(label, values) for label, values in rows]\n"
    )


def generate_repo(seed: int) -> Repo:
    """The repository of ``seed`` (see the module docstring)."""
    split = split_of(seed)
    pools = TRAIN_NAMES if split == "train" else HELDOUT_NAMES
    rng = random.Random(f"agent-repo:{seed}")
    names = _Namer(rng, split)
    package = names.pick(pools.packages, words=1)
    num_name = names.pick(pools.numeric_modules, words=1)
    txt_name = names.pick(pools.text_modules, words=1)
    rep_name = names.pick(pools.report_modules, words=1)
    num_path, txt_path = f"{package}/{num_name}.py", f"{package}/{txt_name}.py"
    rep_path = f"{package}/{rep_name}.py"
    numeric, num_report = _pick(rng, NUMERIC, "list_to_number")
    text, txt_report = _pick(rng, TEXT, "str_to_str")
    placed_num = [PlacedHelper(h, names.pick(h.names_in(split)), num_path) for h in numeric]
    placed_txt = [PlacedHelper(h, names.pick(h.names_in(split)), txt_path) for h in text]
    report_numeric = next(p for p in placed_num if p.helper is num_report)
    report_text = next(p for p in placed_txt if p.helper is txt_report)
    describe, tabulate = rng.choice(pools.describe), rng.choice(pools.tabulate)
    files: dict[str, str] = {
        "README.md": f"# {package}\n\nSmall helpers for numbers, text and the weekly report.\n"
        "Run the tests with `pytest`.\n",
        f"{package}/__init__.py": f'"""The {package} package."""\n',
        num_path: _module_source("Numeric helpers.", placed_num),
        txt_path: _module_source("Text helpers.", placed_txt),
        rep_path: report_source(
            report_numeric, report_text, (describe, tabulate), (num_path, txt_path)
        ),
    }
    repo = Repo(
        seed=seed,
        package=package,
        numeric_module=num_path,
        text_module=txt_path,
        report_module=rep_path,
        helpers=(*placed_num, *placed_txt),
        report_numeric=report_numeric,
        report_text=report_text,
        describe=describe,
        tabulate=tabulate,
        files=files,
    )
    for path, placed in ((num_path, placed_num), (txt_path, placed_txt)):
        tested = [h for h in placed if h in repo.directly_tested()]
        files[repo.test_path(path)] = module_tests(repo, path, tested, files[path])
    files[repo.test_path(rep_path)] = report_tests(repo, files)
    return repo


def module_tests(repo: Repo, path: str, tested: list[PlacedHelper], source: str) -> str:
    """The test file of one helper module, expectations computed from ``source``."""
    module = path.removesuffix(".py").replace("/", ".")
    names = ", ".join(h.name for h in tested)
    cases = [
        (h.name, [(f"{h.name}({c})", _evaluate(source, f"{h.name}({c})")) for c in h.helper.calls])
        for h in tested
    ]
    return _test_source(f"from {module} import {names}", cases)


def report_tests(repo: Repo, files: Mapping[str, str]) -> str:
    """The report module's tests: both functions, expectations computed from the sources."""
    combined = "\n".join(
        files[p].replace(f"from {repo.package}.", "# from ")
        for p in (repo.numeric_module, repo.text_module, repo.report_module)
    )
    module = repo.report_module.removesuffix(".py").replace("/", ".")
    describe_calls = ['"monthly total", [4, 6]', '"Open Issues", [1, 2, 3]']
    cases = [
        (repo.describe, [(f"{repo.describe}({c})", _evaluate(combined, f"{repo.describe}({c})"))
                         for c in describe_calls]),
        (repo.tabulate, [(f"{repo.tabulate}({_REPORT_ROWS})",
                          _evaluate(combined, f"{repo.tabulate}({_REPORT_ROWS})"))]),
    ]  # fmt: skip
    return _test_source(f"from {module} import {repo.describe}, {repo.tabulate}", cases)
