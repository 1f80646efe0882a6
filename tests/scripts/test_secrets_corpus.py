"""The secrets corpus is what its seeded generator makes, and the evaluation reads it as
docs/secrets.md says: one command, tables, then one JSON line."""

from __future__ import annotations

import json
import subprocess
import sys

from scripts.secrets_corpus import DEFAULT_DIR, corpora, render
from scripts.secrets_eval import ROOT, Result, evaluate


def test_the_committed_corpus_is_what_the_seed_makes() -> None:
    for name, items in corpora().items():
        assert (DEFAULT_DIR / name).read_text() == render(items), (
            f"{name} is stale: run .venv/bin/python scripts/secrets_corpus.py"
        )


def test_the_corpus_has_enough_of_each_kind() -> None:
    items = corpora()["corpus.jsonl"]
    secrets = [s["kind"] for item in items for s in item["secrets"]]
    lookalikes = [s["kind"] for item in items for s in item["lookalikes"]]
    assert len(secrets) >= 150 and len(set(secrets)) >= 20
    assert all(secrets.count(kind) >= 7 for kind in set(secrets))
    assert len(lookalikes) >= 500


def test_span_metrics_count_overlap_whole_coverage_and_false_positives() -> None:
    item = {
        "text": "key=ABCDEFGH sha=0123456789 note",
        "secrets": [{"start": 4, "end": 12, "kind": "k"}],
        "lookalikes": [{"start": 17, "end": 27, "kind": "sha"}],
    }
    # half the secret, the lookalike, and a word of unlabelled text
    result: Result = evaluate([item], lambda text: [(4, 8, "a"), (17, 20, "b"), (28, 32, "b")])
    assert (result.caught["k"], result.whole["k"]) == (1, 0)
    assert result.precision("a") == 1.0 and result.precision("b") == 0.0
    assert result.touched["sha"] == 1 and result.unlabelled_hits == 1


def test_the_evaluation_ends_with_one_json_line() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/secrets_eval.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(summary) == {"corpus", "holdout"}
    scrubber = summary["corpus"]["detectors"]["scrubber"]
    library = summary["corpus"]["detectors"]["detect-secrets"]
    assert scrubber["recall"] > library["recall"] and scrubber["precision"] > library["precision"]
