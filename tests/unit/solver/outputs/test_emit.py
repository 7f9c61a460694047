"""Launch commands: every option exists in the engine's version, the degrees land where they should,
and what an engine cannot express is said, not dropped."""

from __future__ import annotations

import re
import shlex

import pytest

from shardplan.models.errors import SpecError
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.problem import resolve_profile
from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cost.evaluate import evaluate
from shardplan.solver.optimise import solve
from shardplan.solver.outputs.launch import ENGINE_VERSIONS, emit, emit_sglang, emit_trtllm, emit_vllm
from tests.unit.solver.outputs import engine_options as known

OPTIONS = {"vllm": known.VLLM_OPTIONS, "sglang": known.SGLANG_OPTIONS, "trtllm": known.TRTLLM_OPTIONS}
VERSIONS = {"vllm": known.VLLM_VERSION, "sglang": known.SGLANG_VERSION, "trtllm": known.TRTLLM_VERSION}
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def plan_of(model: str, cluster: str, objective: str = "latency", batch: int = 1, **layout) -> Plan:
    """A plan for a given layout, priced but not solved (fast, and any structure we want)."""
    problem = build_problem(ProblemArgs(model=model, cluster=cluster, objective=objective,
                                        kv_dtype=layout.pop("kv_dtype", None),
                                        mem_cap_gib=layout.pop("mem_cap_gib", None)))
    pp = layout.pop("pp", 1)
    if "stages" in layout:
        lay = Layout(batch=batch, **layout)
    else:
        lay = Layout.even(problem.model.num_layers, pp, batch=batch, **layout)
    return Plan(problem=problem, layout=lay, prediction=evaluate(problem, lay), status="evaluated")


@pytest.fixture(scope="module")
def acceptance() -> dict[str, Plan]:
    """The two acceptance cases, solved: Llama-3.1-70B on 2x8xH100 and DeepSeek-V3 on 4x8xH200."""
    return {
        "llama-70b": solve(build_problem(ProblemArgs(model="llama-3.1-70b", cluster="2x8xH100",
                                                     objective="throughput"))),
        "deepseek-v3": solve(build_problem(ProblemArgs(model="deepseek-v3", cluster="4x8xH200"))),
        # DeepSeek-V3's throughput optimum on 4x8xH200 (2 replicas of 4 stages x 4 attention groups), priced directly.
        "deepseek-v3-adp": plan_of("deepseek-v3", "4x8xH200", "throughput", batch=8192, dp=2, pp=4, tp=1, attn_dp=4,
                                   stages=((0, 17), (17, 32), (32, 47), (47, 61))),
    }


def commands(em) -> list[list[str]]:
    """Each launch's command as the shell reads the printed script (environment assignments removed)."""
    out = []
    for launch in em.launches:
        tokens = shlex.split(launch.shell().replace("\\\n", " "))
        while tokens and ENV.match(tokens[0]):
            tokens.pop(0)
        out.append(tokens)
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("case", ["llama-70b", "deepseek-v3", "deepseek-v3-adp"])
def test_every_option_exists_in_the_engine_version(acceptance, case, engine):
    em = emit(acceptance[case], engine)
    assert VERSIONS[engine] in em.version and VERSIONS[engine] in ENGINE_VERSIONS[engine]
    assert em.launches
    for launch, tokens in zip(em.launches, commands(em), strict=True):
        assert tokens == list(launch.argv)  # the printed text parses back to the same command
        unknown = [o for o in launch.options() if o not in OPTIONS[engine]]
        assert not unknown, f"{engine} {case}: not options of {em.version}: {unknown}"
        assert launch.options(), "a command with no options"
    script = em.script()
    assert script.startswith("# ") and em.version in script


def test_trtllm_yaml_keys_are_llm_api_fields(acceptance):
    for plan in acceptance.values():
        em = emit_trtllm(plan)
        (name, text), = em.files
        assert name == "extra_llm_api_options.yaml"
        parents: list[str] = []
        for line in text.splitlines():
            key = line.strip().split(":")[0]
            depth = (len(line) - len(line.lstrip())) // 2
            parents = parents[:depth]
            if key.isdigit():  # a layer of initial_global_assignments
                continue
            dotted = ".".join(parents + [key])
            assert dotted in known.TRTLLM_YAML_KEYS, dotted
            parents.append(key)


def _arg(argv, name):
    return argv[list(argv).index(name) + 1]


def test_llama_degrees(acceptance):
    plan = acceptance["llama-70b"]
    lay = plan.layout
    v = emit_vllm(plan)
    argv = v.launches[0].argv
    assert argv[:3] == ("vllm", "serve", "meta-llama/Llama-3.1-70B")
    assert _arg(argv, "--tensor-parallel-size") == str(lay.tp)
    assert _arg(argv, "--pipeline-parallel-size") == str(lay.pp)
    assert _arg(argv, "--max-model-len") == "1280"
    if lay.dp > 1:  # a dense model's replicas are data-parallel ranks of one deployment
        assert _arg(argv, "--data-parallel-size") == str(lay.dp)
    assert "--enable-expert-parallel" not in argv
    s = emit_sglang(plan)
    assert len({one.argv[one.argv.index("--port") + 1] if "--port" in one.argv else "" for one in s.launches}) == lay.dp
    assert _arg(s.launches[0].argv, "--tp-size") == str(lay.gpus_per_stage)
    t = emit_trtllm(plan)
    assert _arg(t.launches[0].argv, "--max_batch_size") == str(lay.batch)


def test_deepseek_attention_groups_and_experts(acceptance):
    plan = acceptance["deepseek-v3-adp"]
    v = emit_vllm(plan)
    argv = v.launches[0].argv
    assert _arg(argv, "--data-parallel-size") == "4" and _arg(argv, "--tensor-parallel-size") == "1"
    assert "--enable-expert-parallel" in argv
    assert _arg(argv, "--max-num-seqs") == str(8192 // 4)  # per data-parallel rank
    # 2 replicas of 2 nodes each: separate deployments, workers headless, placeholders for the heads.
    assert len(v.launches) == 4 and v.heads == ("$NODE0_IP", "$NODE2_IP")
    assert [("--headless" in one.argv) for one in v.launches] == [False, True, False, True]
    assert dict(v.launches[0].env)["VLLM_PP_LAYER_PARTITION"] == "17,15,15,14"
    assert any("separate vLLM deployments" in n for n in v.notes)

    s = emit_sglang(plan)
    argv = s.launches[0].argv
    degrees = (_arg(argv, "--tp-size"), _arg(argv, "--attn-dp-size"), _arg(argv, "--ep-size"), _arg(argv, "--pp-size"))
    assert degrees == ("4", "4", "4", "4")
    assert _arg(argv, "--dist-init-addr") == "$NODE0_IP:20000"
    ranks = [(_arg(one.argv, "--nnodes"), _arg(one.argv, "--node-rank")) for one in s.launches]
    assert ranks == [("2", "0"), ("2", "1")] * 2
    assert dict(s.launches[0].env)["SGLANG_PP_LAYER_PARTITION"] == "17,15,15,14"

    t = emit_trtllm(plan)
    yaml = t.files[0][1]
    assert "enable_attention_dp: true" in yaml and "moe_expert_parallel_size: 4" in yaml
    assert "pp_partition: [17, 15, 15, 14]" in yaml
    assert _arg(t.launches[0].argv, "--max_batch_size") == str(8192 // 4)
    assert "srun -N 2" in t.launches[0].label


def test_script_is_valid_shell_text(acceptance):
    for plan in acceptance.values():
        for engine in ("vllm", "sglang", "trtllm"):
            script = emit(plan, engine).script()
            # here-documents end; placeholders stay expandable ("$NODE0_IP", never '$NODE0_IP')
            assert script.count("<<'EOF'") == script.count("\nEOF\n")
            assert "'$NODE" not in script


def test_fp8_cache_and_memory_cap():
    plan = plan_of("llama-3.1-70b", "8xH100", kv_dtype="fp8", mem_cap_gib=60, tp=8)
    assert _arg(emit_vllm(plan).launches[0].argv, "--kv-cache-dtype") == "fp8"
    assert _arg(emit_vllm(plan).launches[0].argv, "--gpu-memory-utilization") == "0.75"
    assert _arg(emit_sglang(plan).launches[0].argv, "--kv-cache-dtype") == "fp8_e4m3"
    t = emit_trtllm(plan)
    assert "kv_cache_config:\n  free_gpu_memory_fraction: " in t.files[0][1] and "\n  dtype: fp8" in t.files[0][1]


def test_launch_memory_fractions_are_what_the_plan_assumed():
    # One stage of tp 8 with a 60 GiB cap on 80 GiB GPUs: each engine's flag, by hand from the plan's own memory.
    plan = plan_of("llama-3.1-70b", "8xH100", mem_cap_gib=60, tp=8)
    (m,) = plan.prediction.memory
    assert m.capacity_gib == 80 and m.limit_gib == 60
    reserve = m.runtime_gib + m.comm_buffers_gib + m.activations_gib
    assert float(_arg(emit_vllm(plan).launches[0].argv, "--gpu-memory-utilization")) == 0.75  # 60 / 80
    static = float(_arg(emit_sglang(plan).launches[0].argv, "--mem-fraction-static"))
    assert static == pytest.approx((60 - reserve) / 80, abs=5e-4)  # weights + KV pool
    line = next(x for x in emit_trtllm(plan).files[0][1].splitlines() if "free_gpu_memory_fraction" in x)
    free = 80 - m.weights_gib - reserve  # what TensorRT-LLM finds free after loading
    assert float(line.split(":")[1]) == pytest.approx((60 - m.weights_gib - reserve) / free, abs=5e-4)
    # the flags leave the plan's KV room: static pool less weights, and the free share, are the same GiB
    assert static * 80 - m.weights_gib == pytest.approx(float(line.split(":")[1]) * free, abs=0.1)


def test_uneven_stages_are_passed():
    plan = plan_of("llama-3.1-70b", "8xH100", tp=4, stages=((0, 30), (30, 80)))
    assert dict(emit_vllm(plan).launches[0].env)["VLLM_PP_LAYER_PARTITION"] == "30,50"
    assert dict(emit_sglang(plan).launches[0].env)["SGLANG_PP_LAYER_PARTITION"] == "30,50"
    assert "pp_partition: [30, 50]" in emit_trtllm(plan).files[0][1]


def test_what_an_engine_cannot_express_is_said():
    sp = plan_of("llama-3.1-70b", "8xH100", tp=4, sp=2)
    assert any("sp=2" in n for n in emit_vllm(sp).notes)
    assert _arg(emit_vllm(sp).launches[0].argv, "--prefill-context-parallel-size") == "2"
    assert any("sp=2" in n for n in emit_sglang(sp).notes)
    assert any("sp=2" in n for n in emit_trtllm(sp).notes)
    # Two attention groups of 4: TensorRT-LLM knows groups of 1 or one group of all.
    groups = plan_of("deepseek-v3", "8xH200", tp=4, attn_dp=2)
    assert any("groups of one" in n for n in emit_trtllm(groups).notes)
    assert any("dense FFN" in n for n in emit_sglang(groups).notes)
    for engine in ("vllm", "sglang", "trtllm"):
        em = emit(groups, engine)
        assert all(f"# NOTE: {n}" in em.script() for n in em.notes)


def test_replicas_on_one_node_get_their_own_gpus_and_ports():
    plan = plan_of("mixtral-8x7b", "8xH100", "throughput", batch=64, dp=4, tp=2)
    v = emit_vllm(plan)  # MoE: one deployment per replica
    assert [dict(one.env).get("CUDA_VISIBLE_DEVICES") for one in v.launches] == ["0,1", "2,3", "4,5", "6,7"]
    assert [_arg(one.argv, "--port") for one in v.launches] == ["8000", "8001", "8002", "8003"]
    dense = plan_of("llama-3.1-8b", "8xH100", "throughput", batch=64, dp=4, tp=2)
    d = emit_vllm(dense)  # dense: one deployment, replicas as data-parallel ranks
    assert len(d.launches) == 1 and _arg(d.launches[0].argv, "--data-parallel-size") == "4"


def test_unknown_engine_is_bad_input(acceptance):
    with pytest.raises(SpecError, match="unknown engine"):
        emit(acceptance["llama-70b"], "tgi")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engines_own_parser_when_installed(acceptance, engine):
    """Where the engine is installed, its own argument parser reads every emitted command."""
    if engine == "vllm":
        pytest.importorskip("vllm.entrypoints.cli.serve", reason="vLLM is not installed (see engine_options.py)")
    else:
        pytest.importorskip("sglang.srt.server_args", reason="SGLang is not installed (see engine_options.py)")
    from tests.unit.solver.outputs import refresh_engine_options as engines

    for plan in acceptance.values():
        for launch in emit(plan, engine).launches:
            argv = list(launch.argv)
            if engine == "vllm":
                from vllm.entrypoints.cli.serve import ServeSubcommand

                ServeSubcommand().validate(engines.vllm_parser().parse_args(argv[1:]))
            else:
                from sglang.srt.server_args import prepare_server_args

                prepare_server_args(argv[3:])


def test_launch_commands_carry_the_plans_batch_limit_and_token_budget():
    # The engine runs what the plan priced: its batch limit per rank and the chunked-prefill token budget
    # (the profile's max_num_tokens) that the plan's TTFT and TPOT under load were computed with.
    plan = plan_of("llama-3.1-8b", "2xH100", "throughput", batch=96, tp=2)
    budget = str(resolve_profile(plan.problem).max_num_tokens)
    v = emit_vllm(plan).launches[0].argv
    assert _arg(v, "--max-num-seqs") == "96" and _arg(v, "--max-num-batched-tokens") == budget
    s = emit_sglang(plan).launches[0].argv
    assert _arg(s, "--max-running-requests") == "96" and _arg(s, "--chunked-prefill-size") == budget
    t = emit_trtllm(plan).launches[0].argv
    assert _arg(t, "--max_batch_size") == "96" and _arg(t, "--max_num_tokens") == budget
