"""Cache-aware replica choice wired through the gateway: the served model's tokenizer hashes
each prompt into vLLM's blocks, and requests sharing a long prefix land on the replica that
already holds it, while other prefixes spread (two simulator replicas stand in for vLLM here;
the hit rates on real vLLM are in tests/gateway/test_kv_aware_vllm.py and `make bench-kv`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest

from loadtests.frontier_sim import SimulatorConfig, run_in_thread
from serving.build import ensure_demo_model
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.fixtures.vllm_fixture import cache_dir


@pytest.fixture(scope="module")
def two_replicas():  # type: ignore[no-untyped-def]
    sims = [run_in_thread(SimulatorConfig()) for _ in range(2)]
    yield sims
    for s in sims:
        s.stop()


def test_shared_prefixes_stick_to_one_replica_and_distinct_ones_spread(two_replicas: Any) -> None:
    model_dir = ensure_demo_model(cache_dir())
    urls = [s.base_url for s in two_replicas]
    cfg = gateway_config(
        urls[0],
        backends={
            "local": {
                "kind": "vllm",
                "model": "sim-local",
                "replicas": urls,
                "tokenizer_dir": str(model_dir),
                "replica_selector": {"kind": "cache_aware", "block_size": 32},
            },
        },
        routing={"default": "local", "aliases": {"auto": None}},
    )
    gw = GatewayThread(cfg).start()
    # The tokenizer loads in the background after start-up; until then choice is by load alone.
    assert gw.state.targets.tokenizers[str(model_dir)].wait(60)
    try:
        placed: dict[str, Counter[str]] = {}
        for repo in range(6):
            context = f"# repository {repo}\n" + "".join(
                f"def helper_{repo}_{i}(x):\n    return x * {i} + {repo}\n" for i in range(60)
            )
            for turn in range(4):
                body = {
                    "model": "auto",
                    "messages": [
                        {"role": "system", "content": "You are a coding assistant.\n" + context},
                        {"role": "user", "content": f"turn {turn}: explain helper_{repo}_{turn}"},
                    ],
                }
                r = httpx.post(gw.base_url + "/v1/chat/completions", json=body, timeout=30)
                assert r.status_code == 200
                placed.setdefault(str(repo), Counter())[r.headers["x-switchyard-replica"]] += 1
    finally:
        gw.stop()
    # every repository's turns after the first go where its prefix already is
    sticky = sum(max(c.values()) for c in placed.values())
    assert sticky >= 6 * 3
    used = Counter(rep for c in placed.values() for rep in c.elements())
    assert len(used) == 2  # both replicas serve some repositories
