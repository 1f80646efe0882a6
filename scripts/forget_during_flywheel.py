"""`python scripts/forget_during_flywheel.py`: forget a user's key while a flywheel run is under
way, then check that nothing of it is left and that the run did not notice.

1. Starts ``scripts/flywheel.py`` in a child process (the smoke preset unless ``FLYWHEEL_QUICK``
   is set; ``FLYWHEEL_SEED`` passes through), its output in ``$FLYWHEEL_DIR/forget-<time>/``.
2. Once its gateway is up: creates an API key in the run's store (``switchyard keys create``)
   and sends that user's IDE traffic with it (``loadtests.ide_client``: the key, the oracle
   registration and the feedback a real plugin posts) beside the flywheel's own users while
   round 0 runs, so round 0's training may learn from it. The user's request ids are the
   client's bookkeeping, never sent.
3. When round 0 has shipped (a candidate trained, gated, promoted or refused) and round 1's
   traffic flows, ``switchyard traffic forget --key`` on the live store, its spool and the run's
   folder as export root. Before, the lineage says which datasets and checkpoints used the key's
   records (``traffic.export.lineage_store.records_uses``).
4. When the run has ended, checks (each a JSON field, all in ``ok``):
   - the flywheel exited 0 with 0 failed client requests (its summary's ``failed_requests``);
   - 0 rows of the key, and 0 feedback or shadow rows of its requests, in the store;
   - no spool segment or dead letter holds one of its request ids (text or 16-byte form);
   - no dataset file the lineage linked to its records still holds one of its ids, nor the
     export a trainer pulled after the key's traffic (``switchyard traffic export`` to the run's
     ``exports/``: it held some before);
   - every checkpoint that used them is tainted, and ``refuse_tainted`` refuses each;
   - the audit log has the forget (action ``traffic.forget``, the key as subject, no prompt).
The last line is one JSON object. The store is SQLite: the flywheel's; PostgreSQL forgetting is
tested in ``tests/traffic``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from loadtests.ide_client import IdeClientConfig, run_ide_client  # noqa: E402
from rl_loop.model_registry import TaintedCheckpoint, refuse_tainted  # noqa: E402
from traffic.export.lineage_store import RecordsUses, records_uses  # noqa: E402
from traffic.store import StoreBackend, StoreConfig, open_store  # noqa: E402
from traffic.store.console_queries import changes  # noqa: E402
from traffic.store.forgetting import taints  # noqa: E402

CACHE = Path(os.environ.get("SWITCHYARD_CACHE", REPO / ".cache"))
SIDE_REQUESTS = 16  # the forgotten user's requests during round 0
UP = re.compile(r"up in \d+s; gateway (http://\S+)")
WAIT_S = 1800.0


async def _switchyard(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("switchyard")
    return await asyncio.to_thread(
        subprocess.run, [str(exe), *args], capture_output=True, text=True, check=False
    )


async def _wait_for(log: Path, pattern: str, child: subprocess.Popen[bytes]) -> str:
    """The first line of ``log`` matching ``pattern`` (raises if the child ends first)."""
    deadline = time.monotonic() + WAIT_S
    rx = re.compile(pattern)
    while time.monotonic() < deadline:
        text = await asyncio.to_thread(_read, log)
        found = next((line for line in text.splitlines() if rx.search(line)), None)
        if found:
            return found
        if child.poll() is not None:
            raise RuntimeError(f"the flywheel ended ({child.returncode}) before {pattern!r}")
        await asyncio.sleep(0.5)
    raise TimeoutError(pattern)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _holds(folder: Path, ids: list[str]) -> list[str]:
    """Files at or under ``folder`` holding any of ``ids`` (text or 16-byte form)."""
    needles = [i.encode() for i in ids] + [uuid.UUID(i).bytes for i in ids]
    hits = []
    for path in [folder] if folder.is_file() else folder.rglob("*") if folder.exists() else ():
        if path.is_file() and any(n in path.read_bytes() for n in needles):
            hits.append(str(path))
    return hits


def start(out: Path) -> subprocess.Popen[bytes]:
    """The flywheel run, its output in ``out/flywheel.log``."""
    env = {**os.environ, "FLYWHEEL_DIR": str(out)}
    if not env.get("FLYWHEEL_QUICK"):
        env["FLYWHEEL_SMOKE"] = "1"
    with (out / "flywheel.log").open("w") as sink:
        return subprocess.Popen(
            [sys.executable, str(REPO / "scripts" / "flywheel.py")],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


async def _drive(out: Path, log: Path, child: subprocess.Popen[bytes]) -> dict[str, Any]:
    match = UP.search(await _wait_for(log, UP.pattern, child))
    assert match is not None
    gateway = match.group(1)
    run_dir = max(await asyncio.to_thread(lambda: list(out.glob("run-*"))))
    cfg = yaml.safe_load(await asyncio.to_thread(_read, run_dir / "switchyard.yaml"))
    store_url, spool = cfg["store"]["url"], Path(cfg["store"]["spool_dir"])
    sim = cfg["backends"]["frontier"]["api_base"].removesuffix("/v1")
    made = await _switchyard("keys", "create", "--name", "forget-me", "--store", store_url)
    fields = dict(line.split(":", 1) for line in made.stdout.splitlines() if ":" in line)
    key_id, secret = fields["id"].strip(), fields["key"].strip()
    side = await run_ide_client(
        IdeClientConfig(
            base_url=gateway,
            n=SIDE_REQUESTS,
            seed=4242,
            concurrency=2,
            max_tokens=48,
            oracle_url=sim,
            api_key=secret,
        )
    )
    side_ids = sorted(side.sent)
    exports = run_dir / "exports"  # a trainer's pull of the record, as the key's rows stand
    exported = await _switchyard(
        "traffic", "export", "--store", store_url, "--kind", "sft",
        "--out", str(exports / "sft"), "--format", "jsonl,parquet",
    )  # fmt: skip
    holding = await asyncio.to_thread(_holds, exports, side_ids)
    await _wait_for(log, r"round 0 shipped", child)
    store = open_store(StoreConfig(url=store_url))
    await store.connect()
    try:
        used = await records_uses(store, side_ids)
        asked = [
            json.dumps(r.inference.request)[-200:]
            async for r in store.iter_inferences()
            if r.inference.id in set(side_ids)
        ]
        forgot = await _switchyard(
            "traffic", "forget", "--key", key_id, "--store", store_url,
            "--spool-dir", str(spool), "--export-root", str(run_dir),
        )  # fmt: skip
        forgot_at = datetime.now(UTC).isoformat()
        code = await asyncio.to_thread(child.wait, WAIT_S)
        summary = json.loads((await asyncio.to_thread(_read, log)).strip().splitlines()[-1])
        checks = await _checks(store, key_id, side_ids, spool, used, asked)
    finally:
        await store.close()
    report = json.loads(forgot.stdout) if forgot.returncode == 0 else {"error": forgot.stderr}
    result = {
        "run_dir": str(run_dir),
        "side_requests": len(side_ids),
        "side_errors": side.total().errors,
        "forget_exit": forgot.returncode,
        "forget_at": forgot_at,
        "forget_report": report,
        "flywheel_exit": code,
        "flywheel_failed_requests": summary.get("failed_requests"),
        "side_ids": side_ids,
        "export_exit": exported.returncode,
        "exports_holding_key_before": holding,
        "left_export_root": await asyncio.to_thread(_holds, exports, side_ids),
        "datasets_using_key": [r.id for r, _, _ in used.datasets],
        **checks,
    }
    result["ok"] = bool(
        code == 0
        and forgot.returncode == 0
        and summary.get("failed_requests") == 0
        and side.total().errors == 0
        and exported.returncode == 0
        and bool(holding)
        and not result["left_export_root"]
        and all(v == 0 or v == [] for k, v in checks.items() if k.startswith("left_"))
        and checks["refused"] == checks["tainted_expected"]
        and checks["audit_entries"] == 1
        and not checks["audit_holds_content"]
        and len(checks["recorded_before"]) == len(side_ids)
    )
    return result


async def _checks(
    store: StoreBackend,
    key_id: str,
    ids: list[str],
    spool: Path,
    used: RecordsUses,
    asked: list[str],
) -> dict[str, Any]:
    """What is left of the key after the run (module docstring, step 4); ``asked``: the ends of
    its requests' bodies as recorded before the forget (the audit entry must hold none)."""
    rows = [r async for r in store.iter_inferences(with_shadows=True)]
    mine = [r for r in rows if r.inference.id in set(ids)]
    expected = sorted({*used.trained, *used.inherited})
    tainted = {t.model_version_id for t in await taints(store)}
    refused = []
    for version in expected:
        try:
            await refuse_tainted(store, version)
        except TaintedCheckpoint:
            refused.append(version)
    files = sorted({loc for _, _, locs in used.datasets for loc in locs})
    left_exports = [f for f in files if await asyncio.to_thread(_holds, Path(f), ids)]
    audit = await changes(store, action_prefix="traffic.forget", limit=100)
    return {
        "left_rows": sum(r.inference.api_key_id == key_id for r in rows) + len(mine),
        "left_feedback": sum(len(r.feedback) for r in mine),
        "left_shadows": sum(len(r.shadows) for r in mine),
        "left_spool": _holds(spool, ids),
        "left_exports": left_exports,
        "recorded_before": asked,
        "tainted_expected": expected,
        "tainted_missing": sorted(set(expected) - tainted),
        "refused": sorted(refused),
        "audit_entries": sum(c.subject == f"key:{key_id}" for c in audit),
        "audit_holds_content": any(a in json.dumps(c.detail) for c in audit for a in asked),
    }


def main() -> int:
    base = Path(os.environ.get("FLYWHEEL_DIR", CACHE / "flywheel"))
    out = base / f"forget-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    out.mkdir(parents=True)
    print(f"[forget-during-flywheel] output {out}", flush=True)
    child = start(out)
    try:
        result = asyncio.run(_drive(out, out / "flywheel.log", child))
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait(timeout=120)
    (out / "forget.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
