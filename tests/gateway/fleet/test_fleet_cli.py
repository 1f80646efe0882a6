"""``switchyard fleet``: status, drain and undrain through any one gateway act on the fleet."""

from __future__ import annotations

import json

import pytest

from gateway.cli import main
from serving.names import ADMIN_TOKEN_ENV
from tests.gateway.fleet.harness import ADMIN_TOKEN, Fleet

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def test_drain_and_undrain_from_the_command_line_reach_every_gateway(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    replica = fleet.replicas[1]
    assert main(["fleet", "status", "--gateway", fleet.urls[0]]) == 0
    status = json.loads(capsys.readouterr().out)
    assert len(status["members"]) == len(fleet.gateways)
    drain = ["fleet", "drain", "--gateway", fleet.urls[1], "--replica", replica, "--timeout-s", "5"]
    assert main(drain) == 0
    assert json.loads(capsys.readouterr().out)["drained"] is True
    for gateway in fleet.gateways:
        assert {r["replica"]: r["drained"] for r in gateway.fleet()["replicas"]}[replica]
    assert main(["fleet", "undrain", "--gateway", fleet.urls[2], "--replica", replica]) == 0
    capsys.readouterr()
    for gateway in fleet.gateways:
        assert not {r["replica"]: r["drained"] for r in gateway.fleet()["replicas"]}[replica]


def test_without_the_admin_token_nothing_is_sent(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
    assert main(["fleet", "status", "--gateway", fleet.urls[0]]) == 2
    assert ADMIN_TOKEN_ENV in capsys.readouterr().err
