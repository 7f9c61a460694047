"""Hostile inputs found by hand beyond those of issue 14's text (its acceptance 5): repeated JSON keys,
calibration profile files at extremes or that are FIFOs, outputs on pseudo-filesystems or symlink loops,
a closed stdout, and an MCP profile path outside the root. Each ends with exit 0, 1 or 2 and one line,
and writes nothing on error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from shardplan.hardware import profile as profile_module
from shardplan.hardware.profile import PROFILE_DIR, Profile, list_profiles, profile_from_data
from shardplan.models import SpecError
from shardplan.models.files import parse_json, read_text
from shardplan.solver.cost.calibration.points import REQUIRED_COLUMNS
from shardplan.solver.dag.export import to_mermaid
from shardplan.solver.mcp import tools
from shardplan.solver.mcp.safety import Root, TimeLimits
from shardplan.solver.mcp.schemas import PlanInput
from tests.fuzz.cases import Case, preset_config
from tests.fuzz.harness import problems, run_in_process

SMALL = ["--model", "llama-3.1-8b", "--cluster", "1xH100"]


def _run(tmp_path: Path, argv: list[str], files: dict[str, bytes] | None = None) -> tuple[int, str]:
    """(exit code, the one stderr line) of an in-process run; the fuzz harness's judgement must pass."""
    case = Case(argv[0], argv, files or {})
    outcome = run_in_process(case, tmp_path)
    assert problems(outcome, case) == []
    return outcome.code, outcome.stderr.strip()


def test_a_key_given_twice_is_refused_naming_it():
    with pytest.raises(SpecError) as err:
        parse_json('{"num_hidden_layers": 1e9, "hidden_size": 8, "num_hidden_layers": 32}', "model", "c.json")
    assert err.value.field == "model" and "'num_hidden_layers'" in str(err.value)


@pytest.mark.parametrize(("argv", "field"), [
    (["evaluate", "--model", "a\0b.json"], "model"),
    (["solve", *SMALL, "--dag", "{dir}/a\0b.json"], "dag"),
    (["solve", *SMALL, "--report={dir}/a\0b.html"], "report"),
    (["validate", "a\0b.json"], "argument"),
    (["calibrate", "p.csv", "--out", "p.json", "--ops", "a\0b.csv"], "ops"),
    (["mcp", "--root", "a\0b"], "root"),
])
def test_an_argument_with_a_nul_byte_is_bad_input(tmp_path, argv, field):
    # No command line can carry one (execve ends the argument there), but main(argv) in-process can: os.stat,
    # click's path checks and realpath raised ValueError, an internal error (exit 3).
    code, line = _run(tmp_path, argv)
    assert (code, line) == (2, f"shardplan: error: {field}: contains a NUL byte")


def test_read_text_names_a_path_with_a_nul_byte():
    with pytest.raises(SpecError) as err:
        read_text("a\0b.json", "model")
    assert err.value.field == "model" and "is not a path" in err.value.reason


def test_a_config_with_a_repeated_key_is_bad_input(tmp_path):
    text = json.dumps(preset_config("llama-3.1-8b"))[:-1] + ', "num_hidden_layers": 100000000}'
    code, line = _run(tmp_path, ["evaluate", "--model", "{dir}/c.json", "--cluster", "1xH100"],
                      {"c.json": text.encode()})
    assert code == 2 and line.startswith("shardplan: error: model:") and "repeats the key" in line


def _profile_with(**fields: object) -> bytes:
    data = json.loads((PROFILE_DIR / "h100-sxm-vllm.json").read_text())
    return json.dumps({**data, "name": "t", **fields}).encode()


@pytest.mark.parametrize(("field", "value"), [
    ("gemm_efficiency", 5e-324),  # made every time infinite: OverflowError
    ("max_batch", 10**30),  # overflowed the solver's integers
    ("runtime_overhead_gib", 1e308),  # infinite bytes
    ("gemm_efficiency", True),  # read as 1.0 before
])
def test_a_profile_file_at_an_extreme_names_the_field(tmp_path, field, value):
    code, line = _run(tmp_path, ["solve", *SMALL, "--objective", "throughput", "--profile", "{dir}/p.json", "--json"],
                      {"p.json": _profile_with(**{field: value})})
    assert code == 2 and line.startswith(f"shardplan: error: profile {field}:")


def test_every_shipped_profile_is_inside_the_file_bounds():
    for profile in list_profiles():
        assert profile_from_data(json.loads(profile.model_dump_json()), profile.name) == profile


def test_every_priced_profile_field_has_a_file_range():
    # A field added to the profile without a range let Infinity through (attention_fixed_us: exit 3).
    unranged = set(Profile.model_fields) - set(profile_module._FILE_LIMITS) - set(profile_module._UNPRICED)
    assert unranged == set()


@pytest.mark.parametrize("field", ["attention_fixed_us", "full_width_passes", "ttft_queue_share",
                                   "low_precision_stream_ratio", "ttft_wait_steps"])
def test_a_new_profile_field_at_infinity_names_the_field(field):
    data = json.loads(list_profiles()[0].model_dump_json()) | {field: float("inf")}
    with pytest.raises(SpecError) as err:
        profile_from_data(data, "p.json")
    assert err.value.field == f"profile {field}"


def test_a_fifo_as_profile_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "p.json")
    code, line = _run(tmp_path, ["evaluate", *SMALL, "--profile", "{dir}/p.json"])
    assert code == 2 and line.startswith("shardplan: error: profile:") and "not a regular file" in line


@pytest.mark.parametrize("target", ["/proc/x.json", "/sys/x.json"])
def test_an_output_on_a_pseudo_filesystem_is_refused_before_solving(tmp_path, target):
    # Root passes os.access there; creating the file is what fails.
    code, line = _run(tmp_path, ["solve", *SMALL, "--no-runner-up", "--dag", target])
    assert code == 2 and line.startswith("shardplan: error: dag: cannot write to")


def test_an_output_that_is_a_symlink_loop_is_refused(tmp_path):
    (tmp_path / "a.json").symlink_to("b.json")
    (tmp_path / "b.json").symlink_to("a.json")
    code, line = _run(tmp_path, ["solve", *SMALL, "--no-runner-up", "--report", "{dir}/a.json"])
    assert code == 2 and line.startswith("shardplan: error: report: cannot use")


def test_a_closed_stdout_ends_quietly(tmp_path):
    # stdout is None in Python then; the console used to call None.isatty() at import (exit 1, a traceback).
    run = subprocess.run(
        [sys.executable, "-m", "shardplan.solver.cli", "evaluate", *SMALL, "--json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path, pass_fds=(), close_fds=True,
        preexec_fn=lambda: os.close(1),
    )
    assert (run.returncode, run.stderr) == (0, b"")


def test_mcp_profile_paths_stay_inside_the_root(tmp_path):
    session = tools.Session(Root(str(tmp_path)), TimeLimits())
    with pytest.raises(SpecError) as err:
        tools.plan(PlanInput.model_validate({"model": "llama-3.1-8b", "cluster": "1xH100",
                                             "profile": "../../etc/passwd"}), session)
    assert err.value.field == "profile" and "outside --root" in str(err.value)
    (tmp_path / "p.json").write_bytes(_profile_with(gemm_efficiency=5e-324))
    with pytest.raises(SpecError) as err:
        tools.plan(PlanInput.model_validate({"model": "llama-3.1-8b", "cluster": "1xH100", "profile": "p.json"}),
                   session)
    assert err.value.field == "profile gemm_efficiency"


def test_mermaid_renders_nodes_whose_replica_or_stage_mix_numbers_and_none():
    # Found by the cyclic-DAG fuzz cases: sorting None with 0 raised TypeError under validate --fix --out x.mmd.
    dag = nx.DiGraph()
    dag.add_node("a", replica=0, phase="decode", stage=0, kind="compute")
    dag.add_node("b", replica=None, phase="decode", stage="1", kind="compute")
    dag.add_node("c", replica="x", phase="decode", stage=None, kind="compute")
    dag.add_edges_from([("a", "b"), ("b", "c")])
    text = to_mermaid(dag)
    # one subgraph per (replica, phase): 0, None and "x", all in the decode phase
    assert [line.split("[")[0].strip() for line in text.splitlines() if "subgraph r" in line and "_s" not in line] == [
        "subgraph r0_decode", "subgraph rNone_decode", "subgraph rx_decode"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_stdout_is_one_line_and_the_unusable_output_code(tmp_path):
    # Every write to /dev/full fails with ENOSPC: the result cannot be delivered, which is not a bug (3).
    with open("/dev/full", "wb") as full:
        run = subprocess.run(
            [sys.executable, "-m", "shardplan.solver.cli", "evaluate", *SMALL, "--json"],
            stdout=full, stderr=subprocess.PIPE, cwd=tmp_path,
        )
    lines = run.stderr.decode().splitlines()
    assert run.returncode == 2
    assert lines == ["shardplan: error: cannot write standard output: No space left on device"]


LONG = "x" * 100_000
SERVING = ["--model", "llama-3.1-8b", "--cluster", "8xH100", "--serving", "disagg"]


@pytest.mark.parametrize("argv", [
    # Each quoted the whole value back: a 100 kB error line.
    ["evaluate", *SMALL, "--weights-dtype", LONG],
    ["evaluate", *SMALL, "--kv-dtype", LONG],
    ["evaluate", *SMALL, "--profile", LONG],
    ["evaluate", *SMALL, "--allow", LONG],
    ["rules", LONG],
    ["calibrate", "{dir}/p.csv", "--out", "{dir}/p.json", "--software", LONG],
    ["calibrate", "{dir}/p.csv", "--out", "{dir}/p.json", "--gpu", LONG],
    ["evaluate", *SERVING, "--prefill", "workers=1," + "k" * 4000 + "=1", "--decode", "workers=1"],
    ["evaluate", *SERVING, "--prefill", "workers=1", "--decode", "workers=" + "1" * 4000],
    ["evaluate", *SERVING, "--prefill", "workers=1", "--decode", "w" * 4000],
], ids=["weights-dtype", "kv-dtype", "profile", "allow", "rules", "software", "gpu", "pool-key", "pool-value",
        "pool-part"])
def test_a_huge_value_is_not_quoted_back_whole(tmp_path, argv):
    header = ",".join(REQUIRED_COLUMNS).encode() + b"\n"  # no rows: calibrate reaches --gpu and --software
    code, line = _run(tmp_path, argv, {"p.csv": header})
    assert code == 2 and len(line) < 1000, (code, len(line))


def test_a_load_profile_whose_layer_total_overflows_is_bad_input_not_nan_in_the_json(tmp_path):
    layers = {str(i): [1.0] * 128 for i in range(48)} | {"3": [1e308] * 128}
    argv = ["evaluate", "--model", "qwen3-30b-a3b", "--cluster", "2xH100", "--tp", "2", "--json",
            "--load-profile", "{dir}/load.json"]
    code, line = _run(tmp_path, argv, {"load.json": json.dumps({"layers": layers}).encode()})
    assert code == 2 and line.startswith("shardplan: error: load-profile loads[3][0]:")


@pytest.mark.parametrize("name", ["[/bold]", "[link=https://example.com]x[/link]"])
def test_a_name_from_an_input_file_is_printed_as_text_not_markup(tmp_path, name):
    # rich read it as markup: "[/bold]" ended in MarkupError (exit 3), a [link=...] became a link.
    case = Case("solve", ["solve", *SMALL, "--no-runner-up", "--profile", "{dir}/p.json"],
                {"p.json": _profile_with(name=name)})
    outcome = run_in_process(case, tmp_path)
    assert outcome.code == 0, outcome.stderr
    assert f"calibration profile {name}\n" in outcome.stdout


def test_a_read_only_output_is_refused_and_kept(tmp_path):
    # The rename that puts an output in place needs only the folder's permission: it replaced the file anyway.
    kept = tmp_path / "plan.html"
    kept.write_text("KEEP")
    kept.chmod(0o444)
    code, line = _run(tmp_path, ["solve", *SMALL, "--no-runner-up", "--report", "{dir}/plan.html"])
    assert code == 2 and line.startswith("shardplan: error: report:") and line.endswith("is read-only")
    assert kept.read_text() == "KEEP"


def test_rate_on_a_model_no_layout_holds_names_the_memory_not_the_rate(tmp_path):
    # It named SLA-001, "no colocated replicas sustain 1 requests/s within the limits", with no limit given.
    code, line = _run(tmp_path, ["solve", "--model", "llama-3.1-70b", "--cluster", "1xH100", "--rate", "1"])
    assert code == 1 and line.startswith("shardplan: infeasible: MEM-001: colocated: needs at least")
