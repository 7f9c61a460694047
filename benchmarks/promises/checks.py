"""Each plan's printed numbers against an independent path (README.md in this folder lists the checks).

Everything goes through the command line, as a user's script would: ``solve --json`` for the plan, then
``evaluate`` of its layout, ``validate`` of its DAG, ``solve --emit``, separate solves per serving mode and
``enumerate``. The expectations are hand formulas (Little's law, KV bytes per prompt), the limits asked,
and the other commands' answers; nothing here imports the cost model.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

from shardplan.solver.outputs.report import pool_spec

from .problems import opt, run, without

# Sliding-window layers of the presets (layers, window in tokens): their cache stops at the window.
WINDOWS = {"gpt-oss-120b": (18, 128), "mistral-7b": (32, 4096)}
# Each engine's launch options for the degrees (colocated and disaggregated commands alike).
EMIT = {
    "vllm": {"tp": r"--tensor-parallel-size (\d+)", "pp": r"--pipeline-parallel-size (\d+)",
             "dp": r"--data-parallel-size (\d+)"},
    "sglang": {"tp": r"--tp-size (\d+)", "pp": r"--pp-size (\d+)", "ep": r"--ep-size (\d+)"},
    "trtllm": {"tp": r"--tp_size (\d+)", "pp": r"--pp_size (\d+)", "ep": r"--ep_size (\d+)"},
}
METRICS = ["ttft_ms", "tpot_ms", "decode_step_ms", "e2e_ms", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
           "output_tokens_per_s_per_user", "batch", "requests_per_s", "request_overhead_ms", "waiting_ms",
           "admission_ms", "bottleneck"]
PLANNED = ("optimal", "feasible")


@dataclass
class Tally:
    """Pass and fail counts per check, and every failure with its problem."""

    counts: dict[str, list[int]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)

    def check(self, name: str, ok: bool, where: dict[str, Any], detail: str = "") -> None:
        self.counts.setdefault(name, [0, 0])[0 if ok else 1] += 1
        if not ok:
            self.failures.append({"check": name, "detail": detail, **where})


def _timeless(data: Any) -> Any:
    """``data`` without its ``solve_time_s`` keys (at any depth): the one field two runs may differ in."""
    if isinstance(data, dict):
        return {k: _timeless(v) for k, v in data.items() if k != "solve_time_s"}
    return [_timeless(v) for v in data] if isinstance(data, list) else data


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def _stages(stages: list[dict[str, Any]]) -> str:
    return ",".join(f"{s['layers'][0]}:{s['layers'][1]}" for s in stages)


def _pool(pool: dict[str, Any], workers: int | None = None) -> str:
    """The pool as the human view prints it for ``--prefill``/``--decode`` (its batch limit included: it names the
    bottleneck), with ``workers`` replaced and its stage boundaries pinned."""
    spec = pool_spec({**pool, "workers": workers or pool["workers"]})
    return f"{spec},stages={_stages(pool['stages'])}"


def evaluate_argv(base: list[str], plan: dict[str, Any], disagg: bool) -> list[str]:
    """``evaluate`` of the plan's own layout and concurrency."""
    if disagg:
        return ["evaluate", *base, "--serving", "disagg", "--prefill", _pool(plan["prefill"]),
                "--decode", _pool(plan["decode"]), "--batch", str(plan["metrics"]["batch"]), "--json"]
    d = plan["degrees"]
    return ["evaluate", *base, *(x for k in ("dp", "pp", "tp", "sp", "ep") for x in (f"--{k}", str(d[k]))),
            "--attn-dp", str(d["attn_dp"]), "--stages", _stages(plan["stages"]),
            "--batch", str(plan["metrics"]["batch"]), "--json"]


def _memories(plan: dict[str, Any], disagg: bool) -> list[dict[str, Any]]:
    if disagg:
        return [m for role in ("prefill", "decode") for m in plan[role]["memory_per_stage"]]
    return list(plan["memory_per_stage"])


def reproduce(t: Tally, where: dict[str, Any], plan: dict[str, Any], ev: dict[str, Any], disagg: bool) -> None:
    """1. evaluate of the layout prints the plan's metrics and memory exactly, and no violation."""
    bad = [f"{k} {plan['metrics'][k]} vs {ev['metrics'].get(k)}" for k in METRICS
           if k in plan["metrics"] and plan["metrics"][k] != ev["metrics"].get(k)]
    t.check("1 evaluate: same metrics", not bad, where, "; ".join(bad))
    same = _memories(plan, disagg) == _memories(ev, disagg)
    t.check("1 evaluate: same memory", same, where, f"{_memories(plan, disagg)} vs {_memories(ev, disagg)}"[:600])
    t.check("1 evaluate: no violation", ev.get("violations") == [], where, json.dumps(ev.get("violations"))[:400])


def limits(t: Tally, where: dict[str, Any], args: list[str], plan: dict[str, Any], disagg: bool, whose: str) -> None:
    """2. the limits asked hold: TTFT, TPOT, memory per GPU within its limit and the cap, GPUs."""
    m, bad = plan["metrics"], []
    ttft, tpot, cap = opt(args, "--ttft-ms"), opt(args, "--tpot-ms"), opt(args, "--mem-cap-gib")
    if ttft and m["ttft_ms"] > float(ttft):
        bad.append(f"TTFT {m['ttft_ms']} > {ttft}")
    if tpot and m["tpot_ms"] > float(tpot):
        bad.append(f"TPOT {m['tpot_ms']} > {tpot}")
    for mem in _memories(plan, disagg):
        if mem["total"] > mem["limit"] or (cap and mem["limit"] > float(cap)):
            bad.append(f"memory {mem['total']} of limit {mem['limit']} (cap {cap})")
    nodes, per_node, _ = (opt(args, "--cluster") or "").split("x")
    if plan["num_gpus"] > int(nodes) * int(per_node):
        bad.append(f"{plan['num_gpus']} GPUs")
    t.check(f"2 limits hold ({whose})", not bad, where, "; ".join(bad))


def littles_law(t: Tally, where: dict[str, Any], args: list[str], plan: dict[str, Any], disagg: bool) -> None:
    """4. e2e = TTFT + (OSL - 1) x TPOT; tokens/s = replicas x in flight x OSL / e2e; per GPU, per user; and
    (disaggregated) the TTFT's printed parts add up to it."""
    m, osl, bad = plan["metrics"], int(opt(args, "--osl") or 0), []
    if _rel(m["e2e_ms"], m["ttft_ms"] + (osl - 1) * m["tpot_ms"]) > 1e-5:
        bad.append(f"e2e {m['e2e_ms']} vs {m['ttft_ms'] + (osl - 1) * m['tpot_ms']}")
    replicas = 1 if disagg else plan["degrees"]["dp"]
    if _rel(m["output_tokens_per_s"], replicas * m["batch"] * osl / (m["e2e_ms"] / 1e3)) > 1e-4:
        bad.append(f"tokens/s {m['output_tokens_per_s']} vs {replicas * m['batch'] * osl / (m['e2e_ms'] / 1e3)}")
    if _rel(m["output_tokens_per_s_per_gpu"], m["output_tokens_per_s"] / plan["num_gpus"]) > 1e-4:
        bad.append(f"per GPU {m['output_tokens_per_s_per_gpu']}")
    if m["output_tokens_per_s_per_user"] is not None and _rel(m["output_tokens_per_s_per_user"],
                                                              1e3 / m["tpot_ms"]) > 1e-4:
        bad.append(f"per user {m['output_tokens_per_s_per_user']}")
    if m["tpot_ms"] < m["decode_step_ms"]:
        bad.append("TPOT below the decode step")
    if disagg:
        if _rel(m["requests_per_s"] * osl, m["output_tokens_per_s"]) > 1e-4:
            bad.append(f"requests/s {m['requests_per_s']} x OSL vs tokens/s")
        kv = plan["kv_transfer"]
        parts = (m.get("request_overhead_ms", 0.0) + m["waiting_ms"] + plan["prefill"]["prefill_ms"]
                 + kv["transfer_ms"] + kv["relayout_ms"] + m["admission_ms"])
        if abs(parts - m["ttft_ms"]) > 1e-3:
            bad.append(f"TTFT {m['ttft_ms']} vs its parts {parts}")
    t.check("4 Little's law", not bad, where, "; ".join(bad))


def kv_bytes(t: Tally, where: dict[str, Any], args: list[str], plan: dict[str, Any],
             presets: dict[str, tuple[int, int]]) -> None:
    """The KV transfer moves ISL x KV bytes per token (windowed layers to their window; FP8 half)."""
    model = opt(args, "--model") or ""
    layers, per_token = presets[model]
    per_layer = per_token / layers * (0.5 if opt(args, "--kv-dtype") == "fp8" else 1)
    isl = int(opt(args, "--isl") or 0)
    windowed, window = WINDOWS.get(model, (0, 0))
    want = per_layer * ((layers - windowed) * isl + windowed * min(isl, window))
    got = plan["kv_transfer"]["bytes_per_prompt"]
    t.check("4 KV bytes per prompt", abs(got - want) <= 1e-6 * want, where, f"{got} vs {want}")


def rate_kept(t: Tally, where: dict[str, Any], args: list[str], plan: dict[str, Any], disagg: bool) -> None:
    """3. the rate is carried, and one fewer replica (colocated, at full load) or worker (either pool, at its
    capacity) would not carry it."""
    rate, osl, m = float(opt(args, "--rate") or 0), int(opt(args, "--osl") or 0), plan["metrics"]
    rps = m["requests_per_s"] if disagg else m["output_tokens_per_s"] / osl
    t.check("3 rate carried", rps >= rate, where, f"{rps} < {rate}")
    if disagg:
        fewer = [f"{role}: {p['workers'] - 1} workers carry {p['capacity_rps'] * (p['workers'] - 1) / p['workers']}"
                 for role in ("prefill", "decode") if (p := plan[role])["workers"] > 1
                 and p["capacity_rps"] * (p["workers"] - 1) / p["workers"] >= rate]
        t.check("3 one fewer worker falls short (capacity)", not fewer, where, "; ".join(fewer))
    else:
        dp = plan["degrees"]["dp"]
        t.check("3 one fewer replica falls short", dp == 1 or rps * (dp - 1) / dp < rate, where,
                f"{dp - 1} replicas carry {rps * (dp - 1) / dp}")


def _smallest_carrying(base: list[str], prefill: str, decode: str, rate: float, start: int) -> tuple[int | None, Any]:
    """The fewest requests in flight at which ``evaluate`` carries ``rate`` (the rate grows with them), or None
    when a pool's top binds first; with that evaluation."""
    def at(c: int) -> dict[str, Any]:
        out = run(["evaluate", *base, "--serving", "disagg", "--prefill", prefill, "--decode", decode,
                   "--batch", str(c), "--json"])[1]
        return dict(json.loads(out))

    lo, hi, data = 1, start, at(start)
    while data["metrics"]["requests_per_s"] < rate:
        if data["metrics"]["bottleneck"] != "concurrency" or hi > 10**6:
            return None, data
        lo, hi = hi + 1, hi * 2
        data = at(hi)
    while lo < hi:
        mid = (lo + hi) // 2
        if at(mid)["metrics"]["requests_per_s"] >= rate:
            hi = mid
        else:
            lo = mid + 1
    return hi, at(hi)


def rate_neighbours(t: Tally, where: dict[str, Any], args: list[str], plan: dict[str, Any]) -> None:
    """3. (disaggregated) the plan runs the fewest requests in flight that carry the rate, and with one
    fewer worker in either pool no number in flight carries it within the limits (evaluate, bisection)."""
    rate, base = float(opt(args, "--rate") or 0), without(args, "--serving", "--rate", "--objective")
    own, _ = _smallest_carrying(base, _pool(plan["prefill"]), _pool(plan["decode"]), rate, plan["metrics"]["batch"])
    t.check("3 fewest in flight at the rate", own == plan["metrics"]["batch"], where,
            f"plan {plan['metrics']['batch']} in flight, evaluate's fewest {own}")
    for role in ("prefill", "decode"):
        if plan[role]["workers"] == 1:
            continue
        pools = {r: _pool(plan[r], plan[r]["workers"] - 1 if r == role else None) for r in ("prefill", "decode")}
        c, data = _smallest_carrying(base, pools["prefill"], pools["decode"], rate, plan["metrics"]["batch"])
        carried = data["metrics"]["requests_per_s"]
        t.check("3 one fewer worker falls short (evaluate)", c is None or data["violations"] != [], where,
                f"{role} {plan[role]['workers'] - 1} workers carry {carried} at {c} in flight")


def launch(t: Tally, where: dict[str, Any], engine: str, text: str, plan: dict[str, Any], disagg: bool) -> None:
    """5. the launch commands carry each pool's (or replica's) degrees in the engine's option names."""
    bad = []
    blocks = re.split(r"\n# (?=(?:prefill |decode )?(?:replica|deployment|worker) \d)", text)
    for role, pool in ([("prefill", plan["prefill"]), ("decode", plan["decode"])] if disagg else [("", plan)]):
        d = pool["degrees"]
        mine = [b for b in blocks if (b.startswith(role) if disagg else re.match(r"(replica|deployment) \d", b))]
        if not mine:
            bad.append(f"{role}: no launch command")
            continue
        got = {k: int(v.group(1)) for k, pattern in EMIT[engine].items() if (v := re.search(pattern, mine[0]))}
        if got.get("pp") != d["pp"]:
            bad.append(f"{role} pp {got.get('pp')} vs {d['pp']}")
        if engine == "vllm":  # tp per attention group; --data-parallel-size counts attention ranks (and replicas)
            if got.get("tp") not in (d["tp"], d["tp"] * d["sp"]) or got.get("dp", 1) % d["attn_dp"]:
                bad.append(f"{role} {got} vs {d}")
            if d["ep"] > 1 and "--enable-expert-parallel" not in mine[0]:
                bad.append(f"{role} ep {d['ep']} without --enable-expert-parallel")
        else:  # tp over the stage's GPUs; attention DP and EP by their own options
            if got.get("tp") != d["tp"] * d["sp"] * d["attn_dp"] or (d["ep"] > 1 and got.get("ep") != d["ep"]):
                bad.append(f"{role} {got} vs {d}")
            if engine == "sglang" and d["attn_dp"] > 1 and f"--attn-dp-size {d['attn_dp']}" not in mine[0]:
                bad.append(f"{role} attn_dp {d['attn_dp']} without --attn-dp-size")
            if engine == "trtllm" and d["attn_dp"] > 1 and "enable_attention_dp: true" not in text:
                bad.append(f"{role} attn_dp {d['attn_dp']} without enable_attention_dp: true")
    t.check("5 launch commands carry the degrees", not bad, where, "; ".join(bad))


def both_modes(t: Tally, where: dict[str, Any], args: list[str], plan: dict[str, Any]) -> None:
    """6. auto's rows equal separate solves of each mode, its human rows print them, and it chooses the
    better (more tokens/s per GPU; with --rate, fewer GPUs)."""
    for mode in ("colocated", "disagg"):
        code, out, _ = run(["solve", *without(args, "--serving"), "--serving", mode, "--json"])
        row = {k: v for k, v in _timeless(plan["modes"][mode]).items() if k != "serving"}
        if code != 0:
            t.check("6 auto's rows = separate solves", row.get("status") not in PLANNED, where, f"{mode} exit {code}")
            continue
        alone = {k: v for k, v in _timeless(json.loads(out)).items() if k != "serving"}
        diff = sorted(k for k in set(row) | set(alone) if row.get(k) != alone.get(k))
        t.check("6 auto's rows = separate solves", not diff, {**where, "mode": mode},
                "; ".join(f"{k}: {str(row.get(k))[:120]} vs {str(alone.get(k))[:120]}" for k in diff))
    human = run(["solve", *args])[1].splitlines()
    rows = human[human.index("both modes:") + 1:] if "both modes:" in human else []
    bad, osl = [], int(opt(args, "--osl") or 0)
    for line in rows:
        mode = line.split()[0]
        data = plan["modes"].get(mode, {})
        if data.get("status") not in PLANNED:
            continue
        m = data["metrics"]
        rps = m.get("requests_per_s", m["output_tokens_per_s"] / osl)
        want = (f"{mode:<10} {data['num_gpus']:>4} GPUs  {m['output_tokens_per_s_per_gpu']:>9,.1f} tokens/s/GPU  "
                f"{m['output_tokens_per_s_per_user']:>7,.1f} tokens/s/user  TTFT {m['ttft_ms']:,.0f} ms  "
                f"TPOT {m['tpot_ms']:.1f} ms  {rps:,.2f} requests/s")
        if want not in line or ("<- chosen" in line) != (mode == plan.get("chosen")):
            bad.append(f"{line!r} vs {want!r}")
    t.check("6 auto's printed rows = its JSON", bool(rows) and not bad, where, "; ".join(bad) or "no rows")
    planned = {k: v for k, v in plan["modes"].items() if v.get("status") in PLANNED}
    if len(planned) == 2:
        c, d = planned["colocated"], planned["disagg"]
        if "--rate" in args:
            best = None if c["num_gpus"] == d["num_gpus"] else min(planned, key=lambda k: planned[k]["num_gpus"])
        else:
            best = max(planned, key=lambda k: planned[k]["metrics"]["output_tokens_per_s_per_gpu"])
        t.check("6 auto chooses the better", best in (None, plan.get("chosen")), where,
                f"chose {plan.get('chosen')}: colocated {c['num_gpus']} GPUs "
                f"{c['metrics']['output_tokens_per_s_per_gpu']}/GPU, disagg {d['num_gpus']} GPUs "
                f"{d['metrics']['output_tokens_per_s_per_gpu']}/GPU")


def _enumerated(args: list[str]) -> list[dict[str, Any]] | None:
    """Every colocated layout ``enumerate`` finds, or None when its work limit cut it short."""
    lines = [json.loads(x) for x in run(["enumerate", *args, "--jsonl", "--work-limit", "40"])[1].splitlines() if x]
    if not lines or lines[-1].get("type") != "frontier" or lines[-1]["partial"]:
        return None
    return lines[:-1]


def against_enumerate(t: Tally, where: dict[str, Any], args: list[str], plan: dict[str, Any]) -> None:
    """3 and 7. colocated: with --rate, the fewest GPUs any enumerated layout needs to carry it (replicas x its
    per-replica rate at full load) are the plan's; else, on up to 16 GPUs, no enumerated layout beats it."""
    nodes, per_node, _ = (opt(args, "--cluster") or "").split("x")
    total, osl = int(nodes) * int(per_node), int(opt(args, "--osl") or 0)
    if "--rate" in args:
        rows = _enumerated([*without(args, "--serving", "--rate", "--objective"), "--objective", "throughput"])
        if rows is None:
            return
        rate = float(opt(args, "--rate") or 0)
        needs = [math.ceil(rate / (r["metrics"]["output_tokens_per_s"] / r["degrees"]["dp"] / osl) * (1 - 1e-12))
                 * (r["num_gpus"] // r["degrees"]["dp"]) for r in rows]
        fewest = min((n for n in needs if n <= total), default=None)
        t.check("3 fewest GPUs (enumerate)", fewest == plan["num_gpus"], where,
                f"plan {plan['num_gpus']} GPUs, enumerate's fewest {fewest}")
    elif total <= 16 and opt(args, "--serving") in (None, "colocated"):
        rows = _enumerated(args)
        if rows is None or not rows:
            return
        if opt(args, "--objective") == "throughput":
            best = max(r["metrics"]["output_tokens_per_s"] for r in rows)
            ok = plan["metrics"]["output_tokens_per_s"] >= best * (1 - 1e-9)
        else:
            best = min(r["metrics"]["e2e_ms"] for r in rows)
            ok = plan["metrics"]["e2e_ms"] <= best * (1 + 1e-9)
        t.check("7 no enumerated layout beats it", ok, where, f"plan {plan['metrics']}, enumerate's best {best}")


def one_problem(t: Tally, index: int, args: list[str], presets: dict[str, tuple[int, int]]) -> None:
    """Every check on one problem's plan (and, for --serving auto, on both modes' plans)."""
    where: dict[str, Any] = {"i": index, "argv": "shardplan solve " + " ".join(args)}
    with tempfile.TemporaryDirectory() as folder:
        dag = os.path.join(folder, "plan.json")
        code, out, err = run(["solve", *args, "--json", "--dag", dag])
        if code != 0:  # infeasible (1) or bad input by design (2: context, work limit): counted, not judged
            t.check(f"0 no plan (exit {code})", True, where, err.strip()[-200:])
            return
        t.check("0 planned", True, where)
        vcode, vout, verr = run(["validate", dag, "--json"])
        t.check("5 DAG validates", vcode == 0 and json.loads(vout).get("valid") is True, where, (vout + verr)[-300:])
    plan = json.loads(out)
    serving = opt(args, "--serving") or "colocated"
    chosen = plan["chosen"] if serving == "auto" else serving
    plans = {m: p for m, p in plan["modes"].items() if p.get("status") in PLANNED} if serving == "auto" \
        else {serving: plan}
    base = without(args, "--serving", "--rate", "--objective")
    for mode, one in plans.items():
        disagg = mode == "disagg"
        here = {**where, "mode": mode}
        argv = evaluate_argv(base, one, disagg)
        ecode, eout, eerr = run(argv)
        if not eout.startswith("{"):
            t.check("1 evaluate: same metrics", False, here, f"evaluate exit {ecode}: {eerr.strip()[-200:]}")
            continue
        evaluated = json.loads(eout)
        reproduce(t, {**here, "evaluate": "shardplan " + " ".join(argv)}, one, evaluated, disagg)
        limits(t, here, args, one, disagg, "printed")
        limits(t, here, args, evaluated, disagg, "evaluated")
        littles_law(t, here, args, one, disagg)
        if disagg:
            kv_bytes(t, here, args, one, presets)
        if "--rate" in args:
            rate_kept(t, here, args, one, disagg)
            if disagg:
                rate_neighbours(t, here, args, one)
        if not disagg:
            against_enumerate(t, here, args, one)
    engine = opt(args, "--engine") or "vllm"
    lcode, lout, lerr = run(["solve", *args, "--emit", engine])
    if lcode == 0:
        launch(t, where, engine, lout, plan["modes"][chosen] if serving == "auto" else plan, chosen == "disagg")
    else:
        t.check("5 launch commands carry the degrees", False, where, f"exit {lcode}: {lerr[-200:]}")
    if serving == "auto":
        both_modes(t, where, args, plan)
