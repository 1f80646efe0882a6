"""Writes the labelled secrets corpus, deterministically: tests/data/secrets_corpus/corpus.jsonl.

Each line is one snippet as a coding assistant receives it (a ``.env`` file, settings, shell
history, logs, lock files, a pasted key, a support ticket) with the exact character spans of
what must go and of what must stay:

    {"id": "env_file-003", "source": "env_file", "text": "...",
     "secrets":    [{"start": 120, "end": 171, "kind": "openai_key"}, ...],
     "lookalikes": [{"start": 240, "end": 280, "kind": "git_sha"}, ...]}

``secrets`` spans cover the secret value only (not the variable name, quotes or ``Bearer``);
a PEM key's span is the whole block; a password in a URL is the password alone. ``lookalikes``
are spans a scrubber must keep (hashes, ids, fixtures, versions, placeholders). Text outside
both is unlabelled, and a detection there is a false positive too.

The parts: `secrets_fakes` (the snippet and the value maker), `secrets_templates` and
`secrets_templates_more` (the tuning templates, drawn in that order), `secrets_holdout`.
Every value is random (seeded) and fake; nothing is a real credential. ``--check`` regenerates
the corpus in memory and fails if the committed file differs.

    .venv/bin/python scripts/secrets_corpus.py            # rewrite the file
    .venv/bin/python scripts/secrets_corpus.py --check    # the file is what the seed makes
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "tests/data/secrets_corpus"
SEED = 47
ROUNDS = 7  # each template is drawn this many times, with fresh values
HOLDOUT_SEED = 4747
HOLDOUT_ROUNDS = 5

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported

from secrets_fakes import Fake, Snippet, Template  # noqa: E402
from secrets_holdout import HOLDOUT_TEMPLATES  # noqa: E402
from secrets_templates import FILE_TEMPLATES  # noqa: E402
from secrets_templates_more import MORE_TEMPLATES  # noqa: E402

TEMPLATES = FILE_TEMPLATES + MORE_TEMPLATES


def build_corpus(
    templates: tuple[Template, ...] = TEMPLATES, seed: int = SEED, rounds: int = ROUNDS
) -> list[dict[str, Any]]:
    """Every template drawn ``rounds`` times from one seeded generator, in a fixed order."""
    fake = Fake(random.Random(seed))
    items: list[dict[str, Any]] = []
    for round_ in range(rounds):
        for template in templates:
            snippet = Snippet(template.__name__)
            template(snippet, fake)
            items.append(
                {
                    "id": f"{template.__name__}-{round_:03d}",
                    "source": template.__name__,
                    "text": snippet.text,
                    "secrets": snippet.secrets,
                    "lookalikes": snippet.lookalikes,
                }
            )
    return items


def corpora() -> dict[str, list[dict[str, Any]]]:
    """File name -> items: the tuning corpus and the held-out one."""
    return {
        "corpus.jsonl": build_corpus(),
        "holdout.jsonl": build_corpus(HOLDOUT_TEMPLATES, HOLDOUT_SEED, HOLDOUT_ROUNDS),
    }


def render(items: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help="the corpus folder")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    for name, items in corpora().items():
        path, text = args.out / name, render(items)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        kinds = Counter(s["kind"] for item in items for s in item["secrets"])
        negatives = Counter(s["kind"] for item in items for s in item["lookalikes"])
        print(f"wrote {len(items)} snippets to {path}")
        print(f"  secrets {sum(kinds.values())}: {dict(sorted(kinds.items()))}")
        print(f"  lookalikes {sum(negatives.values())}: {dict(sorted(negatives.items()))}")
    if args.check:
        print("\n".join(f"{p} differs from the generator" for p in stale) or "corpus up to date")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
