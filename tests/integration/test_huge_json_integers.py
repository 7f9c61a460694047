"""A JSON integer larger than any float (1 followed by 400 zeros) is refused where the file is read, as ``1e400``
is: the checks and costs read numbers as floats, where it raised OverflowError (exit 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shardplan.models import SpecError
from shardplan.models.files import parse_json
from shardplan.models.presets import CONFIG_DIR
from tests.fuzz.cases import Case
from tests.fuzz.harness import problems, run_in_process

HUGE = "1" + "0" * 400


def _dag(tmp_path: Path) -> str:
    """A valid DAG's text: Llama-3.1-8B at TP 2."""
    path = tmp_path / "dag.json"
    subprocess.run([sys.executable, "-m", "shardplan.solver.cli", "solve", "--model", "llama-3.1-8b", "--cluster",
                    "2xH100", "--tp", "2", "--no-runner-up", "--dag", str(path)], check=True, capture_output=True,
                   timeout=300)
    text = path.read_text()
    path.unlink()
    return text


def _run(tmp_path: Path, argv: list[str], files: dict[str, bytes]) -> tuple[int, str]:
    case = Case(argv[0], argv, files)
    outcome = run_in_process(case, tmp_path)
    assert problems(outcome, case) == []
    assert outcome.written == []  # nothing beside the inputs
    return outcome.code, outcome.stderr.strip()


def test_a_dag_time_too_large_for_a_float_is_refused(tmp_path):
    # validate: DAG-022 compared est_us as a float: OverflowError, 'internal error', exit 3.
    data = json.loads(_dag(tmp_path))
    data["nodes"][3]["est_us"] = 0
    text = json.dumps(data).replace('"est_us": 0,', f'"est_us": {HUGE},', 1)
    code, line = _run(tmp_path, ["validate", "{dir}/d.json"], {"d.json": text.encode()})
    assert code == 2
    assert line.startswith("shardplan: error: file: ") and "larger than any number a float holds" in line


def test_a_load_profile_count_too_large_for_a_float_is_refused(tmp_path):
    layers = {str(layer): [1] * 128 for layer in range(48)}
    text = json.dumps({"layers": layers}).replace("[1,", f"[{HUGE},", 1).replace("[1, ", f"[{HUGE}, ", 1)
    code, line = _run(tmp_path, ["evaluate", "--model", "qwen3-30b-a3b", "--cluster", "8xH100", "--tp", "8",
                                 "--ep", "8", "--load-profile", "{dir}/lp.json"], {"lp.json": text.encode()})
    assert code == 2
    assert line.startswith("shardplan: error: load-profile") and "larger than any number a float holds" in line


def test_a_config_integer_of_thousands_of_digits_is_named_as_too_large():
    # Past 4,300 digits int() refuses the literal: 'not valid JSON (ValueError)', which named nothing.
    cfg = (CONFIG_DIR / "llama-3.1-8b.json").read_text().replace('"hidden_size": 4096', f'"hidden_size": 1{"0" * 5000}')
    with pytest.raises(SpecError) as err:
        parse_json(cfg, "model", "c.json")
    assert err.value.field == "model" and "larger than any number a float holds" in err.value.reason


@pytest.mark.parametrize("text", ["1" + "0" * 308, "-" + "1" * 300, "17976931348623157" + "0" * 292])
def test_integers_a_float_holds_still_parse(text):
    assert parse_json(f"[{text}]", "model", "c.json") == [int(text)]
