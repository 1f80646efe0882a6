"""The operator commands' tables stay whole in an 80-column terminal: no header or figure cut to
"…", no line wider than the terminal; wider terminals get one row per group.

Tables checked: ``switchyard traffic summary`` (gateway/admin/summary_table.py), ``switchyard
traffic episode`` (gateway/admin/episode_cli.py) and ``python -m rl_loop.replay``'s report. An
episode's answer and tool results are free text shortened to one line of 60 characters by design;
the views here keep them shorter, so any "…" is a cut.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from gateway.admin.episode_cli import print_episode
from gateway.admin.summary_table import FIGURES, fmt_figure, print_summary
from router.replay import ArmReport, ReplayReport

WIDTH = 80
BY = ["route_target", "served_model", "endpoint", "day"]


def render(draw: Any, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    draw(console)
    return console.export_text()


def cells(text: str) -> list[str]:
    """Each cell of the tables in ``text``, its lines joined, all whitespace removed (a value
    folded or wrapped onto several lines reads whole again)."""
    found: list[str] = []
    block: dict[int, str] = {}
    for line in [*text.splitlines(), ""]:
        if line[:1] in ("│", "┃"):
            for i, part in enumerate(line.replace("┃", "│").split("│")[1:-1]):
                block[i] = block.get(i, "") + "".join(part.split())
            continue
        found += block.values()
        block = {}
    return found


def shown_whole(value: str, text: str) -> bool:
    squashed = "".join(value.split())
    return any(squashed in cell for cell in cells(text))


def assert_whole(text: str, width: int = WIDTH) -> None:
    assert "…" not in text, text
    wide = [line for line in text.splitlines() if len(line) > width]
    assert not wide, "\n".join(wide)


def summary_row(target: str, model: str, count: int) -> dict[str, Any]:
    """One group as the store summarises it (its keys in the store's order)."""
    return {
        "route_target": target,
        "served_model": model,
        "endpoint": "chat.completions",
        "day": "2026-11-02",
        "count": count,
        "errors": 12,
        "cost_usd": 1234.5678,
        "latency_ms_p50": 412.3456,
        "latency_ms_p90": 12873.21,
        "latency_ms_p99": 98765.4,
        "ttft_ms_p50": 88.123,
        "ttft_ms_p90": None,
        "accepted": 123456,
        "rejected": 7,
        "edited": 0,
        "acceptance_rate": 0.8765,
    }


GROUPS = [
    summary_row("frontier-anthropic", "anthropic/claude-haiku-4-5", 1_234_567),
    summary_row("frontier-openai", "openai/gpt-4o-mini", 98_765),
    summary_row("local", "switchyard-local", 4),
    summary_row("frontier-openai-with-a-long-name", "openai/gpt-4o-mini-2024-07-18", 5),
]


@pytest.mark.parametrize("groups", [1, 2, len(GROUPS)], ids=["1-group", "2-groups", "4-groups"])
def test_the_traffic_summary_is_whole_at_80_columns(groups: int) -> None:
    rows = GROUPS[:groups]
    text = render(lambda c: print_summary(rows, BY, c), WIDTH)
    assert_whole(text)
    for name, (_, long_name) in FIGURES.items():
        assert shown_whole(long_name, text)
        for row in rows:
            assert shown_whole(fmt_figure(name, row[name]), text)
    for row in rows:
        for key in BY:  # a name over 20 characters folds onto two lines, whole
            assert shown_whole(row[key], text), row[key]


def test_a_summary_without_groups_is_one_column_of_figures() -> None:
    row = {k: v for k, v in summary_row("x", "y", 42).items() if k not in BY}
    text = render(lambda c: print_summary([row], [], c), WIDTH)
    assert_whole(text)
    assert "requests" in text and "42" in text and "all" in text


def test_a_wide_terminal_gets_one_row_per_group_with_every_header() -> None:
    rows = [{k: v for k, v in row.items() if k not in BY[1:]} for row in GROUPS[1:3]]
    text = render(lambda c: print_summary(rows, ["route_target"], c), 160)
    assert_whole(text, 160)
    header = next(line for line in text.splitlines() if "target" in line)
    for short, _ in FIGURES.values():
        assert short in header
    assert sum("frontier-openai" in line for line in text.splitlines()) == 1


def test_figures_are_compact() -> None:
    assert fmt_figure("count", 1_234_567) == "1,234,567"
    assert fmt_figure("cost_usd", 0.0000842) == "0.000084"
    assert fmt_figure("cost_usd", 1234.5678) == "1,235"
    assert fmt_figure("latency_ms_p50", 3.24159) == "3.24"
    assert fmt_figure("latency_ms_p99", 98765.4) == "98,765"
    assert fmt_figure("acceptance_rate", 0.8765) == "88%"
    assert fmt_figure("ttft_ms_p90", None) == "-"


def step(index: int, target: str, kind: str, status: int, error: str | None) -> dict[str, Any]:
    call = {
        "id": f"call_{index}",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'},
    }
    return {
        "index": index,
        "route_target": target,
        "route_kind": kind,
        "served_model": "anthropic/claude-haiku-4-5" if kind == "frontier" else "switchyard-local",
        "status": status,
        "error": error,
        "latency_ms": 12345.678,
        "cost_usd": 0.001234 if kind == "frontier" else None,
        "answer": {"content": None, "tool_calls": [call]},
        "tool_calls": [{"id": f"call_{index}", "valid": index != 1, "problem": "bad path"}],
        "tool_results": [{"content": "def main():\n    return 0"}],
    }


EPISODE: dict[str, Any] = {
    "episode_id": "agent-3ba39589dde4430baea8135d770578ca",
    "verdict": "accepted",
    "verdict_reason": "all 8 tests pass",
    "problems": [],
    "summary": {
        "steps": 3,
        "local_steps": 1,
        "frontier_steps": 2,
        "failed_steps": 1,
        "tool_calls": 3,
        "invalid_tool_calls": 1,
        "latency_ms": 37037.0,
        "cost_usd": 0.002468,
    },
    "steps": [
        step(0, "frontier-anthropic", "frontier", 200, None),
        step(1, "local", "local", 200, None),
        step(2, "frontier-anthropic", "frontier", 502, "upstream_error"),
    ],
}


@pytest.mark.parametrize("width", [WIDTH, 100, 160])
def test_an_episode_is_whole_at_any_width_from_80(width: int) -> None:
    text = render(lambda c: print_episode(EPISODE, c), width)
    assert_whole(text, width)
    for cell in (
        "frontier-anthropic",
        "anthropic/claude-haiku-4-5",
        "switchyard-local",
        "12345.7",
        "0.001234",
        "502",
        "upstream_error",
        "answer",
        "tool result",
        "def main():",
        "[invalid: bad path]",
    ):
        assert shown_whole(cell, text), (cell, text)
    assert "verdict: accepted: all 8 tests pass" in text


def test_a_wide_terminal_gets_a_column_per_step_field() -> None:
    text = render(lambda c: print_episode(EPISODE, c), 160)
    header = next(line for line in text.splitlines() if "answer" in line)
    for column in ("#", "target", "model", "status", "ms", "cost $", "tool result"):
        assert column in header


def arm(share: float) -> ArmReport:
    return ArmReport(
        requests=1000,
        local_share=share,
        accept_rate=0.8765,
        cost_per_1k_usd=123.456,
        latency_p50_ms=98765.0,
    )


def test_the_replay_report_fits_80_columns() -> None:
    from rl_loop.replay import format_reports

    classes = {"*": arm(0.5), "rename|tools": arm(1.0), "a-very-long-task-family|tools": arm(0.0)}
    current = ReplayReport("demo-v1+unfitted", arm(0.0), dict(classes))
    candidate = ReplayReport("demo-v1+fit-20261201T000000Z-candidate", arm(1.0), classes)
    text = format_reports(current, candidate)
    assert_whole(text)
    assert "demo-v1+fit-20261201T000000Z-candidate" in text
    assert "a-very-long-task-family|tools" in text
    assert text.count("100%") == 3 and " 123.5 " in text and " 98765" in text
