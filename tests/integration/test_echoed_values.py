"""A value or path echoed back (an error line, a note, "wrote PATH", a name read from an input file) is plain
text on one line: every character a terminal acts on (ESC, CR, BEL, line separators) is shown as its escape.
A path with ESC]0;...BEL retitled the terminal window; one with CR overwrote the error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardplan.hardware.profile import PROFILE_DIR
from shardplan.models.errors import printable, quoted
from tests.fuzz.cases import Case, preset_config
from tests.fuzz.harness import run_in_process

SMALL = ["--model", "llama-3.1-8b", "--cluster", "1xH100"]
HOSTILE = "a\x1b]0;pwned\x07\rb\u2028c"  # retitles the window, returns to the line start, a line separator
SHOWN = "a\\x1b]0;pwned\\x07\\rb\\u2028c"  # what is printed instead


def _is_plain(text: str) -> bool:
    return all(line.isprintable() for line in text.split("\n"))


def test_printable_escapes_what_a_terminal_acts_on_and_keeps_the_rest() -> None:
    assert printable(HOSTILE) == SHOWN
    assert printable("x\udcffy\tz") == "x\\udcffy\\tz"  # an undecodable byte of a file name, a tab
    assert printable("llama 3.1 (8B) é") == "llama 3.1 (8B) é"
    assert quoted(HOSTILE) == repr(HOSTILE).replace("\u2028", "\\u2028")  # repr leaves U+2028 as it is


@pytest.mark.parametrize("argv", [
    ["solve", "--model", f"{{dir}}/{HOSTILE}.json", "--cluster", "1xH100"],  # our own "cannot read PATH"
    ["evaluate", "--model", "qwen3-30b-a3b", "--cluster", "2xH100", "--load-profile", f"{{dir}}/{HOSTILE}.json"],
    ["solve", *SMALL, "--dag", f"{{dir}}/{HOSTILE}/d.json"],  # an output folder that is missing
], ids=["model", "load-profile", "dag"])
def test_an_echoed_path_is_one_plain_line(tmp_path: Path, argv: list[str]) -> None:
    outcome = run_in_process(Case(argv[0], argv, {}), tmp_path)
    assert outcome.code == 2 and outcome.stderr.count("\n") == 1, outcome.stderr
    assert _is_plain(outcome.stderr) and SHOWN in outcome.stderr, outcome.stderr


def test_a_config_files_name_is_printed_escaped_as_the_models_name(tmp_path: Path) -> None:
    config = {k: v for k, v in preset_config("llama-3.1-8b").items() if k != "_shardplan_id"}
    argv = ["solve", "--model", f"{{dir}}/{HOSTILE}.json", "--cluster", "1xH100", "--no-runner-up",
            "--report", f"{{dir}}/{HOSTILE}.html"]  # and "wrote PATH"
    outcome = run_in_process(Case("solve", argv, {f"{HOSTILE}.json": json.dumps(config).encode()}), tmp_path)
    assert outcome.code == 0, outcome.stderr
    assert _is_plain(outcome.stdout) and outcome.stdout.startswith(f"{SHOWN} on "), outcome.stdout[:200]
    assert f"wrote {tmp_path}/{SHOWN}.html\n" in outcome.stdout


def test_a_profile_files_words_are_printed_escaped(tmp_path: Path) -> None:
    data = json.loads((PROFILE_DIR / "h100-sxm-vllm.json").read_text())
    argv = ["solve", *SMALL, "--no-runner-up", "--profile", "{dir}/p.json"]
    outcome = run_in_process(Case("solve", argv, {"p.json": json.dumps({**data, "name": HOSTILE}).encode()}),
                             tmp_path)
    assert outcome.code == 0, outcome.stderr
    assert _is_plain(outcome.stdout) and f"calibration profile {SHOWN}\n" in outcome.stdout


def test_validate_prints_a_dag_files_path_and_node_names_escaped(tmp_path: Path) -> None:
    made = run_in_process(Case("solve", ["solve", *SMALL, "--no-runner-up", "--dag", "{dir}/d.json"], {}), tmp_path)
    assert made.code == 0, made.stderr
    dag = json.loads((tmp_path / "d.json").read_text())
    first = dag["nodes"][0]["id"]
    dag["nodes"][0]["id"] = HOSTILE  # a node of the file's own naming, in a cycle: a diagnostic quotes it
    dag["edges"] = [{**e, **{end: HOSTILE for end in ("source", "target") if e[end] == first}} for e in dag["edges"]]
    dag["edges"].append({**dag["edges"][0], "source": HOSTILE, "target": HOSTILE})
    files = {f"{HOSTILE}.json": json.dumps(dag).encode()}
    outcome = run_in_process(Case("validate", ["validate", f"{{dir}}/{HOSTILE}.json"], files), tmp_path)
    assert outcome.code == 1, outcome.stderr
    assert _is_plain(outcome.stdout), outcome.stdout
    lines = outcome.stdout.strip().split("\n")
    assert any(f"{SHOWN}:" in line for line in lines[:-1]) and f"{SHOWN}.json: " in lines[-1], lines
