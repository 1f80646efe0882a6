"""``make bench-kv``'s report: the summary JSON of every part and the verdict on each of the
issue's targets, per part that measures it (``loadtests/bench/kv/run.py`` runs the parts)."""

from __future__ import annotations

from loadtests.kv.gateway_replay import RealResult
from loadtests.kv.replica_sim import SeedRuns, SimResult

OURS = "cache_aware"  # the report name of the policy judged against the baselines


# The targets (docs/kv_routing.md, "The benchmark's sizing", and router/cache_aware.py).
TARGET_HIT_VS_ROUND_ROBIN = 2.0  # at least this times round-robin's hit rate
TARGET_HIT_VS_AFFINITY_POINTS = -5.0  # at most 5 points below session affinity's
TARGET_MAX_MEAN_LOAD = 1.25
TARGET_TTFT_VS_ROUND_ROBIN = 3.0  # near saturation, in the simulation
TARGET_DECISION_US = 100.0  # per request at 64 replicas


def _check(value: float, met: bool) -> dict[str, object]:
    return {"value": round(value, 3), "met": met}


def targets(
    real: dict[str, dict[str, RealResult]],
    sim: dict[int, dict[float, dict[str, SimResult]]],
    cost: dict[str, float],
    seeds: dict[str, SeedRuns] | None = None,
) -> dict[str, dict[str, dict[str, object]]]:
    """Each target of the benchmark, per part that measures it: the value and whether it is
    met. Parts: ``real_<shape>`` (2 vLLM replicas), ``sim2_<shape>`` (2 simulated replicas,
    means over the trace seeds), ``sim<n>`` (the scale part at n replicas, its worst load
    level)."""
    hit_ratio: dict[str, dict[str, object]] = {}
    hit_points: dict[str, dict[str, object]] = {}
    balance: dict[str, dict[str, object]] = {}

    def add(part: str, rows: list[tuple[float, float, float, float]]) -> None:
        """``rows``: (ours, round-robin, session affinity hit rates, ours' max/mean load)."""
        ratio = min(o / rr if rr else float("inf") for o, rr, _, _ in rows)
        points = min(100 * (o - sa) for o, _, sa, _ in rows)
        max_mean = max(m for *_, m in rows)
        hit_ratio[part] = _check(ratio, ratio >= TARGET_HIT_VS_ROUND_ROBIN)
        hit_points[part] = _check(points, points >= TARGET_HIT_VS_AFFINITY_POINTS)
        balance[part] = _check(max_mean, max_mean <= TARGET_MAX_MEAN_LOAD)

    def hits(
        row: dict[str, SimResult] | dict[str, RealResult],
    ) -> tuple[float, float, float, float]:
        return (row[OURS].hit_rate, row["round_robin"].hit_rate,
                row["session_affinity"].hit_rate, row[OURS].max_mean_requests)  # fmt: skip

    for shape, policies_run in real.items():
        add(f"real_{shape}", [hits(policies_run)])
    for shape, runs in (seeds or {}).items():
        add(f"sim2_{shape}", [(runs.mean_hit(OURS), runs.mean_hit("round_robin"),
                               runs.mean_hit("session_affinity"),
                               max(r.max_mean_requests for r in runs.runs[OURS]))])  # fmt: skip
    for size, levels in sorted(sim.items()):
        add(f"sim{size}", [hits(row) for row in levels.values()])
    out: dict[str, dict[str, dict[str, object]]] = {
        "hit_rate_vs_round_robin": hit_ratio,
        "hit_rate_minus_session_affinity_points": hit_points,
        "max_mean_load": balance,
    }
    if sim:
        ttft: dict[str, dict[str, object]] = {}
        for size, levels in sorted(sim.items()):
            margin = min(
                r.ttft_p90_s / row[OURS].ttft_p90_s
                for row in levels.values() for k, r in row.items()
                if k not in (OURS, "cache_aware_precise")
            )  # fmt: skip
            ttft[f"sim{size}_worst_ratio_to_a_baseline"] = _check(margin, margin > 1.0)
            f = near_saturation(levels)
            rr = levels[f]["round_robin"].ttft_p90_s / levels[f][OURS].ttft_p90_s
            ttft[f"sim{size}_x{f}_vs_round_robin"] = _check(rr, rr >= TARGET_TTFT_VS_ROUND_ROBIN)
        out["ttft_p90"] = ttft
    decision: dict[str, dict[str, object]] = {}
    for name in ("decision_us_p50", "decision_us_p99"):
        if name in cost:
            decision[f"synthetic_{name}"] = _check(cost[name], cost[name] < TARGET_DECISION_US)
    if sim and max(sim) >= 64:
        for f, row in sorted(sim[max(sim)].items()):
            for q, value in (
                ("p50", row[OURS].decision_us_p50),
                ("p99", row[OURS].decision_us_p99),
            ):
                decision[f"sim{max(sim)}_x{f}_{q}"] = _check(value, value < TARGET_DECISION_US)
    out["decision_us"] = decision
    return out


def near_saturation(levels: dict[float, dict[str, SimResult]]) -> float:
    """The first load level where round-robin's TTFT p90 has left its floor (5x its p90 at the
    lightest level): its replicas are saturating there (the last level if none)."""
    order = sorted(levels)
    light = levels[order[0]]["round_robin"].ttft_p90_s
    return min((f for f in order if levels[f]["round_robin"].ttft_p90_s >= 5 * light),
               default=order[-1])  # fmt: skip


def summary(
    real: dict[str, dict[str, RealResult]],
    sim: dict[int, dict[float, dict[str, SimResult]]],
    cost: dict[str, float],
    seeds: dict[str, SeedRuns] | None = None,
) -> dict[str, object]:
    out: dict[str, object] = {"selector_cost": {k: round(v, 2) for k, v in cost.items()}}
    if seeds is not None:
        out["seeds"] = {shape: runs.summary(OURS) for shape, runs in seeds.items()}
    if real:
        out["real"] = {
            shape: {k: {"hit_rate": round(v.hit_rate, 4),
                        "ttft_p90_ms": round(v.ttft_p90_s * 1e3, 1),
                        "ttft_p50_ms": round(v.ttft_p50_s * 1e3, 1),
                        "max_mean_load": round(v.max_mean_requests, 3),
                        "throughput_rps": round(v.throughput_rps, 3), "errors": v.errors}
                    for k, v in runs.items()}
            for shape, runs in real.items()
        }  # fmt: skip
        # The gateway's KV event subscriber in precise mode (catch-up and gap repair by replay).
        out["real_kv_events"] = {
            shape: {k: v.kv_events for k, v in runs.items() if v.kv_events}
            for shape, runs in real.items()
        }
        out["real_ratios"] = {
            shape: {k: {"hit_rate": round(runs[OURS].hit_rate / v.hit_rate, 3)
                        if v.hit_rate else None,
                        "ttft_p90": round(v.ttft_p90_s / runs[OURS].ttft_p90_s, 3)}
                    for k, v in runs.items() if k != OURS}
            for shape, runs in real.items()
        }  # fmt: skip
    if sim:
        n = max(sim)
        out["sim"] = {
            str(size): {
                f"x{f}": {k: {"hit_rate": round(v.hit_rate, 4), "ttft_p90_ms": round(
                    v.ttft_p90_s * 1e3, 1), "max_mean_requests": round(v.max_mean_requests, 3)}
                    for k, v in sim[size][f].items()}
                for f in sorted(sim[size])
            }
            for size in sorted(sim)
        }  # fmt: skip
        # Ours' own cost inside the simulation (the trace's real prompts; wall clock, so it
        # includes whatever else this box runs): the choice, and hashing apart.
        out["sim_decision_us"] = {
            f"x{f}": {"choice_p50": round(sim[n][f][OURS].decision_us_p50, 1),
                      "choice_p99": round(sim[n][f][OURS].decision_us_p99, 1),
                      "hashing_p50": round(sim[n][f][OURS].hash_us_p50, 1)}
            for f in sorted(sim[n])
        }  # fmt: skip
        wins = all(
            sim[size][f][OURS].ttft_p90_s < r.ttft_p90_s
            for size in sim for f in sim[size] for k, r in sim[size][f].items()
            if k not in (OURS, "cache_aware_precise")
        )  # fmt: skip
        near = near_saturation(sim[n])
        at = sim[n][near]
        out["sim_ratios"] = {
            "replicas": n,
            "load_factor": near,
            "ttft_p90_vs": {k: round(v.ttft_p90_s / at[OURS].ttft_p90_s, 2)
                            for k, v in at.items() if k != OURS},
            "ours_best_everywhere": wins,
        }  # fmt: skip
    out["targets"] = targets(real, sim, cost, seeds)
    return out
