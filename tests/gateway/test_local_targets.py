"""Tokenizers of local targets: only cache-aware targets get one, loading never blocks start-up,
a reload keeps what is loaded, retries what failed and returns once what it added has loaded."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.backends.local_target import load_tokenizers
from gateway.config import SwitchyardConfig, parse_config
from serving.build import ensure_demo_model
from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.vllm_fixture import cache_dir


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return ensure_demo_model(cache_dir())


def _config(**tokenizer_dirs: tuple[str, Path]) -> SwitchyardConfig:
    """A vLLM target per keyword: (selector kind, tokenizer directory)."""
    backends: dict[str, Any] = {
        name: {
            "kind": "vllm",
            "model": "m",
            "replicas": ["http://127.0.0.1:9"],
            "tokenizer_dir": str(d),
            "replica_selector": {"kind": kind},
        }
        for name, (kind, d) in tokenizer_dirs.items()
    }
    first = next(iter(backends))
    return parse_config({"backends": backends, "routing": {"default": first}})


def test_only_cache_aware_targets_get_a_tokenizer_and_it_loads_in_the_background(
    model_dir: Path, tmp_path: Path
) -> None:
    config = _config(
        a=("cache_aware", model_dir), b=("cache_aware", model_dir), c=("round_robin", tmp_path)
    )
    tokenizers = load_tokenizers(config, {})
    assert list(tokenizers) == [str(model_dir)]  # shared by the targets naming it
    tokenizer = tokenizers[str(model_dir)]
    assert tokenizer.wait(60)
    # A reload keeps the loaded one (and the prefix hashes it gave).
    assert load_tokenizers(config, tokenizers)[str(model_dir)] is tokenizer


def test_a_reload_retries_a_tokenizer_that_failed_to_load(model_dir: Path, tmp_path: Path) -> None:
    config = _config(a=("cache_aware", tmp_path))
    tokenizers = load_tokenizers(config, {})
    tokenizer = tokenizers[str(tmp_path)]
    assert not tokenizer.wait(60) and tokenizer.failed
    assert load_tokenizers(config, tokenizers)[str(tmp_path)] is tokenizer
    assert not tokenizer.wait(60)  # tried again, the files still missing
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model_dir / name, tmp_path / name)
    assert load_tokenizers(config, tokenizers)[str(tmp_path)] is tokenizer
    assert tokenizer.wait(60) and not tokenizer.failed


def test_a_reload_that_adds_a_cache_aware_target_returns_with_its_tokenizer_loaded(
    model_dir: Path, tmp_path: Path
) -> None:
    def config(selector: str) -> dict[str, Any]:
        local = {
            "kind": "vllm",
            "model": "m",
            "replicas": ["http://127.0.0.1:9"],
            "tokenizer_dir": str(model_dir),
            "replica_selector": {"kind": selector},
        }
        return {"backends": {"local": local}, "routing": {"default": "local"}}

    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump(config("round_robin")))
    gateway = GatewayThread(parse_config(config("round_robin")), path).start()
    try:
        assert gateway.state.targets.tokenizers == {}  # no cache-aware target, no tokenizer
        path.write_text(yaml.safe_dump(config("cache_aware")))
        gateway.call(gateway.state.reloader.reload(), timeout=120)
        assert gateway.state.targets.tokenizers[str(model_dir)].loaded
    finally:
        gateway.stop()
