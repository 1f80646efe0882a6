"""Every operator command given the demo's config (``--config .cache/demo/switchyard.yaml``,
as ``scripts/demo.py`` writes it) reads and writes the store that config's gateway records into.

The gateway's ``store`` section carries fields of its own (``enabled``, ``writer_process``) beside
the store's; ``switchyard traffic summary|export --config`` once rebuilt the store's config from
all of them and died on a pydantic error (issue 42). Here the store holds rows written directly:
chat inferences with feedback and one agent episode.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main as cli_main
from tests.fixtures.demo_stack import write_demo_config
from traffic.store import FeedbackRecord, InferenceRecord, SqliteBackend

CHATS = 5  # each accepted
EPISODE = "agent-cli-config"
EPISODE_STEPS = 2


def _chat(text: str, answer: str, *, episode: str | None = None) -> InferenceRecord:
    return InferenceRecord(
        endpoint="chat.completions",
        wire_format="openai.chat",
        request={"model": "auto", "messages": [{"role": "user", "content": text}]},
        response={"choices": [{"message": {"role": "assistant", "content": answer}}]},
        route_target="frontier-openai",
        served_model="openai/gpt-4o-mini",
        status=200,
        latency_ms=12.5,
        cost_usd=0.0001,
        episode_id=episode,
    )


async def _fill(url: str) -> None:
    store = SqliteBackend(url.removeprefix("sqlite:///"))
    await store.connect()
    try:
        rows = [_chat(f"def fib{i}(n):", f"return {i}") for i in range(CHATS)]
        rows += [_chat(f"step {i}", "ok", episode=EPISODE) for i in range(EPISODE_STEPS)]
        await store.insert_inferences(rows)
        accepted = [FeedbackRecord(inference_id=r.id, kind="accepted") for r in rows]
        await store.insert_feedback(accepted)
    finally:
        await store.close()


@pytest.fixture
def demo_config(tmp_path: Path) -> Path:
    """The demo's config (nothing listens at its addresses) and its store, filled."""
    path = write_demo_config(tmp_path, 8080, "http://127.0.0.1:9")
    asyncio.run(_fill(yaml.safe_load(path.read_text())["store"]["url"]))
    return path


def test_traffic_summary_reads_the_store_of_the_demo_config(
    demo_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["traffic", "summary", "--config", str(demo_config), "--json"]) == 0
    (group,) = json.loads(capsys.readouterr().out)
    assert group["count"] == CHATS + EPISODE_STEPS
    assert cli_main(["traffic", "summary", "--config", str(demo_config)]) == 0
    assert re.search(rf"│ requests +│ +{CHATS + EPISODE_STEPS} │", capsys.readouterr().out)


def test_traffic_export_reads_the_store_of_the_demo_config(
    demo_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sft"
    args = ["--config", str(demo_config), "--kind", "sft", "--out", str(out)]
    assert cli_main(["traffic", "export", *args, "--eval-fraction", "0"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["train"] == CHATS + EPISODE_STEPS
    assert len((out / "train.jsonl").read_text().splitlines()) == CHATS + EPISODE_STEPS
    assert f"manifest: {out / 'manifest.json'}" in capsys.readouterr().out


def test_canonicalize_and_episode_commands_read_the_store_of_the_demo_config(
    demo_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["traffic", "canonicalize", "--config", str(demo_config)]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == 0  # every row is new
    assert cli_main(["traffic", "episode", EPISODE, "--config", str(demo_config), "--json"]) == 0
    view: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert len(view["steps"]) == EPISODE_STEPS
    assert {s["route_kind"] for s in view["steps"]} == {"frontier"}  # the config's own targets
    out = tmp_path / "episodes"
    export = ["--config", str(demo_config), "--kind", "episode_rl", "--out", str(out)]
    assert cli_main(["traffic", "episode-export", *export]) == 0
    assert json.loads((out / "manifest.json").read_text())["counts"]["episodes_read"] == 1


def test_keys_are_managed_in_the_store_of_the_demo_config(
    demo_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--config", str(demo_config)]
    assert cli_main(["keys", "create", *config, "--name", "alice", "--rpm", "600"]) == 0
    created = capsys.readouterr().out
    key_id = re.search(r"^id:\s+(\S+)$", created, re.MULTILINE)
    assert key_id and re.search(r"^key: sy-", created, re.MULTILINE), created
    assert cli_main(["keys", *config, "list", "--json"]) == 0  # before the command works too
    (listed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert listed["id"] == key_id.group(1) and listed["rpm_limit"] == 600
    assert cli_main(["keys", "revoke", *config, key_id.group(1)]) == 0
    assert cli_main(["keys", "list", *config, "--active", "--json"]) == 0
    assert capsys.readouterr().out.endswith(f"revoked {key_id.group(1)}\n")


def test_replay_reads_the_store_its_config_names(
    demo_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rl_loop import replay

    state = ["--state-file", str(tmp_path / "candidate.json")]
    assert replay.main(["--config", str(demo_config), *state]) == 0
    out = capsys.readouterr().out
    assert f"{CHATS + EPISODE_STEPS} recorded requests replayed" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_a_config_that_records_nothing_or_does_not_load_is_refused_with_the_reason(
    demo_config: Path, tmp_path: Path
) -> None:
    data = yaml.safe_load(demo_config.read_text())
    data["store"]["enabled"] = False
    data["auth"] = {"required": False}
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit, match=r"store\.enabled is false"):
        cli_main(["traffic", "summary", "--config", str(off)])
    broken = tmp_path / "broken.yaml"
    broken.write_text("store: {colour: red}\n")
    with pytest.raises(SystemExit, match="invalid config"):
        cli_main(["traffic", "export", "--config", str(broken), "--kind", "sft", "--out", "x"])
    with pytest.raises(SystemExit, match="store url must start with"):
        cli_main(["traffic", "summary", "--store", "mysql://db"])


def test_the_summary_prints_whole_in_an_80_column_terminal(
    demo_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # what rich reads for a terminal's width
    url = yaml.safe_load(demo_config.read_text())["store"]["url"]
    by = "route_target,served_model,endpoint,day"
    assert cli_main(["traffic", "summary", "--store", url, "--by", by]) == 0
    out = capsys.readouterr().out
    assert "…" not in out, out
    assert max(len(line) for line in out.splitlines()) <= 80
    for shown in ("requests", "errors", "acceptance", "openai/gpt-4o-mini", "chat.completions"):
        assert shown in out
