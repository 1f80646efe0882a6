"""``switchyard traffic canonicalize``: Responses and Messages records stored before the canonical
conversation was recorded get it written in, by the live doors' translators, so that readers
without the gateway (the RL loop) train on them like on new ones."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.admin.legacy_records import backfill_canonical
from gateway.cli import main as cli_main
from tests.fixtures.postgres_fixture import pg_dsn
from tests.traffic.export import synthetic as syn
from traffic.export import DatasetConfig, build_dataset
from traffic.store import InferenceRow, StoreBackend, StoreConfig, open_store


def legacy_rows() -> list[InferenceRow]:
    return [
        syn.chat_row(
            1, "How do I run the tests?", "Run make test.", fb=[syn.feedback("accepted", 1)]
        ),
        syn.responses_row(2, fb=[syn.feedback("accepted", 2)]),
        syn.anthropic_row(3, fb=[syn.feedback("accepted", 3)]),
    ]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return pg_dsn(request.getfixturevalue("pg_empty_schema"))


@pytest.fixture
async def backend(store_url: str) -> AsyncIterator[StoreBackend]:
    store = open_store(StoreConfig(url=store_url))
    await store.connect()
    rows = legacy_rows()
    assert all(r.inference.canonical_request is None for r in rows)  # as before migration 3
    await store.insert_inferences([r.inference for r in rows])
    await store.insert_feedback([f for r in rows for f in r.feedback])
    yield store
    await store.close()


async def _read(store: StoreBackend) -> list[InferenceRow]:
    return [row async for row in store.iter_inferences()]


async def test_backfill_writes_what_the_live_doors_translate_and_is_idempotent(
    backend: StoreBackend,
) -> None:
    config = DatasetConfig(kind="sft")
    before = build_dataset(await _read(backend), config)
    assert before.counts.skipped["untranslated_legacy_record"] == 2  # no gateway, no translator
    with_live = build_dataset(await _read(backend), config, legacy=syn.LIVE)

    counts = await backfill_canonical(backend)
    assert counts == {"written": 2, "already_canonical": 0, "untranslatable": 0}
    rows = {r.inference.wire_format: r.inference for r in await _read(backend)}
    for wire in ("openai.responses", "anthropic.messages"):
        record = rows[wire]
        assert isinstance(record.request, dict)  # read back from the store: parsed
        assert record.canonical_request == syn.LIVE.request(wire, record.request)
        assert record.canonical_response == syn.LIVE.answer(wire, record.response or {})
    assert rows["openai.chat"].canonical_request is None  # the OpenAI door is canonical as is

    after = build_dataset(await _read(backend), config)  # read as the RL loop reads: no gateway
    assert "untranslated_legacy_record" not in after.counts.skipped
    assert after.train + after.eval == with_live.train + with_live.eval
    assert await backfill_canonical(backend) == {
        "written": 0,
        "already_canonical": 2,
        "untranslatable": 0,
    }


def test_the_cli_command_backfills_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    url = f"sqlite:///{tmp_path / 'cli.db'}"

    async def seed() -> None:
        store = open_store(StoreConfig(url=url))
        await store.connect()
        await store.insert_inferences([r.inference for r in legacy_rows()])
        await store.close()

    asyncio.run(seed())
    assert cli_main(["traffic", "canonicalize", "--store", url]) == 0
    assert '"written": 2' in capsys.readouterr().out
