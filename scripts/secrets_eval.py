"""Secret and PII detectors measured on the labelled corpus (tests/data/secrets_corpus).

Span-level, per kind:

    recall     a labelled secret counts as caught when a detection overlaps it; ``whole``
               counts those whose every character some detection covers (a redaction that
               leaves part of the value, such as a key's body under its BEGIN line, leaks)
    precision  per kind the detector named: detections that overlap a labelled secret over
               all its detections; a detection overlapping only a lookalike or unlabelled
               text is a false positive
    lookalikes labelled spans that must survive (hashes, ids, fixtures, placeholders): how
               many some detection touched

Detectors: ``scrubber`` (traffic.scrub: the one every training-data path uses), ``rules``
(its hand-written half alone), ``detect-secrets`` (the library as its users run it: a file
scan with default settings, every plugin and filter, the snippet saved as ``prompt.yaml``;
each reported value located on its line) and, with ``--pii-rev``, the original
traffic/export/pii.py read from that git revision. ``--plugins`` adds each detect-secrets
plugin alone, as the scrubber calls it. ``--holdout2`` adds the second held-out set
(scripts/secrets_holdout2.py, generated in memory), ``--holdout3`` the third
(scripts/secrets_holdout3.py, written blind to the rules), ``--holdout4`` the fourth (written
blind to the rules extended after the third was measured). Prints tables, then one JSON line.

    .venv/bin/python scripts/secrets_eval.py --pii-rev 0ccdcc8 --plugins
    .venv/bin/python scripts/secrets_eval.py --corpus --holdout2   # the second held-out set alone
    .venv/bin/python scripts/secrets_eval.py --corpus --holdout3   # the third held-out set alone
    .venv/bin/python scripts/secrets_eval.py --corpus --holdout4   # the fourth held-out set alone
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests/data/secrets_corpus/corpus.jsonl"
HOLDOUT = ROOT / "tests/data/secrets_corpus/holdout.jsonl"

Span = tuple[int, int, str]  # start, end, the kind the detector named
Detector = Callable[[str], list[Span]]


def load_corpus(path: Path = CORPUS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@dataclass
class Result:
    """What one detector did on the corpus."""

    labelled: Counter[str] = field(default_factory=Counter)  # gold kind -> secrets
    caught: Counter[str] = field(default_factory=Counter)  # gold kind -> overlapped
    whole: Counter[str] = field(default_factory=Counter)  # gold kind -> fully covered
    named: Counter[str] = field(default_factory=Counter)  # detected kind -> detections
    right: Counter[str] = field(default_factory=Counter)  # detected kind -> on a secret
    lookalikes: Counter[str] = field(default_factory=Counter)  # lookalike kind -> labelled
    touched: Counter[str] = field(default_factory=Counter)  # lookalike kind -> detected
    unlabelled_hits: int = 0
    seconds: float = 0.0

    def recall(self, kind: str | None = None) -> float:
        if kind is None:
            return _ratio(sum(self.caught.values()), sum(self.labelled.values()))
        return _ratio(self.caught[kind], self.labelled[kind])

    def precision(self, kind: str | None = None) -> float:
        if kind is None:
            return _ratio(sum(self.right.values()), sum(self.named.values()))
        return _ratio(self.right[kind], self.named[kind])

    def summary(self) -> dict[str, Any]:
        return {
            "recall": round(self.recall(), 3),
            "whole": round(_ratio(sum(self.whole.values()), sum(self.labelled.values())), 3),
            "precision": round(self.precision(), 3),
            "detections": sum(self.named.values()),
            "lookalikes_touched": sum(self.touched.values()),
            "lookalikes": sum(self.lookalikes.values()),
            "unlabelled_hits": self.unlabelled_hits,
            "seconds": round(self.seconds, 3),
        }


def _ratio(a: int, b: int) -> float:
    return a / b if b else 1.0


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def evaluate(items: Iterable[dict[str, Any]], detect: Detector) -> Result:
    result = Result()
    for item in items:
        text = item["text"]
        started = time.perf_counter()
        spans = detect(text)
        result.seconds += time.perf_counter() - started
        secrets = [(s["start"], s["end"]) for s in item["secrets"]]
        lookalikes = [(s["start"], s["end"]) for s in item["lookalikes"]]
        for s in item["secrets"]:
            kind, span = s["kind"], (s["start"], s["end"])
            result.labelled[kind] += 1
            hits = [d for d in spans if _overlap(span, d[:2])]
            if hits:
                result.caught[kind] += 1
                covered = {i for a, b, _ in hits for i in range(max(a, span[0]), min(b, span[1]))}
                result.whole[kind] += len(covered) == span[1] - span[0]
        for s in item["lookalikes"]:
            result.lookalikes[s["kind"]] += 1
            result.touched[s["kind"]] += any(_overlap((s["start"], s["end"]), d[:2]) for d in spans)
        for start, end, kind in spans:
            result.named[kind] += 1
            if any(_overlap((start, end), s) for s in secrets):
                result.right[kind] += 1
            elif not any(_overlap((start, end), s) for s in lookalikes):
                result.unlabelled_hits += 1
    return result


# ---------------------------------------------------------------- detectors


def scrubber_detector() -> Detector:
    from traffic.scrub.scrubber import detect

    return lambda text: [(d.start, d.end, d.kind) for d in detect(text)]


def rules_detector() -> Detector:
    from traffic.scrub.rules import detect

    return lambda text: [(d.start, d.end, d.kind) for d in detect(text)]


def plugin_detector(name: str) -> Detector:
    from traffic.scrub import plugins

    return lambda text: [(d.start, d.end, d.kind) for d in plugins.detect(text, [name])]


def detect_secrets_detector(filename: str = "prompt.yaml") -> Detector:
    """detect-secrets as a user runs it: ``SecretsCollection.scan_file`` with the default
    settings; each reported value is located on its line (every occurrence)."""
    from detect_secrets.core.secrets_collection import SecretsCollection
    from detect_secrets.settings import default_settings

    folder = Path(tempfile.mkdtemp(prefix="secrets-eval-"))
    path = folder / filename

    def detect(text: str) -> list[Span]:
        path.write_text(text)
        with default_settings():
            collection = SecretsCollection()
            collection.scan_file(str(path))
        # detect-secrets reads the file with universal newlines: "\r" ends a line too
        breaks = list(re.finditer(r"\r\n|\r|\n", text))
        starts = [0, *(b.end() for b in breaks)]
        ends = [*(b.start() for b in breaks), len(text)]
        lines = [text[a:b] for a, b in zip(starts, ends, strict=True)]
        spans: list[Span] = []
        for _, secret in collection:
            value, row = secret.secret_value, secret.line_number - 1
            if not value:
                continue
            if row >= len(lines):  # its YAML transformer can number past the end: the text
                row, lines_, base = 0, [text], [0]
            else:
                lines_, base = lines, starts
            for m in re.finditer(re.escape(value), lines_[row]):
                spans.append((base[row] + m.start(), base[row] + m.end(), secret.type))
        return spans

    return detect


def original_pii_detector(rev: str) -> Detector | None:
    """traffic/export/pii.py as of git ``rev``, its replacements mapped back to spans (its
    placeholders swapped for a character the corpus never holds, then the texts aligned)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{rev}:traffic/export/pii.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    spec = importlib.util.spec_from_loader(f"pii_at_{rev}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    exec(compile(source, f"pii.py@{rev}", "exec"), module.__dict__)
    mark = "\ue000"
    module.__dict__["PLACEHOLDERS"] = dict.fromkeys(module.__dict__["PLACEHOLDERS"], mark)

    def detect(text: str) -> list[Span]:
        out, _ = module.scrub_text(text)
        matcher = difflib.SequenceMatcher(None, text, out, autojunk=False)
        return [
            (i1, i2, "pii.py")
            for op, i1, i2, j1, j2 in matcher.get_opcodes()
            if op in ("replace", "delete") and i2 > i1
        ]

    return detect


# ---------------------------------------------------------------- report


def _cell(result: Result, kind: str) -> str:
    n = result.labelled[kind]
    return f"{result.caught[kind]:>3}/{n:<3} ({result.whole[kind]:>3})"


def print_report(results: dict[str, Result], items: list[dict[str, Any]]) -> None:
    names = list(results)
    kinds = sorted({s["kind"] for item in items for s in item["secrets"]})
    width = max(len(n) for n in names) + 2
    print("Recall per labelled kind: caught/labelled (wholly covered)")
    print(f"{'kind':<20}" + "".join(f"{n:>{max(width, 16)}}" for n in names))
    for kind in kinds:
        row = "".join(f"{_cell(results[n], kind):>{max(width, 16)}}" for n in names)
        print(f"{kind:<20}{row}")
    print()
    print("Totals")
    for name, result in results.items():
        s = result.summary()
        print(
            f"  {name:<{width}} recall {s['recall']:.3f}  whole {s['whole']:.3f}  "
            f"precision {s['precision']:.3f} ({s['detections']} detections)  lookalikes "
            f"touched {s['lookalikes_touched']}/{s['lookalikes']}  unlabelled hits "
            f"{s['unlabelled_hits']}  {s['seconds']:.2f}s"
        )
    print()
    print("Lookalikes touched, per kind")
    look = sorted({s["kind"] for item in items for s in item["lookalikes"]})
    print(f"{'kind':<20}" + "".join(f"{n:>{max(width, 16)}}" for n in names))
    for kind in look:
        cells = "".join(
            f"{f'{r.touched[kind]}/{r.lookalikes[kind]}':>{max(width, 16)}}"
            for r in results.values()
        )
        print(f"{kind:<20}{cells}")
    for name, result in results.items():
        print()
        print(f"Precision per detected kind: {name}")
        for kind in sorted(result.named):
            print(
                f"  {kind:<34} {result.right[kind]:>4}/{result.named[kind]:<4} "
                f"{result.precision(kind):.3f}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, nargs="*", default=[CORPUS, HOLDOUT])
    parser.add_argument(
        "--holdout2", action="store_true", help="also the second held-out set (generated)"
    )
    parser.add_argument(
        "--holdout3", action="store_true", help="also the third held-out set (generated)"
    )
    parser.add_argument(
        "--holdout4", action="store_true", help="also the fourth held-out set (generated)"
    )
    parser.add_argument("--pii-rev", help="also measure traffic/export/pii.py at this git rev")
    parser.add_argument("--plugins", action="store_true", help="each library plugin alone")
    args = parser.parse_args()
    detectors: dict[str, Detector] = {}
    if args.pii_rev:
        original = original_pii_detector(args.pii_rev)
        if original is None:
            print(f"(no traffic/export/pii.py at {args.pii_rev}: row skipped)", file=sys.stderr)
        else:
            detectors[f"pii.py@{args.pii_rev}"] = original
    detectors["detect-secrets"] = detect_secrets_detector()
    detectors["rules"] = rules_detector()
    detectors["scrubber"] = scrubber_detector()
    if args.plugins:
        from traffic.scrub.plugins import PLUGIN_RULES

        detectors |= {f"plugin:{name}": plugin_detector(name) for name in PLUGIN_RULES}
    sets = {
        str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path): (
            path.stem,
            load_corpus(path),
        )
        for path in args.corpus
    }
    if args.holdout2:
        sys.path.insert(0, str(ROOT / "scripts"))
        from secrets_holdout2 import holdout2_items

        sets["scripts/secrets_holdout2.py (generated)"] = ("holdout2", holdout2_items())
    if args.holdout3:
        sys.path.insert(0, str(ROOT / "scripts"))
        from secrets_holdout3 import holdout3_items

        sets["scripts/secrets_holdout3.py (generated)"] = ("holdout3", holdout3_items())
    if args.holdout4:
        sys.path.insert(0, str(ROOT / "scripts"))
        from secrets_holdout4 import holdout4_items

        sets["scripts/secrets_holdout4.py (generated)"] = ("holdout4", holdout4_items())
    summary: dict[str, Any] = {}
    for title, (stem, items) in sets.items():
        results = {name: evaluate(items, detect) for name, detect in detectors.items()}
        print(f"==== {title}")
        print_report({n: r for n, r in results.items() if not n.startswith("plugin:")}, items)
        if args.plugins:
            print()
            print("Each library plugin alone: detections on a secret / all, kinds it caught")
            for name, r in results.items():
                if name.startswith("plugin:"):
                    caught = ", ".join(f"{k} {r.caught[k]}" for k in sorted(r.caught))
                    right, named = sum(r.right.values()), sum(r.named.values())
                    print(f"  {name:<24} {right:>4}/{named:<4} {caught}")
        print()
        scrubbed = results["scrubber"]
        summary[stem] = {
            "snippets": len(items),
            "secrets": sum(scrubbed.labelled.values()),
            "lookalikes": sum(scrubbed.lookalikes.values()),
            "detectors": {n: r.summary() for n, r in results.items()},
            "scrubber_recall": {k: round(scrubbed.recall(k), 3) for k in sorted(scrubbed.labelled)},
            "scrubber_precision": {
                k: round(scrubbed.precision(k), 3) for k in sorted(scrubbed.named)
            },
        }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
