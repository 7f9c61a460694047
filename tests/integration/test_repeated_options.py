"""An option that takes one value, given twice, is bad input on every command: one line naming it on stderr,
exit 2, nothing on stdout and no file written. click kept the last value silently (``solve --tp 4 --tp 8``
planned tp 8). ``--allow`` (``multiple=True``) still repeats, and so does a flag with no ``--no-`` form."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from shardplan.solver.cli import main
from shardplan.solver.cli.main import cli

BAD_INPUT = 2
LLAMA_8B = ["--model", "llama-3.1-8b", "--cluster", "1xH100"]
QWEN3_MOE = ["--model", "qwen3-30b-a3b", "--cluster", "2xH100", "--ep", "2"]

CASES = [
    # (id, a command line that writes {out}, the repetition added to it, the one line expected, whether the line
    # without the repetition runs and writes {out}: calibrate, validate and mcp are given dummy inputs here)
    ("solve-tp", ["solve", "--model", "llama-3.1-8b", "--cluster", "8xH100", "--tp", "4", "--no-runner-up",
                  "--report", "{out}"], ["--tp", "8"],
     "shardplan: error: tp: given 2 times, but it takes one value; give it once", True),
    ("solve-ttft-ms-equals-form", ["solve", *LLAMA_8B, "--ttft-ms=2000", "--no-runner-up", "--dag", "{out}"],
     ["--ttft-ms", "500"], "shardplan: error: ttft-ms: given 2 times, but it takes one value; give it once", True),
    ("solve-same-value-three-times", ["solve", *LLAMA_8B, "--isl", "512", "--no-runner-up", "--report", "{out}"],
     ["--isl=512", "--isl", "512"], "shardplan: error: isl: given 3 times, but it takes one value; give it once",
     True),
    ("solve-runner-up-and-not", ["solve", *LLAMA_8B, "--no-runner-up", "--report", "{out}"], ["--runner-up"],
     "shardplan: error: runner-up: given 2 times, but it takes one value; give it once", True),
    ("solve-output-file", ["solve", *LLAMA_8B, "--no-runner-up", "--report", "{out}"], ["--report", "{out}.2"],
     "shardplan: error: report: given 2 times, but it takes one value; give it once", True),
    ("evaluate-batch", ["evaluate", *QWEN3_MOE, "--batch", "1", "--experts-out", "{out}"], ["--batch", "8"],
     "shardplan: error: batch: given 2 times, but it takes one value; give it once", True),
    ("evaluate-serving", ["evaluate", *QWEN3_MOE, "--serving", "colocated", "--experts-out", "{out}"],
     ["--serving=disagg"], "shardplan: error: serving: given 2 times, but it takes one value; give it once", True),
    ("enumerate-limit", ["enumerate", *LLAMA_8B, "--limit", "2", "--report", "{out}"], ["--limit", "3"],
     "shardplan: error: limit: given 2 times, but it takes one value; give it once", True),
    ("enumerate-mem-cap", ["enumerate", *LLAMA_8B, "--limit", "2", "--report", "{out}"],
     ["--mem-cap-gib", "40", "--mem-cap-gib", "60"],
     "shardplan: error: mem-cap-gib: given 2 times, but it takes one value; give it once", True),
    ("calibrate-gpu", ["calibrate", "{points}", "--out", "{out}", "--gpu", "H100"], ["--gpu", "H200"],
     "shardplan: error: gpu: given 2 times, but it takes one value; give it once", False),
    ("validate-out", ["validate", "{dag}", "--fix", "--out", "{out}"], ["--out", "{out}.2"],
     "shardplan: error: out: given 2 times, but it takes one value; give it once", False),
    ("mcp-time-limit", ["mcp", "--root", "{tmp}", "--time-limit", "5"], ["--time-limit", "10"],
     "shardplan: error: time-limit: given 2 times, but it takes one value; give it once", False),
]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """The exit code, stdout and stderr of ``shardplan ARGV`` run in this process."""
    try:
        main(argv)
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """The inputs the cases name (in ``inputs/``) and the output path they write (in ``out/``, empty)."""
    inputs, out = tmp_path / "inputs", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    (inputs / "points.csv").write_text("id\n")
    (inputs / "dag.json").write_text("{}")
    return {"points": str(inputs / "points.csv"), "dag": str(inputs / "dag.json"), "out": str(out / "result.json"),
            "tmp": str(tmp_path)}


@pytest.mark.parametrize("case_id, argv, repeated, line, runs_once", CASES, ids=[c[0] for c in CASES])
def test_an_option_given_twice_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path, files, case_id, argv,
                                                       repeated, line, runs_once):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, [a.format(**files) for a in [*argv, *repeated]])
    assert (code, err.splitlines(), out) == (BAD_INPUT, [line], "")
    assert list((tmp_path / "out").iterdir()) == []  # nothing written: neither the file nor a temporary beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs", "out"]


@pytest.mark.parametrize("case_id, argv, repeated, line, runs_once",
                         [c for c in CASES if c[4]], ids=[c[0] for c in CASES if c[4]])
def test_the_same_command_line_with_the_option_once_writes_its_file(capsys, files, case_id, argv, repeated, line,
                                                                     runs_once):
    """The cases' output option is live: without the repetition the command runs and writes the file."""
    code, _, err = run(capsys, [a.format(**files) for a in argv])
    assert code == 0, err
    assert Path(files["out"]).is_file()


def test_every_single_valued_option_of_every_command_is_refused_twice(capsys):
    """Each command's options as declared: any taking one value, given twice, is refused before the command
    reads anything (a command's FILE argument is not even needed)."""
    checked = 0
    for name, command in sorted(cli.commands.items()):
        for option in command.get_params(click.Context(command)):
            if not isinstance(option, click.Option) or option.multiple or option.is_eager:
                continue
            if option.is_flag and not option.secondary_opts:
                continue  # --json: the same each time (test_a_flag_given_twice_still_works)
            twice = [option.opts[0], option.secondary_opts[0]] if option.is_flag else [option.opts[0], "1"] * 2
            code, out, err = run(capsys, [name, *twice])
            expected = f"shardplan: error: {option.opts[0].lstrip('-')}: given 2 times, but it takes one value"
            assert (code, out, len(err.splitlines())) == (BAD_INPUT, "", 1), (name, twice, err)
            assert err.startswith(expected), (name, twice, err)
            checked += 1
    assert checked > 40  # solve, evaluate and enumerate share 25 options; calibrate, mcp and validate have more


def test_allow_given_twice_allows_both(capsys):
    """``--allow`` is ``multiple=True``: each one given turns its rule off (TP-003, EP-002 here)."""
    layout = ["evaluate", "--model", "qwen3-30b-a3b", "--cluster", "2x8xH100", "--tp", "16", "--ep", "8",
              "--expert-tp", "2", "--json"]
    code, out, _ = run(capsys, [*layout, "--allow", "expert-tp"])
    assert code == 1 and [v["rule"] for v in json.loads(out)["violations"]] == ["TP-003"]
    code, out, err = run(capsys, [*layout, "--allow", "tp-across-domains", "--allow", "expert-tp"])
    assert code == 0, err
    assert json.loads(out)["violations"] == []


def test_a_flag_given_twice_still_works(capsys):
    """A flag with no ``--no-`` form says the same each time it is given: harmless, so not refused."""
    code, out, err = run(capsys, ["evaluate", *LLAMA_8B, "--json", "--json"])
    assert (code, err) == (0, "")
    assert json.loads(out)["status"] == "evaluated"
    code, out, err = run(capsys, ["rules", "TP-001", "--json", "--json"])
    assert (code, err) == (0, "")
    assert json.loads(out)["id"] == "TP-001"
