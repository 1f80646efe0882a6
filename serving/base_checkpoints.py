"""Which base checkpoint a training config names: a run's identity (its config, less what only
changes how it computed), the lookup of a checkpoint a run already wrote, and the config the
flywheel and the agent measurements train their base with. Base training is deterministic, so a
found checkpoint is the one a new run would write (:mod:`serving.train_base`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from pydantic import JsonValue

from serving.build import read_version
from serving.copy_curriculum import CopySpec
from serving.model_config import VERSION_FILE
from serving.train_base import CHECKPOINT_KIND, TrainBaseConfig, train_base

#: Config fields that choose how a run computes, not what: left out of a checkpoint's identity
#: (`find_trained`), so a run on other kernels, or one saved before the field existed, matches.
NON_IDENTITY_FIELDS: Final = frozenset({"experts_implementation"})
#: Fields added after checkpoints were saved, with the value those runs had: left out of the
#: identity at that value, so an older checkpoint still matches the config that made it.
LATER_FIELDS: Final = {"copy_curriculum": CopySpec().model_dump(mode="json")}


def config_identity(config: JsonValue) -> JsonValue:
    """A run's config as saved in its checkpoint's metadata, less the `NON_IDENTITY_FIELDS` fields
    (a checkpoint saved before one of them existed has the same identity)."""
    if not isinstance(config, dict):
        return config
    return {
        k: v
        for k, v in config.items()
        if k not in NON_IDENTITY_FIELDS and not (k in LATER_FIELDS and v == LATER_FIELDS[k])
    }


def find_trained(out_dir: Path, init_dir: Path, config: TrainBaseConfig) -> Path | None:
    """A checkpoint under `out_dir` that `train_base(init_dir, out_dir, config)` wrote, or a run
    whose config differs only in how it computed (`NON_IDENTITY_FIELDS`)."""
    parent = read_version(init_dir).version_id
    wanted = config_identity(json.loads(config.model_dump_json()))
    for version_file in sorted(out_dir.glob(f"{CHECKPOINT_KIND}-*/{VERSION_FILE}")):
        version = read_version(version_file.parent)
        if version.parent == parent and config_identity(version.metadata.get("config")) == wanted:
            return version_file.parent
    return None


def base_training_config(steps: int, seq_len: int, copy: CopySpec) -> TrainBaseConfig:
    """The base training the flywheel and the agent measurements run: the defaults, `steps` of
    `seq_len` windows with the copy curriculum `copy`, evaluated at most every 100 steps."""
    every = max(1, min(100, steps // 3))
    return TrainBaseConfig(steps=steps, seq_len=seq_len, eval_every=every, copy_curriculum=copy)


def ensure_trained(
    init_dir: Path, out_dir: Path, config: TrainBaseConfig, *, progress: bool = False
) -> Path:
    """`find_trained`, or a new training run when there is none (runs are deterministic, so
    the found checkpoint is the one a new run would write)."""
    found = find_trained(out_dir, init_dir, config)
    if found is not None:
        return found
    return train_base(init_dir, out_dir, config, progress=progress).checkpoint_dir
