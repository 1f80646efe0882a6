"""The hot swap's per-call timeout: a base plus seconds per GB of the larger checkpoint's weights,
settable from the CLI, its defaults HotSwapConfig's."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import serving.hotswap as hotswap
from serving.hotswap import HotSwapConfig, SwapReport
from serving.names import ADMIN_TOKEN_ENV
from serving.swap_checks import (
    add_timeout_arguments,
    call_timeout_s,
    checkpoint_gb,
    timeout_overrides,
)


def checkpoint(root: Path, name: str, weight_bytes: list[int]) -> Path:
    """A directory with safetensors files of the given sizes (sparse: no disk used)."""
    directory = root / name
    directory.mkdir()
    for i, size in enumerate(weight_bytes):
        with (directory / f"model-{i:05d}.safetensors").open("wb") as handle:
            handle.truncate(size)
    (directory / "tokenizer.json").write_bytes(b"x" * 1000)  # not weights: not counted
    return directory


def test_the_timeout_grows_with_the_larger_checkpoints_weights(tmp_path: Path) -> None:
    small = checkpoint(tmp_path, "small", [500_000_000])
    sharded = checkpoint(tmp_path, "sharded", [30_000_000_000, 31_000_000_000])
    assert checkpoint_gb(sharded) == pytest.approx(61.0)
    assert call_timeout_s(120.0, 10.0, [small, sharded]) == pytest.approx(120 + 610)
    assert call_timeout_s(120.0, 10.0, [small, small]) == pytest.approx(125.0)
    assert call_timeout_s(120.0, 0.0, [sharded]) == 120.0


def test_the_cli_sets_the_timeout_and_leaves_unset_parts_to_the_config() -> None:
    parser = argparse.ArgumentParser()
    add_timeout_arguments(parser)
    assert timeout_overrides(parser.parse_args([])) == {}
    asked = timeout_overrides(parser.parse_args(["--timeout-s-per-gb", "30"]))
    config = HotSwapConfig(gateway_url="http://gw", admin_token="t", **asked)
    assert config.timeout_s_per_gb == 30.0
    assert config.request_timeout_s == HotSwapConfig.model_fields["request_timeout_s"].default


def test_hotswap_cli_passes_the_timeout_to_the_publish(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[HotSwapConfig] = []

    async def publish(
        new: Path, old: Path, replicas: list[str], config: HotSwapConfig
    ) -> SwapReport:
        seen.append(config)
        return SwapReport("new", "old")

    monkeypatch.setattr(hotswap, "publish_weights", publish)
    monkeypatch.setenv(ADMIN_TOKEN_ENV, "t")
    argv = ["--checkpoint", "a", "--previous", "b", "--gateway", "http://gw"]
    argv += ["--replica", "http://r", "--request-timeout-s", "300", "--probe-max-abs", "2"]
    assert hotswap.main(argv) == 0
    (config,) = seen
    assert config.request_timeout_s == 300.0
    assert config.timeout_s_per_gb == HotSwapConfig.model_fields["timeout_s_per_gb"].default
    assert config.tolerance is not None and config.tolerance.max_abs == 2.0
