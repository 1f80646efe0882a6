"""The ``fleet`` section: strict, defaults that need no Redis, errors that say what to set and
never echo a Redis URL in their own words (it may hold a password)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.fleet.config import FleetConfig


def test_the_default_fleet_is_this_process_alone() -> None:
    assert FleetConfig().backend == "local" and not FleetConfig().shared
    assert FleetConfig(backend="redis").shared


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"redis_url": "http://:hunter2@redis:6379"}, "fleet.redis_url must start with"),
        ({"name": "has spaces"}, "fleet.name"),
        ({"heartbeat_s": 2.0, "member_ttl_s": 3.0}, "member_ttl_s must be at least twice"),
        ({"poll_interval_s": 5.0}, "poll_interval_s"),
        ({"unknown": 1}, "Extra inputs are not permitted"),
    ],
)
def test_a_bad_fleet_section_is_refused_with_what_to_set(
    fields: dict[str, object], says: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        FleetConfig.model_validate(fields)
    assert says in str(refused.value)
    assert "hunter2" not in str(refused.value).split("input_value")[0]  # our message
