"""Settings of the ops console (``console:`` in the gateway's YAML); every default defined here."""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

WindowName = Literal["1h", "6h", "24h", "7d", "30d"]
WINDOW_SECONDS: Final[dict[str, int]] = {
    "1h": 3600,
    "6h": 6 * 3600,
    "24h": 24 * 3600,
    "7d": 7 * 24 * 3600,
    "30d": 30 * 24 * 3600,
}
# Chart buckets per window: about 24-48 points on every chart.
BUCKET_SECONDS: Final[dict[str, int]] = {
    "1h": 120,
    "6h": 900,
    "24h": 3600,
    "7d": 6 * 3600,
    "30d": 24 * 3600,
}


class ConsoleConfig(BaseModel):
    """The console under ``/ui``: who may use it, what it reads, how much at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Serve the console under /ui.")
    session_ttl_s: float = Field(
        default=8 * 3600, gt=0, description="A login lasts this long (signed session cookie)."
    )
    window: WindowName = Field(default="24h", description="Time window the pages open with.")
    class_tag: str = Field(
        default="family", min_length=1, description="The tag whose value is a request's class."
    )
    page_size: int = Field(default=50, ge=5, le=500, description="Exchanges per traffic page.")
    replay_sample: int = Field(
        default=2000,
        ge=50,
        le=50_000,
        description="Newest successful exchanges of the window a routing change is replayed on.",
    )
    rollup_interval_s: float = Field(
        default=60.0,
        gt=0,
        description="How often the closed hours of traffic are rolled up for long windows.",
    )
    gateway_url: str | None = Field(
        default=None,
        description="This gateway's base URL for a weight swap's admin calls (drain, undrain); "
        "default: the URL the console was reached at.",
    )
    flywheel_dir: Path = Field(
        default=Path(".cache/flywheel"),
        description="Where flywheel runs write their rounds and reports (run-*/round-N/...).",
    )
