"""Hostile inputs for every command, drawn from a ``random.Random``: shared by the fuzz tests (driven by
hypothesis with a fixed seed) and by ``python -m benchmarks.fuzz`` (long runs in subprocesses).

A case is a command line and the files it reads, by name; ``{dir}`` in an argument is the folder the
files are written to. Mutations keep close to valid input, so that most cases reach deep checks.
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from shardplan.hardware.gpu import get_gpu
from shardplan.models.derived import weight_bytes_total
from shardplan.models.presets import find_preset, presets

SHARED = Path(__file__).resolve().parents[2]  # the repository root (tests/fuzz/cases.py)
SMALL_MODELS = ("llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b", "mistral-7b")
GPUS = ("H100", "H200", "A100", "GB200", "L40S", "B200", "h100-sxm", "B999", "", "x", "H100 ", "×H100")
HOSTILE_STRINGS = (
    "", " ", "x\ntouch PWNED", "$(touch PWNED)", "`id`", "/etc/passwd", "../../x", "-rf", "a" * 300, "\x00",
    "\u202e", "é", "nan", "inf", "-inf", "1e309", "0x10", "1_000", "٣", "NaN",
    # issue 14, acceptance 5: fullwidth and Arabic-Indic digits, terminal escapes, a bell, a lone surrogate
    "８", "٨xH100", "\x1b[31mred", "org/na\x07me",
)
HOSTILE_NUMBERS: tuple[object, ...] = (
    0, -1, 1, 2, 3, 7, 64, 1000, 2**31, 2**53 + 1, 2**63, 2**64, -(2**63), 10**30, 1.5, -0.0, 1e308, True, False,
    None, "8", [], {}, [1, 2], {"a": 1},
)


@dataclass
class Case:
    """One command line and the files it needs (``{dir}`` in an argument is their folder)."""

    command: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    kind: str = ""  # what was fuzzed: config, cluster, numeric, stages, load-profile, dag, calibration, serving, ...


def preset_config(alias: str) -> dict[str, object]:
    preset = find_preset(alias)
    assert preset is not None
    return json.loads(preset.path.read_text())


def _number_text(rng: random.Random) -> str:
    return rng.choice([
        "0", "-1", "1", "2", "3", "4", "8", "16", "64", "128", "1024", "16384", "65536", "1e13", "1e30", "1e300",
        "nan", "inf", "-inf", "0.5", "1.5", "abc", "", " 1", "1e-300", str(2**63), "9" * 30, "9" * 5000,
        "８", "١٠٢٤", "-0", "1e400", "5e-324", "0x8", "8 ",
        str(rng.randint(-10, 10**6)), repr(rng.uniform(-1, 1e6)),
    ])


def _encode(text: str, rng: random.Random) -> bytes:
    choice = rng.random()
    if choice < 0.75:
        return text.encode()
    if choice < 0.82:
        return b"\xef\xbb\xbf" + text.encode()
    if choice < 0.88:
        return text.encode("utf-16")
    if choice < 0.94:
        return text.encode() + b"\xe9\xff"
    return text.encode()[: rng.randint(0, max(0, len(text) - 1))]


def mutate_json(data: object, rng: random.Random, depth: int = 0) -> object:
    """A copy of ``data`` with one value replaced, removed or nested at a random place."""
    if isinstance(data, dict) and data and rng.random() < 0.8:
        out = dict(data)
        key = rng.choice(sorted(out))
        action = rng.random()
        if action < 0.15:
            del out[key]
        elif action < 0.55 or depth > 3:
            out[key] = rng.choice(HOSTILE_NUMBERS + HOSTILE_STRINGS)
        else:
            out[key] = mutate_json(out[key], rng, depth + 1)
        return out
    if isinstance(data, list) and data and rng.random() < 0.8:
        out_list = list(data)
        i = rng.randrange(len(out_list))
        if rng.random() < 0.3:
            del out_list[i]
        else:
            out_list[i] = mutate_json(out_list[i], rng, depth + 1)
        return out_list
    return rng.choice(HOSTILE_NUMBERS + HOSTILE_STRINGS)


def _json_text(data: object, rng: random.Random) -> str:
    if rng.random() < 0.04:
        n = rng.choice([100, 1000, 100_000])
        return "[" * n + "]" * n
    if rng.random() < 0.03:
        return json.dumps(data)[: rng.randint(0, 200)]
    text = json.dumps(data, allow_nan=True)
    if isinstance(data, dict) and data and rng.random() < 0.04:  # a key given twice, the second value hostile
        key = rng.choice(sorted(data))
        text = text[:-1] + f", {json.dumps(key)}: {json.dumps(rng.choice(HOSTILE_NUMBERS), allow_nan=True)}}}"
    return text


def config_case(rng: random.Random, command: str) -> Case:
    cfg: object = preset_config(rng.choice(SMALL_MODELS))
    for _ in range(rng.randint(0, 3)):
        cfg = mutate_json(cfg, rng)
    if rng.random() < 0.2 and isinstance(cfg, dict):
        cfg["_shardplan_id"] = rng.choice(HOSTILE_STRINGS + ("org/name", "a/b/c", "meta-llama/Llama-3.1-8B"))
    argv = [command, "--model", "{dir}/config.json", "--cluster", rng.choice(["1xH100", "2xH100", "8xH100"])]
    if command == "evaluate":
        argv += ["--tp", rng.choice(["1", "2"])]
    if command == "solve":
        argv += ["--no-runner-up"]
        if rng.random() < 0.3:
            argv += ["--emit", rng.choice(["vllm", "sglang", "trtllm"])]
    return Case(command, argv, {"config.json": _encode(_json_text(cfg, rng), rng)}, "config")


def cluster_text(rng: random.Random) -> str:
    parts = [_number_text(rng)]
    if rng.random() < 0.5:
        parts.append(_number_text(rng))
    parts.append(rng.choice(GPUS))
    text = rng.choice(["x", "X", "×", " x ", "*"]).join(parts)
    return text if rng.random() < 0.9 else rng.choice(HOSTILE_STRINGS)


def cluster_case(rng: random.Random, command: str) -> Case:
    argv = [command, "--model", rng.choice(SMALL_MODELS), "--cluster", cluster_text(rng)]
    if command == "solve":  # a valid large cluster would solve for long: pin a small layout
        argv += ["--tp", "1", "--pp", "1", "--dp", "1", "--no-runner-up"]
    return Case(command, argv, kind="cluster")


NUMERIC_FLAGS = ("--isl", "--osl", "--batch", "--mem-cap-gib", "--ttft-ms", "--tpot-ms", "--zipf", "--redundant-slots",
                 "--dp", "--pp", "--tp", "--sp", "--ep", "--attn-dp", "--expert-tp", "--time-limit")


def numeric_case(rng: random.Random, command: str) -> Case:
    model = rng.choice(SMALL_MODELS)
    argv = [command, "--model", model, "--cluster", rng.choice(["1xH100", "2xH100"])]
    flags = list(NUMERIC_FLAGS[:-1] if command == "evaluate" else NUMERIC_FLAGS)
    for flag in rng.sample(flags, rng.randint(1, 3)):
        argv += [flag, _number_text(rng)]
    if command == "enumerate":
        argv += ["--limit", rng.choice(["1", "2", "0", "-1", "abc"])]
    if command == "solve":
        argv += ["--no-runner-up"]
    return Case(command, argv, kind="numeric")


def stages_text(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return rng.choice(HOSTILE_STRINGS + ("0:32", "0:16,16:32", ",", ":", "0:0", "32:0", "0:" + "9" * 50))
    cuts = sorted(rng.sample(range(-2, 40), rng.randint(1, 4)))
    bounds = [rng.choice([0, cuts[0]])] + cuts[1:] + [rng.choice([32, 48, 40, 31, cuts[-1] + 1])]
    return ",".join(f"{a}:{b}" for a, b in zip(bounds, bounds[1:], strict=False))


def stages_case(rng: random.Random, command: str) -> Case:
    argv = [command, "--model", rng.choice(("llama-3.1-8b", "qwen3-30b-a3b")), "--cluster", "4xH100",
            "--stages", stages_text(rng)]
    if rng.random() < 0.5:
        argv += ["--pp", rng.choice(["1", "2", "3", "4", "5"])]
    if command == "solve":
        argv += ["--no-runner-up"]
    if command == "enumerate":
        argv += ["--limit", "2"]
    return Case(command, argv, kind="stages")


def load_profile_case(rng: random.Random, command: str) -> Case:
    """Qwen3-30B-A3B: 128 experts on 48 MoE layers; a JSON or CSV profile, mutated."""
    layers = {str(i): [1.0] * 128 for i in range(48)}
    if rng.random() < 0.5:
        data: object = {"layers": layers, "num_experts": 128}
        for _ in range(rng.randint(0, 2)):
            data = mutate_json(data, rng)
        name, body = "load.json", _json_text(data, rng)
    else:
        rows = [["layer", "expert", "tokens"]] + [[str(i), str(e), "1"] for i in range(48) for e in range(128)]
        for _ in range(rng.randint(0, 3)):
            r = rng.randrange(len(rows))
            rows[r] = [rng.choice(HOSTILE_STRINGS + ("1", "-1", "nan", "1e400"))
                       if rng.random() < 0.5 else c for c in rows[r]][: rng.choice([1, 2, 3, 3, 3, 4])]
        out = io.StringIO()
        csv.writer(out).writerows(rows)
        name, body = "load.csv", out.getvalue()
    argv = [command, "--model", "qwen3-30b-a3b", "--cluster", "2xH100", "--load-profile", "{dir}/" + name]
    argv += ["--tp", "1", "--dp", "1", "--pp", "1"] if command != "evaluate" else ["--tp", "2"]
    if command == "solve":
        argv += ["--no-runner-up"]
    return Case(command, argv, {name: _encode(body, rng)}, "load-profile")


def with_cycle(dag: dict[str, object], rng: random.Random) -> dict[str, object]:
    """The DAG with one edge's reverse added: a cycle through two nodes (or a self-loop)."""
    edges = dag.get("edges")
    if not isinstance(edges, list) or not edges or not isinstance(edges[0], dict):
        return dag
    edge = dict(rng.choice(edges))
    if rng.random() < 0.2:
        edge["target"] = edge.get("source")
    else:
        edge["source"], edge["target"] = edge.get("target"), edge.get("source")
    return {**dag, "edges": [*edges, edge]}


def dag_case(rng: random.Random, base: dict[str, object]) -> Case:
    data: object = with_cycle(base, rng) if rng.random() < 0.15 else base
    for _ in range(rng.randint(0 if data is not base else 1, 3)):
        data = mutate_json(data, rng)
    argv = ["validate", "{dir}/dag.json"]
    if rng.random() < 0.5:
        argv += ["--fix", "--out", "{dir}/fixed" + rng.choice([".json", ".dot", ".mmd", ".graphml", ".png"])]
    if rng.random() < 0.3:
        argv.append("--json")
    return Case("validate", argv, {"dag.json": _encode(_json_text(data, rng), rng)}, "dag")


CALIBRATION_HEADER = ("id,source_id,source,model,weights_dtype,kv_cache_dtype,engine,gpu,num_gpus,tp,pp,ep,dp,isl,osl,"
                      "batch_size,concurrency,request_rate_qps,metric,value,config_group,notes")
CALIBRATION_ROW = ("{i},TRTLLM-PERF-v0.17,docs,GPT-J-6B,FP8,FP8,TensorRT-LLM 0.17,H100-SXM-80GB,1,1,1,,1,128,128,,,,"
                   "output_tokens_per_s_total,1000.5,,offline")


def calibration_case(rng: random.Random) -> Case:
    """A points CSV whose rows have no preset (so a valid file ends quickly: nothing to fit), mutated."""
    rows = [CALIBRATION_HEADER.split(",")] + [CALIBRATION_ROW.format(i=i).split(",") for i in range(5)]
    for _ in range(rng.randint(0, 3)):
        r = rng.randrange(len(rows))
        action = rng.random()
        if not rows[r]:
            continue
        if action < 0.3:
            rows[r] = rows[r][: rng.randrange(len(rows[r]))]
        elif action < 0.4 and r == 0:
            del rows[0][rng.randrange(len(rows[0]))]
        else:
            c = rng.randrange(len(rows[r]))
            rows[r][c] = rng.choice(HOSTILE_STRINGS + ("Llama-3.1-8B", "H100-SXM-80GB", "-1", "0", "inf", "1e400",
                                                       "nan", "NaN", "-inf", "-0", "５"))
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    argv = ["calibrate", "{dir}/points.csv", "--out", rng.choice(["{dir}/p.json", "{dir}/points.csv", "{dir}/no/p.json",
                                                                  "{dir}"])]
    if rng.random() < 0.3:  # a software generation: known, unknown or hostile
        argv += ["--software", rng.choice(("trtllm", "trtllm-0.14", "trtllm-0.9", "splitwise", "TRTLLM", "vllm",
                                           "trtllm-9.9", "", *HOSTILE_STRINGS[:6]))]
    if rng.random() < 0.1:
        argv += ["--gpu", rng.choice(GPUS)]
    return Case("calibrate", argv, {"points.csv": _encode(out.getvalue(), rng)}, "calibration")


PROFILE_EXTREMES: tuple[object, ...] = (5e-324, 1e-300, 1e308, 2**70, 10**30, -0.0, True, False, float("nan"),
                                         float("inf"), "0.5", None, [], 0)


def profile_file_case(rng: random.Random, command: str) -> Case:
    """A calibration profile file (``--profile FILE``) with fields at extremes."""
    data: dict[str, object] = json.loads((SHARED / "hardware" / "profiles" / "h100-sxm-vllm.json").read_text())
    data["name"] = "fuzzed"
    for _ in range(rng.randint(1, 3)):
        data[rng.choice(sorted(data))] = rng.choice(PROFILE_EXTREMES)
    argv = [command, "--model", rng.choice(SMALL_MODELS), "--cluster", "2xH100", "--profile", "{dir}/profile.json"]
    argv += ["--tp", "2"] if command == "evaluate" else ["--objective", rng.choice(["latency", "throughput"])]
    if command == "solve":
        argv += ["--no-runner-up"]
    return Case(command, argv, {"profile.json": _encode(_json_text(data, rng), rng)}, "profile-file")


# Output paths a command must refuse before any work (or write correctly): pseudo-filesystems, a full
# device, a directory, a missing folder, an input, and two options naming one file.
OUTPUT_PATHS = ("/proc/x.json", "/sys/x.html", "/dev/full", "/proc/self/status", "{dir}", "{dir}/no/x.json",
                "{dir}/config.json", "{dir}/x.json", "{dir}/./x.json", "", "{dir}/x.exe")


def output_case(rng: random.Random, command: str) -> Case:
    """Outputs at hostile paths (solve's --dag, --report, --experts-out; evaluate's --experts-out)."""
    options = ["--experts-out"] if command == "evaluate" else ["--dag", "--report", "--experts-out"]
    argv = [command, "--model", "{dir}/config.json", "--cluster", "2xH100"]
    argv += ["--tp", "2"] if command == "evaluate" else ["--no-runner-up"]
    for option in rng.sample(options, rng.randint(1, len(options))):
        argv += [option, rng.choice(OUTPUT_PATHS)]
    config = json.dumps(preset_config(rng.choice(("qwen3-30b-a3b", "mixtral-8x7b"))))
    return Case(command, argv, {"config.json": config.encode()}, "outputs")


# Disaggregated serving (issue 15): pool specs, --rate, --serving, --max-batch, --engine, --emit.
POOL_KEYS = ("workers", "pp", "tp", "sp", "ep", "attn_dp", "expert_tp", "stages", "batch")
POOL_VALUES = ("1", "1", "1", "2", "2", "4", "8")
SERVING_MODELS = ("llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b")  # dense, 128 experts, 8 experts
SERVING_CLUSTERS = ("8xH100", "2xH100", "4xA100", "2x8xH100", "1xH100", "8xB200")
BIG_CLUSTERS = ("64x8xH100", "512xH100", "18x72xGB200", "4096x8xH200")  # capped by --time-limit


def pick(rng: random.Random, valid: tuple[str, ...], hostile: tuple[str, ...], p_hostile: float = 0.15) -> str:
    """A valid value mostly, a hostile one now and then: a case of several flags still reaches deep checks."""
    return rng.choice(hostile if rng.random() < p_hostile else valid)


def pool_value(rng: random.Random) -> str:
    """A pool key's value: mostly a small valid degree, else a hostile number."""
    hostile = ("0", "-1", "٣", "８", "1e3", "2.0", "", " ", "9" * 9, "9" * 10, "1048577", "0x8", "+2", "1_0", "²",
               "𝟠", _number_text(rng))
    return pick(rng, POOL_VALUES, hostile, 0.08)


def valid_pool(rng: random.Random, layers: int) -> dict[str, str]:
    """A pool spec that mostly parses: workers and a few degrees (stages consistent with pp now and then)."""
    keys = {"workers": pool_value(rng)}
    for key in rng.sample(("tp", "tp", "pp", "attn_dp", "ep", "batch", "sp", "expert_tp"), rng.randint(0, 2)):
        keys[key] = pool_value(rng)
    if rng.random() < 0.15:
        cut = rng.choice((layers // 2, 1, layers - 1, 0, layers, layers + 1))
        keys["pp"] = "2"
        keys["stages"] = rng.choice((f"0:{cut},{cut}:{layers}", f"0:{layers}", f"0:{cut}", stages_text(rng)))
    return keys


def mutate_pool(keys: dict[str, str], rng: random.Random) -> str:
    """The spec as text, with at most one mutation a caller could plausibly make (or an attacker)."""
    parts = [f"{k}={v}" for k, v in keys.items()]
    if rng.random() < 0.7:
        return ",".join(parts)
    action = rng.random()
    if action < 0.15:  # an unknown key, or a known one misspelt
        parts.insert(rng.randint(0, len(parts)), rng.choice(("dp=2", "gpus=4", "replicas=2", "tensor=2", "wokers=1",
                                                              "=4", "=", "tp_=2", "é=1", "__class__=1")))
    elif action < 0.3:  # a key given twice
        parts.append(rng.choice(parts))
    elif action < 0.4:  # missing "="
        parts[rng.randrange(len(parts))] = rng.choice(("tp", "4", "tp:4", "tp 4", "workers"))
    elif action < 0.55:  # keys spelt other ways (valid: case and dashes are accepted)
        parts = [p.upper() if rng.random() < 0.5 else p.replace("_", "-") for p in parts]
    elif action < 0.65:  # separators
        return rng.choice((",", ";", ", ", ",,")).join(parts) + rng.choice(("", ",", " ", ",,"))
    elif action < 0.75:  # thousands of keys, or one huge value
        n = rng.choice((500, 2000, 10_000))
        return rng.choice((",".join(f"k{i}=1" for i in range(n)), ",".join(["tp=1"] * n), "tp=" + "1" * n,
                           "stages=" + ",".join(f"{i}:{i + 1}" for i in range(n))))
    elif action < 0.85:
        return rng.choice(HOSTILE_STRINGS + ("workers=", "workers==2", "workers=2=3", "tp=2,,pp=2", "stages=0:16,",
                                             "stages=,0:16", "stages=0:16,x:32", "stages=0:16,16:32,tp=2,16:32"))
    else:
        parts[rng.randrange(len(parts))] = rng.choice(POOL_KEYS) + "=" + pool_value(rng)
    return ",".join(parts)


def pool_text(rng: random.Random, layers: int) -> str:
    return mutate_pool(valid_pool(rng, layers), rng)


def serving_extras(rng: random.Random, command: str) -> list[str]:
    """The shared flags the serving paths read, each now and then, mostly valid."""
    argv: list[str] = []
    if rng.random() < 0.3:
        argv += ["--max-batch", pick(rng, ("1", "2", "16", "64", "256", "16384"),
                                     ("16385", "0", "-1", "nan", "٣", "1e3", ""))]
    if rng.random() < 0.3:
        argv += ["--engine", pick(rng, ("vllm", "sglang", "trtllm"), ("VLLM", "", "tgi", "vllm "))]
    if rng.random() < 0.4:
        argv += ["--ttft-ms", pick(rng, ("2000", "500", "50", "1", "10000"), ("1e-300", "nan", "0", "1e300"))]
    if rng.random() < 0.4:
        argv += ["--tpot-ms", pick(rng, ("50", "20", "5", "1", "0.001"), ("inf", "-5", "1e300", "nan"))]
    if rng.random() < 0.3:
        argv += ["--isl", pick(rng, ("4000", "1", "128", "32768", "٣٠"), ("0", "131000", "-4", "1e3"))]
    if rng.random() < 0.3:
        argv += ["--osl", pick(rng, ("500", "2", "3", "4096"), ("1", "0", "-2"))]
    if rng.random() < 0.15:
        argv += ["--weights-dtype", pick(rng, ("fp8", "fp4", "bf16", "int4"), ("fp3", ""))]
    if rng.random() < 0.1:
        argv += ["--kv-dtype", pick(rng, ("fp8", "bf16"), ("fp4", "int8"))]
    if rng.random() < 0.1:
        argv += ["--mem-cap-gib", pick(rng, ("20", "40", "0.5"), ("1e-9", "1e9", "0"))]
    if rng.random() < 0.03:  # a single-pool flag the serving path must refuse (or, colocated, take)
        argv += [rng.choice(("--tp", "--pp", "--dp", "--attn-dp", "--ep", "--stages")), rng.choice(("1", "2"))]
    if rng.random() < 0.03 and command != "enumerate":
        argv += ["--zipf", rng.choice(("1.1", "0", "nan"))]
    return argv


def rate_text(rng: random.Random) -> str:
    return pick(rng, ("20", "5", "1", "0.5", "100", "1000", "1e6", "1e-300", "5e-324", "1e-9", "٣", "８", "20 "),
                ("1000001", "0", "-1", "nan", "inf", "-inf", "", "abc", "1e308", "0x10", str(2**63)), 0.25)


def cluster_for(rng: random.Random, quick: bool = False) -> tuple[str, bool]:
    """A cluster, and whether it is big (then a valid search is bounded by --time-limit); ``quick``: only
    the small ones (the in-process test's budget; the long runs take the big ones)."""
    if quick:
        return rng.choice(SERVING_CLUSTERS), False
    if rng.random() < 0.08:
        return rng.choice(BIG_CLUSTERS), True
    if rng.random() < 0.03:
        return cluster_text(rng), True
    return rng.choice(SERVING_CLUSTERS), False


def bounded(rng: random.Random, big: bool, quick: bool = False) -> list[str]:
    """Always a --time-limit, as cluster_case pins a layout: without one a valid disaggregated search under a
    tight TTFT limit ran for minutes even on 16 GPUs (benchmarks/fuzz/README.md, 2026-11-24, still open);
    with one, the search must end near it whatever the cluster. Now and then a hostile limit."""
    if rng.random() < 0.08:
        return ["--time-limit", rng.choice(("0.01", "0", "-1", "nan", "1e309", "inf"))]
    return ["--time-limit", "0.3" if quick else rng.choice(("0.5", "2") if big else ("1", "3"))]


def serving_solve_case(rng: random.Random, quick: bool = False) -> Case:
    """``solve --serving colocated|disagg|auto`` with or without ``--rate``."""
    cluster, big = cluster_for(rng, quick)
    argv = ["solve", "--model", rng.choice(SERVING_MODELS), "--cluster", cluster,
            "--serving", pick(rng, ("disagg", "disagg", "auto", "auto", "colocated"), ("DISAGG", "both", ""), 0.05)]
    if rng.random() < 0.5 or "--serving" not in argv or argv[-1] == "colocated":
        argv += ["--rate", rate_text(rng)]
    if rng.random() < 0.3:
        argv += ["--objective", rng.choice(("throughput", "latency"))]
    argv += serving_extras(rng, "solve") + bounded(rng, big, quick)
    if rng.random() < 0.5:
        argv.append("--json")
    if rng.random() < 0.15:
        argv += ["--emit", pick(rng, ("vllm", "sglang", "trtllm"), ("dynamo",), 0.1)]
    if rng.random() < 0.1:
        argv += [rng.choice(("--dag", "--report", "--experts-out")), pick(rng, ("{dir}/x.mmd", "{dir}/r.html"),
                                                                              OUTPUT_PATHS, 0.5)]
    if rng.random() < 0.03:
        argv += ["--runner-up"]
    if rng.random() < 0.2:  # drawn last, so every other flag of a seed's case is what it was before
        argv += ["--limits-at", pick(rng, ("median-error", "median-error", "prediction"), ("MEDIAN", "", "p90"))]
    return Case("solve", argv, kind="serving")


def disagg_evaluate_case(rng: random.Random, quick: bool = False) -> Case:
    """``evaluate --serving disagg --prefill ... --decode ... --batch C``: hostile pool specs."""
    model = rng.choice(SERVING_MODELS)
    layers = 48 if model == "qwen3-30b-a3b" else 32
    cluster, _ = cluster_for(rng, quick)
    argv = ["evaluate", "--serving", "disagg", "--model", model, "--cluster", cluster]
    for role in ("prefill", "decode"):
        if rng.random() < 0.95:
            argv += [f"--{role}", pool_text(rng, layers)]
    if rng.random() < 0.7:
        argv += ["--batch", pick(rng, ("1", "8", "64", "512", "16384", "٣"), ("1048577", "0", "-3", "nan"))]
    argv += serving_extras(rng, "evaluate")
    if rng.random() < 0.5:
        argv.append("--json")
    if rng.random() < 0.15:
        argv += ["--emit", rng.choice(("vllm", "sglang", "trtllm"))]
    if rng.random() < 0.1:
        dags = ("{dir}/x.mmd", "{dir}/x.graphml", "{dir}/x.dot", "{dir}/x.json")
        argv += ["--dag", pick(rng, dags, OUTPUT_PATHS, 0.5)]
        if rng.random() < 0.5:
            argv += ["--detail", "expanded"]
    if rng.random() < 0.03:
        argv += ["--serving", "colocated"]  # the last --serving wins: pools given to a colocated evaluate
    return Case("evaluate", argv, kind="pools")


def serving_enumerate_case(rng: random.Random, quick: bool = False) -> Case:
    """``enumerate --serving disagg|auto --limit N [--jsonl | --json] [--report]``."""
    cluster, big = cluster_for(rng, quick)
    argv = ["enumerate", "--serving", rng.choice(("disagg", "disagg", "auto")), "--model", rng.choice(SERVING_MODELS),
            "--cluster", cluster,
            "--limit", pick(rng, ("1", "3", "5", "20", "٣"), ("0", "-1", "", str(2**63)))]
    argv += serving_extras(rng, "enumerate") + bounded(rng, big, quick)
    argv += rng.choice(([], ["--json"], ["--jsonl"], ["--json", "--jsonl"]))
    if rng.random() < 0.1:
        argv += ["--report", rng.choice(OUTPUT_PATHS + ("{dir}/r.html",))]
    return Case("enumerate", argv, kind="serving-enumerate")


# Extremes (robust16, 2026-11-27): valid inputs at the edges of their ranges, where 64-bit bounds and deadlines
# break, not hostile text. Huge clusters (up to 524,288 GPUs), ISL and OSL up to the model's context, batches
# up to 2^20, TTFT/TPOT limits from a microsecond to "none", --rate from 1e-300 to 1e6, every engine and
# serving mode, colocated pins and pool specs; always a --time-limit, which the whole command must keep to.
EXTREME_MODELS = {"qwen3-30b-a3b": 40960, "llama-3.1-8b": 131072, "deepseek-v3": 163840, "mixtral-8x7b": 32768,
                  "llama-3.1-405b": 131072, "gpt-oss-120b": 131072}
EXTREME_CLUSTERS = ("4096x8xH200", "65536x8xH100", "1024x8xB200", "18x72xGB200", "1xH100", "2xH100", "8xH100")


def extreme_workload(rng: random.Random, context: int) -> list[str]:
    """ISL and OSL within the context (at its edges now and then), limits from tiny to none, engines."""
    isl = rng.choice((1, 2, 128, 4000, context // 2, context - 1, context - 2))
    osl = rng.choice((1, 2, 500, max(1, context - isl), max(1, (context - isl) // 2)))
    argv = ["--isl", str(isl), "--osl", str(osl)]
    if rng.random() < 0.4:
        argv += ["--tpot-ms", rng.choice(("0.001", "1", "5", "50", "1e6", "1e15"))]
    if rng.random() < 0.4:
        argv += ["--ttft-ms", rng.choice(("0.001", "10", "2000", "1e9", "1e15"))]
    if rng.random() < 0.4:
        argv += ["--engine", rng.choice(("vllm", "sglang", "trtllm"))]
    if rng.random() < 0.2:
        argv += ["--mem-cap-gib", rng.choice(("0.5", "20", "1e6", str(float(1 << 40))))]
    if rng.random() < 0.2:
        argv += ["--max-batch", rng.choice(("1", "2", "1024", "16384"))]
    if rng.random() < 0.15:
        argv += ["--weights-dtype", rng.choice(("fp8", "fp4"))]
    return argv


def extreme_case(rng: random.Random, command: str) -> Case:
    """``solve`` (colocated, disagg, auto, --rate), ``evaluate`` (pins, pools) or ``enumerate`` (colocated,
    disagg) at the extremes above."""
    model = rng.choice(tuple(EXTREME_MODELS))
    cluster = rng.choice(EXTREME_CLUSTERS)
    argv = [command, "--model", model, "--cluster", cluster, *extreme_workload(rng, EXTREME_MODELS[model])]
    serving = rng.choice(("colocated", "colocated", "disagg", "auto")) if command == "solve" else (
        rng.choice(("colocated", "disagg")))
    if command == "evaluate" and serving == "disagg":
        pools = ("workers=1", "workers=4,tp=2", "workers=1,attn_dp=8,ep=8", "workers=64,tp=8", "workers=2,pp=4")
        argv += ["--serving", "disagg", "--prefill", rng.choice(pools), "--decode", rng.choice(pools)]
    elif command == "evaluate":
        for flag, values in (("--tp", ("1", "2", "8")), ("--dp", ("1", "64", "4096")), ("--pp", ("1", "2", "4")),
                             ("--attn-dp", ("1", "8", "512"))):
            if rng.random() < 0.5:
                argv += [flag, rng.choice(values)]
    else:
        argv += ["--serving", serving]
    if command == "solve" and (serving == "colocated" or rng.random() < 0.3) and rng.random() < 0.5:
        argv += ["--rate", rng.choice(("1e-300", "1e-9", "0.5", "100", "1e4", "1e6"))]
    if rng.random() < 0.4 and serving == "colocated" and command != "evaluate":
        argv += ["--objective", rng.choice(("throughput", "latency"))]
    if (command == "evaluate" or serving == "colocated") and "--rate" not in argv and rng.random() < 0.3:
        argv += ["--batch", rng.choice(("1", "2", "1024", str(1 << 20)))]
    if command == "enumerate":
        argv += ["--limit", rng.choice(("1", "5", "50")), rng.choice(("--json", "--jsonl"))]
    elif rng.random() < 0.5:
        argv.append("--json")
    if command != "evaluate":
        argv += ["--time-limit", rng.choice(("0.5", "2", "5"))]
    return Case(command, argv, kind="extreme")


# What the extremes campaign found (benchmarks/fuzz/README.md, 2026-11-27, seed 271127): each ran past 20 s
# under a --time-limit of 0.5-5 s, in pricing the disaggregated workers or the integer-batch search's roots,
# neither of which looked at the deadline.
FOUND_EXTREMES: list[list[str]] = [line.split() for line in (
    "enumerate --model qwen3-30b-a3b --cluster 1024x8xB200 --isl 4000 --osl 2 --serving disagg --limit 1 "
    "--jsonl --time-limit 5",
    "solve --model deepseek-v3 --cluster 18x72xGB200 --isl 4000 --osl 500 --mem-cap-gib 1099511627776.0 "
    "--max-batch 2 --serving auto --time-limit 0.5",
    "enumerate --model deepseek-v3 --cluster 1024x8xB200 --isl 81920 --osl 2 --ttft-ms 0.001 --serving "
    "disagg --limit 1 --jsonl --time-limit 5",
    "enumerate --model llama-3.1-8b --cluster 18x72xGB200 --isl 65536 --osl 2 --ttft-ms 1e9 --engine "
    "sglang --serving disagg --limit 5 --json --time-limit 0.5",
    "solve --model gpt-oss-120b --cluster 1024x8xB200 --isl 128 --osl 2 --tpot-ms 1e6 --mem-cap-gib "
    "1099511627776.0 --serving auto --json --time-limit 5",
    "enumerate --model mixtral-8x7b --cluster 18x72xGB200 --isl 16384 --osl 8192 --ttft-ms 1e15 "
    "--weights-dtype fp4 --serving disagg --limit 50 --jsonl --time-limit 2",
    "enumerate --model deepseek-v3 --cluster 4096x8xH200 --isl 128 --osl 500 --ttft-ms 2000 --engine "
    "trtllm --serving disagg --limit 5 --json --time-limit 5",
    "solve --model mixtral-8x7b --cluster 18x72xGB200 --isl 2 --osl 500 --tpot-ms 50 --serving auto "
    "--time-limit 0.5",
)]


# No limit (nolimit, 2026-11-27): valid, realistic requests as users and agents send them, WITHOUT --time-limit
# (its default is none), to measure how long they take and find the ones that never end in reasonable time.
# Every preset model on a cluster its weights fit, each GPU type the calibration profiles cover, typical ISL and
# OSL, loose to tight SLA limits, every engine, serving mode and objective, --rate, enumerate with and without
# --limit. Not part of the test suite (a case may run for minutes): ``python -m benchmarks.fuzz --no-limit``.
NO_LIMIT_GPUS = ("H100", "H200", "B200", "GB200", "A100", "A100-PCIe-80GB", "GH200", "L40S", "RTX-PRO-6000")
NO_LIMIT_SIZES = (8, 8, 16, 16, 32, 64, 64, 128, 256, 512)  # GPUs, drawn mostly from here
NO_LIMIT_BIG_SIZES = (1024, 2048, 4096)  # and now and then from here
FP4_GPUS = ("B200", "GB200", "RTX-PRO-6000")  # the GPUs with FP4 peak rates (shardplan hardware)


def _no_limit_cluster(rng: random.Random, gpu: str, weight_gib: float) -> str:
    """A cluster of ``gpu`` whose memory holds the weights with room for a KV cache (realistic requests do
    not ask 1T parameters of eight L40S): 8-512 GPUs mostly, 1-4k now and then."""
    hbm = get_gpu(gpu).hbm_gib
    sizes = NO_LIMIT_BIG_SIZES if rng.random() < 0.1 else NO_LIMIT_SIZES
    fitting = [n for n in sizes if n * hbm >= 1.5 * weight_gib] or [n for n in NO_LIMIT_BIG_SIZES
                                                                    if n * hbm >= 1.5 * weight_gib]
    n = rng.choice(fitting)
    if gpu == "GB200":  # NVL72 racks of 72 GPUs
        racks = max(1, round(n / 72))
        return f"{racks}x72xGB200" if racks > 1 else "72xGB200"
    if gpu == "GH200":  # one GPU per node
        return f"{n}xGH200"
    return f"{n // 8}x8x{gpu}" if n > 8 else f"8x{gpu}"


def no_limit_case(rng: random.Random, command: str) -> Case:
    """A valid, realistic ``solve`` or ``enumerate`` with no ``--time-limit``; ``kind`` names its mode
    (``colocated``, ``colocated+rate``, ``disagg``, ``auto+rate``, ``disagg+limit``, ...), the rows of the
    campaign's table."""
    preset = rng.choice(presets())
    spec = preset.load()
    gpu = rng.choice(NO_LIMIT_GPUS)
    argv = [command, "--model", rng.choice((preset.id, *preset.aliases))]
    if rng.random() < 0.3:
        argv += ["--weights-dtype", "fp4" if gpu in FP4_GPUS and rng.random() < 0.4 else "fp8"]
    # The checkpoint's own weights must fit (a narrower --weights-dtype only leaves more room for the KV cache).
    argv += ["--cluster", _no_limit_cluster(rng, gpu, weight_bytes_total(spec) / 2**30)]
    context = spec.max_position_embeddings
    isl = rng.choice((128, 512, 1024, 2000, 4000, 8000, 16000, 32000))
    osl = rng.choice((64, 128, 256, 500, 1000, 2000, 4000, 8000))
    if isl + osl > context:  # Llama-2 and Llama-3 take 4k and 8k tokens: a prompt that fits with its answer
        isl, osl = max(128, context * 3 // 4), max(64, context // 8)
    argv += ["--isl", str(isl), "--osl", str(osl)]
    if rng.random() < 0.4:
        argv += ["--ttft-ms", rng.choice(("100", "200", "500", "1000", "2000", "5000", "10000"))]
    if rng.random() < 0.4:
        argv += ["--tpot-ms", rng.choice(("5", "10", "20", "30", "50", "100", "200"))]
    if rng.random() < 0.75:
        argv += ["--engine", rng.choice(("vllm", "sglang", "trtllm"))]
    if rng.random() < 0.15:
        argv += ["--kv-dtype", "fp8"]
    if command == "solve":
        serving = rng.choice(("colocated", "colocated", "disagg", "auto"))
        rate = rng.random() < 0.25
        if serving != "colocated" or rng.random() < 0.8:
            argv += ["--serving", serving]
        if rate:
            argv += ["--rate", rng.choice(("0.5", "1", "2", "5", "10", "20", "50", "100"))]
        if serving == "colocated" and not rate:
            objective = rng.choice(("latency", "throughput", None))
            if objective is not None and rng.random() < 0.8:  # given, or the default stated
                argv += ["--objective", objective]
            if rng.random() < 0.15:
                argv += ["--batch", rng.choice(("1", "8", "32", "128"))]
        elif rng.random() < 0.3:
            argv += ["--objective", "throughput"]
        if rng.random() < 0.5:
            argv.append("--json")
        kind = serving + ("+rate" if rate else "")
    else:
        serving = rng.choice(("colocated", "colocated", "disagg"))
        argv += ["--serving", serving]
        if serving == "colocated" and rng.random() < 0.5:
            argv += ["--objective", rng.choice(("latency", "throughput"))]
        limited = rng.random() < 0.6
        if limited:
            argv += ["--limit", rng.choice(("1", "5", "20", "100"))]
        argv += rng.choice(([], ["--json"], ["--jsonl"]))
        kind = serving + ("+limit" if limited else "")
    return Case(command, argv, kind=kind)


SERVING_GENERATORS: dict[str, Callable[[random.Random, bool], Case]] = {
    "solve": serving_solve_case, "evaluate": disagg_evaluate_case, "enumerate": serving_enumerate_case,
}


GENERATORS: dict[str, list[Callable[[random.Random], Case]]] = {
    command: [lambda rng, f=f, c=command: f(rng, c)
              for f in (config_case, cluster_case, numeric_case, stages_case, load_profile_case, profile_file_case)]
    + ([lambda rng, c=command: output_case(rng, c)] if command != "enumerate" else [])
    for command in ("solve", "evaluate", "enumerate")
}


def draw_serving(command: str, rng: random.Random, quick: bool = False) -> Case:
    """One case of the serving flags for ``command`` (solve, evaluate or enumerate); ``quick``: small
    clusters and short time limits only."""
    return SERVING_GENERATORS[command](rng, quick)


def draw(command: str, rng: random.Random, dag_base: dict[str, object] | None = None) -> Case:
    """One case for ``command`` (solve, evaluate, enumerate, validate or calibrate)."""
    if command == "validate":
        assert dag_base is not None
        return dag_case(rng, dag_base)
    if command == "calibrate":
        return calibration_case(rng)
    case = rng.choice(GENERATORS[command])(rng)
    if command == "enumerate" and "--limit" not in case.argv:
        case.argv += ["--limit", "2"]  # bounded work: the first layouts are enough to reach every check
    return case
