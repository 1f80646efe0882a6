"""Promotion and one-command rollback, recorded in the model registry (the hot-swap itself is
replaced by a fake here; tests/serving/test_hotswap.py and the flywheel smoke test run it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rl_loop import promote as promote_module
from rl_loop.model_registry import TaintedCheckpoint, list_checkpoints, record_checkpoint
from rl_loop.promote import PromotionError, promote, rollback
from serving.hotswap import HotSwapConfig, ReplicaSwap, SwapReport
from serving.model_config import VERSION_FILE, CheckpointVersion, ModelSpec
from traffic.store import StoreBackend, StoreConfig, new_id, open_store
from traffic.store.forgetting import TaintRecord, add_taints

CONFIG = HotSwapConfig(gateway_url="http://127.0.0.1:1", admin_token="t")
REPLICAS = ["http://127.0.0.1:2"]


def checkpoint(root: Path, version_id: str, parent: str | None, minute: int) -> Path:
    directory = root / version_id
    directory.mkdir()
    version = CheckpointVersion(
        version_id=version_id,
        parent=parent,
        created_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minute),
        spec=ModelSpec(),
        seed=0,
    )
    (directory / VERSION_FILE).write_text(version.model_dump_json(exclude_defaults=True))
    return directory


@pytest.fixture
def swaps(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, bool]]:
    """Fake hot-swap: records (new, previous) and succeeds unless the new dir is 'bad'."""
    calls: list[tuple[str, str, bool]] = []

    async def fake(checkpoint: Path, previous: Path, replicas, config, **_) -> SwapReport:
        ok = "bad" not in checkpoint.name
        calls.append((checkpoint.name, previous.name, ok))
        report = SwapReport(checkpoint.name, previous.name, rolled_back=not ok)
        report.replicas = [ReplicaSwap(r, "swapped" if ok else "rolled_back") for r in replicas]
        return report

    monkeypatch.setattr(promote_module, "publish_weights", fake)
    return calls


async def statuses(store: StoreBackend) -> dict[str, str]:
    return {r.id: r.status for r in await list_checkpoints(store)}


async def test_promote_then_roll_back_in_one_command(store, tmp_path, swaps) -> None:
    base = checkpoint(tmp_path, "base-1", None, 0)
    ft1 = checkpoint(tmp_path, "ft-1", "base-1", 1)
    await record_checkpoint(store, base, "promoted")
    report = await promote(store, ft1, base, REPLICAS, CONFIG)
    assert report.ok and swaps[-1] == ("ft-1", "base-1", True)
    assert await statuses(store) == {"base-1": "retired", "ft-1": "promoted"}

    old, new, back = await rollback(store, REPLICAS, CONFIG)
    assert (old, new) == ("ft-1", "base-1") and back.ok
    assert swaps[-1] == ("base-1", "ft-1", True)
    assert await statuses(store) == {"base-1": "promoted", "ft-1": "rejected"}

    with pytest.raises(PromotionError, match="no retired version"):
        await rollback(store, REPLICAS, CONFIG)


async def test_a_swap_that_rolled_back_leaves_the_candidate_rejected(store, tmp_path, swaps):
    base = checkpoint(tmp_path, "base-1", None, 0)
    bad = checkpoint(tmp_path, "ft-bad", "base-1", 1)
    await record_checkpoint(store, base, "promoted")
    report = await promote(store, bad, base, REPLICAS, CONFIG)
    assert not report.ok
    assert await statuses(store) == {"base-1": "promoted", "ft-bad": "rejected"}


async def test_a_tainted_checkpoint_is_never_published_nor_rolled_back_to(
    store, tmp_path, swaps
) -> None:
    base = checkpoint(tmp_path, "base-1", None, 0)
    ft1 = checkpoint(tmp_path, "ft-1", "base-1", 1)
    ft2 = checkpoint(tmp_path, "ft-2", "ft-1", 2)
    await record_checkpoint(store, base, "promoted")
    await record_checkpoint(store, ft1, "candidate")
    await add_taints(store, [TaintRecord(model_version_id="ft-1", forget_id=new_id())])
    with pytest.raises(TaintedCheckpoint, match="ft-1"):
        await promote(store, ft1, base, REPLICAS, CONFIG)
    with pytest.raises(TaintedCheckpoint, match="ft-1"):  # trained from it: learned it too
        await promote(store, ft2, base, REPLICAS, CONFIG)
    assert swaps == []  # nothing published
    await record_checkpoint(store, base, "rejected")
    await record_checkpoint(store, ft1, "retired")  # served before the forget
    await record_checkpoint(store, checkpoint(tmp_path, "ft-3", None, 3), "promoted")
    with pytest.raises(PromotionError, match="no retired version"):
        await rollback(store, REPLICAS, CONFIG)  # ft-1 is the only retired one: tainted
    assert swaps == []


async def test_rollback_needs_a_promoted_version(store, swaps):
    with pytest.raises(PromotionError, match="nothing to roll back"):
        await rollback(store, REPLICAS, CONFIG)
    assert swaps == []


def test_status_cli(tmp_path: Path, capsys) -> None:
    import asyncio

    async def fill() -> None:
        backend = open_store(StoreConfig(url=f"sqlite:///{tmp_path / 's.db'}"))
        await backend.connect()
        await record_checkpoint(backend, checkpoint(tmp_path, "base-1", None, 0), "promoted")
        await backend.close()

    asyncio.run(fill())
    assert promote_module.main(["status", "--store", f"sqlite:///{tmp_path / 's.db'}"]) == 0
    assert "base-1" in capsys.readouterr().out
