import uuid
from datetime import UTC, datetime, timedelta

import pytest

from traffic.store import id_time, new_id
from traffic.store.ids import min_id_at


def test_new_id_is_uuid7_with_rfc_variant():
    parsed = uuid.UUID(new_id())
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122


def test_ids_increase_within_a_process():
    ids = [new_id() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_id_time_is_creation_time_to_the_millisecond():
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    made = new_id()
    after = datetime.now(UTC)
    assert before <= id_time(made) <= after
    assert id_time(made).tzinfo is UTC


def test_id_time_refuses_other_versions():
    with pytest.raises(ValueError):
        id_time(str(uuid.uuid4()))
    with pytest.raises(ValueError):
        id_time("not-a-uuid")


def test_min_id_at_bounds_ids_of_that_millisecond():
    made = new_id()
    at = id_time(made)
    assert min_id_at(at) <= made < min_id_at(at + timedelta(milliseconds=1))
    with pytest.raises(ValueError):
        min_id_at(datetime(2025, 1, 1))  # naive
