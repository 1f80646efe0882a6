"""The second held-out set: written before the scrubber's rules were read, in contexts an IDE
user pastes (env files, Kubernetes and compose files, Terraform, Ansible, ini files, command
lines, SDK calls in five languages, logs, "copy as cURL", SSH keys) with vendor formats the
tuning corpus lacks, passwords as people choose them, generic secrets under varied names, and
lookalikes that must survive (digests, lock files, placeholders, fixtures, SSH public keys).

It is generated in memory, deterministically (``HOLDOUT2_SEED``), not committed as a file:

    .venv/bin/python scripts/secrets_eval.py --holdout2

The templates: `secrets_holdout2_config` (with the value makers) and `secrets_holdout2_code`.
Every value is random and fake; nothing is a real credential.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported

from secrets_corpus import build_corpus
from secrets_fakes import Template
from secrets_holdout2_code import CODE_TEMPLATES
from secrets_holdout2_config import CONFIG_TEMPLATES

HOLDOUT2_SEED = 4949
HOLDOUT2_ROUNDS = 4
HOLDOUT2_TEMPLATES: tuple[Template, ...] = CONFIG_TEMPLATES + CODE_TEMPLATES


def holdout2_items() -> list[dict[str, Any]]:
    """The set's snippets, in the tuning corpus's JSON shape (scripts/secrets_corpus.py)."""
    items: list[dict[str, Any]] = build_corpus(HOLDOUT2_TEMPLATES, HOLDOUT2_SEED, HOLDOUT2_ROUNDS)
    return items
