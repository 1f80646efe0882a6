"""What one benchmark run measures; every default is defined here once.

A *cell* is one (system, mode, concurrency): the load generator keeps ``concurrency`` requests in
flight against one system for ``duration_s`` (after ``warmup_requests`` uncounted requests) and
reports requests/s, latency percentiles and the server's CPU time per request.

Systems, all serving the same model name ``sim-local`` from the same frontier simulator:

- ``direct``: the simulator itself (the floor every other system is compared with);
- ``switchyard``: the gateway's local path (a ``vllm`` backend) in front of it, recording off;
- ``switchyard_rec``: the same with recording on (SQLite traffic store);
- ``litellm``: the LiteLLM proxy (one worker, master key, no database, retries off).

``BENCH_QUICK=1`` (or ``--quick``) keeps every system but fewer cells and shorter windows, so a
run finishes in under two minutes once the LiteLLM proxy is installed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal

Mode = Literal["unary", "stream"]
SystemName = Literal["direct", "switchyard", "switchyard_rec", "litellm"]

MODES: Final[tuple[Mode, ...]] = ("unary", "stream")
SYSTEMS: Final[tuple[SystemName, ...]] = ("direct", "switchyard", "switchyard_rec", "litellm")
SYSTEM_LABELS: Final = MappingProxyType(
    {
        "direct": "simulator direct",
        "switchyard": "Switchyard (rec off)",
        "switchyard_rec": "Switchyard (rec on, SQLite)",
        "litellm": "LiteLLM proxy",
    }
)
# The summary's headline figures are read from this cell (mode, concurrency).
HEADLINE_MODE: Final[Mode] = "unary"
HEADLINE_CONCURRENCY: Final = 16
MODEL_NAME: Final = "sim-local"
LITELLM_VERSION: Final = "1.106.2"


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """One run's knobs (full mode by default; :func:`quick_settings` for the short run)."""

    concurrencies: tuple[int, ...] = (1, 16, 64)
    modes: tuple[Mode, ...] = MODES
    systems: tuple[SystemName, ...] = SYSTEMS
    duration_s: float = 5.0  # measured window per cell
    warmup_requests: int = 50  # per cell, uncounted; at least 2 per connection
    max_requests_per_cell: int = 200_000  # a bound, should a window be long
    max_tokens: int = 16  # answer length asked for
    store_records: int = 10_000  # records written per store backend
    store_backends: tuple[str, ...] = ("sqlite", "postgres")
    postgres_url: str = "postgresql://postgres@127.0.0.1:5432/test"
    out_dir: Path = Path(".cache/bench/gateway")
    litellm_venv: Path = Path(".cache/bench/litellm-proxy-venv")
    startup_timeout_s: float = 120.0
    cell_timeout_margin_s: float = 60.0  # a cell's load generator is killed past its window + this
    profile_s: float = 0.0  # > 0: py-spy records the gateway this long under load
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.concurrencies or min(self.concurrencies) < 1:
            raise ValueError("concurrencies must be a non-empty list of integers >= 1")
        if self.duration_s <= 0:
            raise ValueError("duration_s must be > 0")
        unknown = set(self.systems) - set(SYSTEMS)
        if unknown:
            raise ValueError(f"unknown systems {sorted(unknown)}; known: {list(SYSTEMS)}")
        if "direct" not in self.systems:
            raise ValueError("`direct` is the baseline of `added_p50_ms`; keep it in systems")

    def warmup_for(self, concurrency: int) -> int:
        return max(self.warmup_requests, 2 * concurrency)


def quick_settings(**overrides: object) -> BenchSettings:
    """Every system, concurrency 1 and 16 only, short windows: well under two minutes."""
    quick: dict[str, object] = {
        "concurrencies": (1, HEADLINE_CONCURRENCY),
        "duration_s": 1.5,
        "warmup_requests": 20,
        "store_records": 2_000,
        "quick": True,
    }
    quick.update(overrides)
    return dataclasses.replace(BenchSettings(), **quick)  # type: ignore[arg-type]
