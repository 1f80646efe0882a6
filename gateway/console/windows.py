"""The console's time windows: how long each is, and its chart's bucket."""

from __future__ import annotations

from typing import Final

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
