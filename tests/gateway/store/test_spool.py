from gateway.store import FeedbackRecord
from gateway.store.spool import DEAD_LETTER_FILE, Spool, SpoolRecord

from .scenario import inference


def test_segments_are_claimed_only_when_nobody_appends(tmp_path):
    spool = Spool(tmp_path, segment_bytes=1 << 20)
    records: list[SpoolRecord] = [
        inference(),
        FeedbackRecord(inference_id=inference().id, kind="edited"),
    ]
    assert spool.append(records) == (2, 0)
    (segment,) = spool.segments()
    assert spool.claim(segment) is None  # still being appended to (its flock is held)

    spool.seal()
    claim = spool.claim(segment)
    assert claim is not None
    assert claim.records == records and claim.bad_lines == []
    assert spool.claim(segment) is None  # one claimant at a time
    claim.remove()
    assert spool.segments() == []


def test_segments_rotate_and_torn_lines_are_set_aside(tmp_path):
    spool = Spool(tmp_path, segment_bytes=4096)
    for _ in range(10):
        spool.append([inference()])
    spool.seal()
    segments = spool.segments()
    assert len(segments) > 1
    with segments[-1].open("ab") as f:
        f.write(b'{"kind": "inference", "rec')  # a crash mid-append
    claims = [spool.claim(s) for s in segments]
    assert sum(len(c.records) for c in claims if c) == 10
    assert [len(c.bad_lines) for c in claims if c][-1] == 1
    for c in claims:
        assert c is not None
        c.release()


def test_unencodable_records_go_to_dead_letters(tmp_path):
    spool = Spool(tmp_path, segment_bytes=1 << 20)
    assert spool.append([inference(request={"x": object()}), inference()]) == (1, 1)
    assert len((tmp_path / DEAD_LETTER_FILE).read_text().splitlines()) == 1
