"""Disaggregated launch commands: every option exists in the program it is given to, each pool lands on its
own GPUs with its role's options, the scripts are valid shell, and what an engine cannot express is said."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from functools import cache

import pytest

from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cli.pools import disagg_layout
from shardplan.solver.cost.disagg import evaluate_disagg
from shardplan.solver.outputs.launch.disagg import emit_disagg
from tests.unit.solver.outputs import disagg_engine_options as extra
from tests.unit.solver.outputs import engine_options as known

SERVER_OPTIONS = {"vllm": known.VLLM_OPTIONS, "sglang": known.SGLANG_OPTIONS, "trtllm": known.TRTLLM_OPTIONS}
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
ENGINES = ("vllm", "sglang", "trtllm")


@cache
def plan(case: str) -> DisaggPlan:
    model, cluster, prefill, decode = {
        # the MoE question: 3 prefill workers of tp=4 and a decode worker of 8 attention groups
        "qwen3": ("qwen3-235b-a22b", "3x8xH200", "workers=3,tp=4", "workers=1,attn_dp=8,ep=8"),
        # a dense model on one node, pipeline stages in the decode pool
        "llama": ("llama-3.1-70b", "8xH200", "workers=1,tp=4", "workers=2,tp=1,pp=2"),
    }[case]
    problem = build_problem(ProblemArgs(model=model, cluster=cluster, isl=4000, osl=500, batch=32,
                                        weights_dtype="fp8"))
    return evaluate_disagg(problem, disagg_layout(problem, prefill, decode))


def tokens_of(shell: str) -> list[str]:
    tokens = shlex.split(shell.replace("\\\n", " "))
    while tokens and ENV.match(tokens[0]):
        tokens.pop(0)
    return tokens


def allowed(engine: str, argv: tuple[str, ...]) -> frozenset[str]:
    if argv[:3] == ("python", "-m", "sglang_router.launch_router"):
        return extra.SGLANG_ROUTER_OPTIONS
    if argv[:2] == ("trtllm-serve", "disaggregated"):
        return extra.TRTLLM_DISAGG_OPTIONS
    return SERVER_OPTIONS[engine]


@pytest.mark.parametrize("case", ["qwen3", "llama"])
@pytest.mark.parametrize("engine", ENGINES)
def test_every_option_exists_in_its_program(case: str, engine: str) -> None:
    em = emit_disagg(plan(case), engine)
    assert em.launches
    for launch in em.launches:
        assert tokens_of(launch.shell()) == [t.strip('"') for t in launch.argv]  # printed text parses back
        unknown = [o for o in launch.options() if o not in allowed(engine, launch.argv)]
        assert not unknown, f"{engine} {case}: {unknown}"


@pytest.mark.parametrize("case", ["qwen3", "llama"])
@pytest.mark.parametrize("engine", ENGINES)
def test_scripts_pass_bash_n(case: str, engine: str, tmp_path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    path = tmp_path / f"{engine}.sh"
    path.write_text(emit_disagg(plan(case), engine).script())
    assert subprocess.run([bash, "-n", str(path)], capture_output=True).returncode == 0


def _argv(em, role: str) -> list[tuple[str, ...]]:
    return [one.argv for one in em.launches if one.label.startswith(role)]


def test_vllm_instances_carry_the_nixl_connector_on_their_pools_gpus() -> None:
    p = plan("qwen3")
    em = emit_disagg(p, "vllm")
    for argv in [*_argv(em, "prefill"), *_argv(em, "decode")]:
        config = json.loads(argv[list(argv).index("--kv-transfer-config") + 1])
        assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    # the decode pool sits on GPUs 16-23: node 2, all of it
    decode = [one for one in em.launches if one.label.startswith("decode")]
    assert len(decode) == 1 and "node 2" in decode[0].label
    assert any("proxy" in note for note in em.notes)


def test_sglang_roles_bootstrap_ports_and_router() -> None:
    em = emit_disagg(plan("qwen3"), "sglang")
    prefill, decode = _argv(em, "prefill"), _argv(em, "decode")
    assert len(prefill) == 3 and len(decode) == 1
    ports = []
    for argv in prefill:
        a = list(argv)
        assert a[a.index("--disaggregation-mode") + 1] == "prefill"
        ports.append(a[a.index("--disaggregation-bootstrap-port") + 1])
    assert ports == ["8998", "8999", "9000"]
    assert list(decode[0])[list(decode[0]).index("--disaggregation-mode") + 1] == "decode"
    router = next(one.argv for one in em.launches if one.label.startswith("router"))
    text = " ".join(router)
    assert "--pd-disaggregation" in router and text.count("--prefill") == 3 and text.count("--decode") == 1
    assert "http://$NODE2_IP:31000" in router  # the decode server's node and port
    assert '"${NODE2_IP:?' in em.script()  # the script refuses to run without the address


def test_trtllm_context_and_generation_servers_and_their_config() -> None:
    em = emit_disagg(plan("llama"), "trtllm")
    files = dict(em.files)
    assert "disable_overlap_scheduler: true" in files["prefill_extra_llm_api_options.yaml"]
    assert "disable_overlap_scheduler" not in files["decode_extra_llm_api_options.yaml"]
    for name in ("prefill_extra_llm_api_options.yaml", "decode_extra_llm_api_options.yaml"):
        assert "max_tokens_in_buffer: 4000" in files[name]
        top = ""
        for line in files[name].splitlines():
            key = line.strip().split(":")[0]
            parent = f"{top}." if line.startswith("  ") else ""
            top = top if line.startswith("  ") else key
            assert parent + key in known.TRTLLM_YAML_KEYS | extra.TRTLLM_DISAGG_YAML_KEYS, parent + key
    config = files["disagg_config.yaml"]
    parents: list[str] = []
    for line in config.splitlines():
        if line.strip().startswith("- "):
            continue
        key, depth = line.strip().split(":")[0], (len(line) - len(line.lstrip())) // 2
        parents = parents[:depth]
        assert ".".join([*parents, key]) in extra.TRTLLM_DISAGG_SERVER_KEYS
        parents.append(key)
    # one node: servers on localhost, 1 context and 2 generation servers on their ports
    assert '- "localhost:8001"' in config and '- "localhost:8102"' in config and "num_instances: 2" in config
    server = next(one.argv for one in em.launches if one.argv[:2] == ("trtllm-serve", "disaggregated"))
    assert list(server[2:]) == ["--config_file", "disagg_config.yaml"]


def test_pools_do_not_share_gpus_on_one_node() -> None:
    em = emit_disagg(plan("llama"), "sglang")
    seen: list[str] = []
    for one in em.launches:
        env = dict(one.env)
        if "CUDA_VISIBLE_DEVICES" in env:
            seen += env["CUDA_VISIBLE_DEVICES"].split(",")
    assert sorted(seen, key=int) == [str(g) for g in range(8)]  # 4 prefill + 2 x 2 decode, each once


def test_unknown_engine_is_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        emit_disagg(plan("llama"), "tgi")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_plan_held_below_its_full_rate_says_to_cap_the_requests_admitted(engine: str) -> None:
    """Llama-3.1-70B's pools at 32 requests in flight carry less than their full rate (the concurrency sets it):
    with a TTFT limit the limits hold only up to those 32, which the notes say; with no limit, or at the full
    rate, nothing is said."""
    below = plan("llama")
    assert below.prediction.bottleneck == "concurrency"
    limited = below.problem.model_copy(update={"workload": below.problem.workload.model_copy(
        update={"ttft_ms": 2000.0})})
    held = evaluate_disagg(limited, below.layout)
    note = "the limits hold at up to 32 requests in flight"
    assert any(n.startswith(note) for n in emit_disagg(held, engine).notes)
    assert not any(n.startswith(note) for n in emit_disagg(below, engine).notes)  # no limit
    full = evaluate_disagg(limited, below.layout.model_copy(update={"concurrency": 4096}))
    assert full.prediction.bottleneck != "concurrency"
    assert not any("requests in flight" in n for n in emit_disagg(full, engine).notes)
