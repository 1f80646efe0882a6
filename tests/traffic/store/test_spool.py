import dataclasses
import json
import math
from typing import Any

from traffic.store import FeedbackRecord, InferenceRecord, JsonText
from traffic.store.spool import (
    DEAD_LETTER_FILE,
    SKETCH_CHARS,
    Spool,
    SpoolRecord,
    decode_line,
    encode_line,
)

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


def nested(depth: int) -> object:
    """A JSON value ``depth`` levels deep (lists and objects in turn), built without recursion."""
    value: object = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def strict_json(line: str) -> dict[str, Any]:
    def no_constant(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    parsed: dict[str, Any] = json.loads(line, parse_constant=no_constant)
    return parsed


class ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def test_dead_letters_of_unencodable_records_never_raise_and_keep_their_identity(tmp_path):
    spool = Spool(tmp_path, segment_bytes=1 << 20)
    deep = inference(request={"messages": nested(100_000)})
    nan = inference(request={"temperature": math.nan}, cost_usd=math.inf)
    surrogate = inference(request={"content": "lone \ud800 surrogate", "\udfff": "key"})
    odd = inference(request={"set": {1, 2}, "object": ReprRaises(), "bytes": b"\x00\xff"})
    feedback = FeedbackRecord(
        inference_id=deep.id,
        kind="comment",
        payload=nested(5000),  # type: ignore[arg-type]  # a list (even depth): any value must do
    )
    huge = inference(request={"content": "x" * 5_000_000, "nan": math.nan})
    spool.dead_letter(
        [
            (deep, "RecursionError: too deep"),
            (nan, "NaN"),
            (surrogate, "refused: \ud800 in the reason too"),
            (odd, "not JSON"),
            (feedback, "too deep"),
            (huge, "huge and NaN"),
            ({"a dict": ReprRaises()}, "not a record at all"),
            (b'{"kind": "inference", "rec\xff', "torn line"),
        ]
    )
    lines = (tmp_path / DEAD_LETTER_FILE).read_text(encoding="utf-8").splitlines()
    letters = [strict_json(line) for line in lines]
    assert len(letters) == 8 and all(d["error"] and d["at"] for d in letters)
    identified: list[SpoolRecord] = [deep, nan, surrogate, odd, feedback, huge]
    for record, letter in zip(identified, letters, strict=False):
        assert (letter["id"], letter["ts"]) == (record.id, record.ts.isoformat())
    kinds = [d.get("kind") for d in letters]
    assert kinds == ["inference"] * 4 + ["feedback", "inference", None, None]
    # Faithful where JSON can say it: lone surrogates as escapes, other objects as reprs.
    assert letters[2]["record"]["request"] == {"content": "lone \ud800 surrogate", "\udfff": "key"}
    assert letters[3]["record"]["request"]["set"] == "{1, 2}"
    assert letters[3]["record"]["request"]["object"] == "<ReprRaises object>"
    # Otherwise a bounded sketch, and why.
    for letter in (letters[0], letters[1], letters[4], letters[5]):
        assert letter["record"] is None and letter["sketch_reason"]
        assert 0 < len(letter["sketch"]) <= SKETCH_CHARS + 1
    assert "RecursionError" in letters[0]["sketch_reason"]
    assert letters[0]["sketch"].startswith("{'id': '" + deep.id)
    assert "nan" in letters[1]["sketch"] and "inf" in letters[1]["sketch"]
    assert letters[7]["line"].startswith('{"kind": "inference", "rec')


def test_append_dead_letters_what_it_cannot_encode_and_spools_the_rest(tmp_path):
    spool = Spool(tmp_path, segment_bytes=1 << 20)
    deep = inference(request={"messages": nested(100_000)})
    surrogate = inference(request={"content": "lone \udc00"})
    nan = inference(request={"temperature": math.nan})
    plain = inference()
    assert spool.append([deep, surrogate, nan, plain]) == (3, 1)
    spool.seal()
    (segment,) = spool.segments()
    claim = spool.claim(segment)
    assert claim is not None and claim.bad_lines == []
    assert claim.records[0] == surrogate  # lone surrogates survive the round trip
    nan_back = claim.records[1]
    assert isinstance(nan_back, InferenceRecord) and isinstance(nan_back.request, dict)
    assert math.isnan(nan_back.request["temperature"])
    assert claim.records[2] == plain
    claim.release()
    (letter,) = [
        strict_json(line) for line in (tmp_path / DEAD_LETTER_FILE).read_text().splitlines()
    ]
    assert letter["id"] == deep.id and "RecursionError" in letter["error"]


def test_a_spool_line_nested_too_deep_is_set_aside_not_raised(tmp_path):
    spool = Spool(tmp_path, segment_bytes=1 << 20)
    plain = inference()
    spool.append([plain])
    spool.seal()
    (segment,) = spool.segments()
    with segment.open("ab") as f:
        f.write(b'{"kind": "inference", "record": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    claim = spool.claim(segment)
    assert claim is not None
    assert claim.records == [plain]
    assert len(claim.bad_lines) == 1 and "RecursionError" in claim.bad_lines[0][1]
    claim.release()


def test_a_line_spooled_before_cache_writes_were_recorded_reads_them_as_unknown():
    record = inference(prompt_tokens=2000, cached_tokens=1024, cache_creation_tokens=512)
    line = json.loads(encode_line(record))
    del line["record"]["cache_creation_tokens"]  # what the code before migration 2 wrote
    old = decode_line(json.dumps(line).encode())
    assert isinstance(old, InferenceRecord) and old.cache_creation_tokens is None
    assert old == dataclasses.replace(record, cache_creation_tokens=None)
    assert decode_line(encode_line(record)) == record


def test_a_line_spooled_before_the_canonical_exchange_was_recorded_reads_it_as_none():
    record = inference(
        endpoint="responses",
        wire_format="openai.responses",
        request={"model": "m", "input": "hi"},
        canonical_request={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        canonical_response={"choices": [{"message": {"role": "assistant", "content": "yo"}}]},
    )
    assert decode_line(encode_line(record)) == record  # a spool line carries both
    line = json.loads(encode_line(record))
    del line["record"]["canonical_request"], line["record"]["canonical_response"]  # before 3
    old = decode_line(json.dumps(line).encode())
    assert isinstance(old, InferenceRecord)
    assert old == dataclasses.replace(record, canonical_request=None, canonical_response=None)


def test_a_record_holding_encoded_json_spools_and_reads_back_as_its_objects(tmp_path):
    """The writer process's records hold the client's body as it came (JsonText); spooled
    (the database down), they read back as the parsed body, as the store gives it."""
    body = b'{ "model": "m",  "messages": [{"role": "user", "content": "caf\\u00e9"}] }'
    record = inference(request=JsonText(body), canonical_request=JsonText(b'{"model":"m"}'))
    spool = Spool(tmp_path, segment_bytes=1 << 20)
    assert spool.append([record]) == (1, 0)
    spool.seal()
    (segment,) = spool.segments()
    claim = spool.claim(segment)
    assert claim is not None
    (back,) = claim.records
    assert back == dataclasses.replace(
        record, request=json.loads(body), canonical_request={"model": "m"}
    )
    claim.release()
