"""Launch scripts are data, not code (issue 14): a hostile model id is refused where the config is read,
the emitters refuse a name that is not a Hugging Face id, and every script, hostile values included,
parses under ``bash -n`` and, run with stub engines on PATH, starts nothing but engine invocations."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from shardplan.models import SpecError
from shardplan.models.presets import find_preset
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cli.main import main
from shardplan.solver.outputs.launch import EMITTERS, Emitted, Launch, emit
from shardplan.solver.outputs.launch.common import head_address
from shardplan.solver.placement.plan import place_and_price
from tests.unit.solver.outputs.test_emit import plan_of

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")
ENGINES = sorted(EMITTERS)
# Programs an emitted script may start: the engines (and what starts them) and cat for its files.
STUBS = ("vllm", "python", "python3", "trtllm-serve", "trtllm-llmapi-launch", "mpirun", "srun", "ray", "cat")
MARK = "PWNED"  # every hostile value tries to create this file in the script's folder


def hostile_values() -> list[str]:
    return [
        f"x\ntouch {MARK}",
        f"$(touch {MARK})",
        f"`touch {MARK}`",
        f"'; touch {MARK}; '",
        f'"; touch {MARK}; "',
        f"EOF\ntouch {MARK}\nEOF",
        f"$NODE0_IP$(touch {MARK})",
        f"a\\\ntouch {MARK}",
        f"x\r\ntouch {MARK} #",
        "--trust-remote-code",
        "/etc/passwd",
        "../../etc/passwd",
    ]


def write_config(folder: Path, model_id: str) -> Path:
    preset = find_preset("llama-3.1-8b")
    assert preset is not None
    source = json.loads(preset.path.read_text())
    source["_shardplan_id"] = model_id
    path = folder / "config.json"
    path.write_text(json.dumps(source))
    return path


def stub_bin(folder: Path) -> tuple[Path, Path]:
    """A bin folder of stubs that append their name and argv (NUL-separated) to a log, and the log."""
    bin_dir, log = folder / "bin", folder / "argv.log"
    bin_dir.mkdir()
    real_cat = shutil.which("cat")
    for name in STUBS:
        body = f'#!{BASH}\nprintf "%s\\0" "{name}" "$@" >> "{log}"\nprintf "\\n" >> "{log}"\n'
        if name == "cat":
            body += f'exec {real_cat} "$@"\n'
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir, log


def run_script(script: str, folder: Path) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    """``bash -n``, then the script with only the stubs on PATH; the argv of every program it started."""
    path = folder / "launch.sh"
    path.write_text(script)
    syntax = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    bin_dir, log = stub_bin(folder)
    env = {"PATH": str(bin_dir), "HOME": str(folder), **{f"NODE{k}_IP": f"10.0.0.{k}" for k in range(64)}}
    done = subprocess.run([BASH, str(path)], capture_output=True, text=True, cwd=folder, env=env, timeout=60)
    calls = [entry.split("\0") for entry in log.read_bytes().decode().split("\0\n") if entry] if log.exists() else []
    return done, calls


def check_only_engines_ran(done: subprocess.CompletedProcess[str], calls: list[list[str]], folder: Path) -> None:
    assert not (folder / MARK).exists(), "a hostile value ran a command"
    assert "command not found" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    for argv in calls:
        assert argv[0] in STUBS, argv


# --- the config is refused where it is read -----------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("model_id", hostile_values())
def test_a_hostile_id_is_refused_when_the_config_is_read(engine, model_id, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, model_id)
    with pytest.raises(SystemExit) as done:
        main(["solve", "--model", str(config), "--cluster", "1xH100", "--emit", engine])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert len(err.strip().splitlines()) == 1 and "_shardplan_id" in err
    assert not (tmp_path / MARK).exists()


LOCAL_PATHS = ("/etc/passwd", "../../etc/passwd")  # the hostile values a checkpoint folder's name could be


def renamed_plan(name: str) -> Plan:
    plan = plan_of("llama-3.1-8b", "1xH100")
    problem = plan.problem.model_copy(update={"model": plan.problem.model.model_copy(update={"name": name})})
    return Plan(problem=problem, layout=plan.layout, prediction=plan.prediction, status="evaluated")


NO_FOLDERS = ["/x\ntouch PWNED", "~x", ".x"]  # path-like, but a control character, or no folder's spelling


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", [v for v in hostile_values() if v not in LOCAL_PATHS] + NO_FOLDERS)
def test_the_emitters_refuse_a_name_that_is_no_hugging_face_id_or_folder(engine, name):
    with pytest.raises(SpecError) as refused:
        emit(renamed_plan(name), engine)
    assert refused.value.field == "model"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", LOCAL_PATHS)
def test_a_folder_s_path_is_launched_as_one_argument(engine, name, tmp_path):
    """A model named by its checkpoint folder (``load_config_file``) is what the engines load: the script hands
    the path to the engine as one argument and starts nothing else (the path itself is never opened)."""
    done, calls = run_script(emit(renamed_plan(name), engine).script(), tmp_path)
    check_only_engines_ran(done, calls, tmp_path)
    assert all(name in argv for argv in calls if argv[0] != "cat")


def test_no_emitter_opens_a_path_named_by_the_config(tmp_path, monkeypatch):
    """The weights note compares with the preset's checkpoint; a config's name is never opened."""
    opened: list[str] = []
    real_open = Path.read_text

    def spy(self, *args, **kwargs):
        opened.append(str(self))
        return real_open(self, *args, **kwargs)

    plan = plan_of("llama-3.1-8b", "1xH100")
    renamed = plan.problem.model.model_copy(update={"name": "etc/passwd"})
    problem = plan.problem.model_copy(update={"model": renamed})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("{}")
    monkeypatch.setattr(Path, "read_text", spy)
    for engine in ENGINES:
        emit(Plan(problem=problem, layout=plan.layout, prediction=plan.prediction, status="evaluated"), engine)
    assert not any("passwd" in path for path in opened)


# --- every emitted script runs only engines ------------------------------------------------------------


def moe_plan() -> Plan:
    """Qwen3-30B-A3B over two nodes with Zipf routing: multi-node commands, $NODEk_IP and placement files."""
    problem = build_problem(ProblemArgs(model="qwen3-30b-a3b", cluster="2x8xH100", zipf=1.2, redundant_slots=1))
    layout = Layout.even(problem.model.num_layers, 2, tp=8, batch=4)
    layout, prediction, experts = place_and_price(problem, layout)
    return Plan(problem=problem, layout=layout, prediction=prediction, status="evaluated", experts=experts)


PLANS = {
    "dense-1-node": lambda: plan_of("llama-3.1-8b", "8xH100", dp=2, tp=4),
    "dense-2-nodes": lambda: plan_of("llama-3.1-70b", "2x8xH100", tp=8, pp=2, mem_cap_gib=70.0),
    "moe-2-nodes": moe_plan,
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("shape", sorted(PLANS))
def test_emitted_scripts_start_only_engines(engine, shape, tmp_path):
    script = emit(PLANS[shape](), engine).script()
    done, calls = run_script(script, tmp_path)
    check_only_engines_ran(done, calls, tmp_path)
    assert any(argv[0] != "cat" for argv in calls)


@pytest.mark.parametrize("value", hostile_values())
def test_hostile_values_anywhere_in_a_script_stay_data(value, tmp_path):
    """Every field of an ``Emitted`` carries the hostile value; the engine receives it as one argument."""
    launches = (
        Launch(label=value, argv=("vllm", "serve", value, "--opt", value, "--addr", head_address(0)),
               env=(("VLLM_X", value),)),
        Launch(label="second", argv=("python3", "-m", "sglang.launch_server", "--model-path", value)),
    )
    emitted = Emitted(engine="vllm", version=value, summary=value, launches=launches,
                      files=(("options.yaml", f"a: 1\n{value}\nEOF\n"),), notes=(value,), heads=(head_address(0),))
    done, calls = run_script(emitted.script(), tmp_path)
    check_only_engines_ran(done, calls, tmp_path)
    assert calls[-2][:3] == ["vllm", "serve", value] and calls[-2][4] == value
    assert calls[-1][-1] == value
    assert (tmp_path / "options.yaml").read_bytes().decode() == f"a: 1\n{value}\nEOF\n".rstrip() + "\n"


def test_a_checkpoint_folder_is_launched_by_its_path(tmp_path, capsys, monkeypatch):
    """``--model FOLDER`` (its config.json without an ``_shardplan_id``): the engine is handed the folder."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "my tuned llama"
    folder.mkdir()
    config = json.loads(write_config(tmp_path, "x/y").read_text())
    del config["_shardplan_id"]
    (folder / "config.json").write_text(json.dumps(config))
    main(["solve", "--model", str(folder), "--cluster", "1xH100", "--emit", "vllm", "--no-runner-up"])
    run, calls = run_script(capsys.readouterr().out, tmp_path)
    check_only_engines_ran(run, calls, tmp_path)
    assert calls[-1][:3] == ["vllm", "serve", str(folder)]


def test_a_valid_but_unusual_id_is_launched_verbatim(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, "my-org.x/Model_v1.2-beta")
    main(["solve", "--model", str(config), "--cluster", "1xH100", "--emit", "vllm", "--no-runner-up"])
    out = capsys.readouterr().out
    run, calls = run_script(out, tmp_path)
    check_only_engines_ran(run, calls, tmp_path)
    assert calls[-1][:3] == ["vllm", "serve", "my-org.x/Model_v1.2-beta"]

