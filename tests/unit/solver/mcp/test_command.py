"""``shardplan mcp``'s own options are checked before the SDK loads, and a missing SDK is one line."""

from __future__ import annotations

import sys

import pytest

from shardplan.solver.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    code = ended.value.code
    return (code if isinstance(code, int) else 0), capsys.readouterr().err


@pytest.mark.parametrize("argv,line", [
    (("--root", "/no/such/folder"), "shardplan: error: root: /no/such/folder is not a directory\n"),
    (("--time-limit", "0"), "shardplan: error: time-limit: must be a finite number > 0, got 0.0\n"),
    (("--time-limit", "700"),
     "shardplan: error: time-limit: must be at most 600 s (the server's --max-time-limit), got 700\n"),
])
def test_bad_options_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv, line) -> None:
    assert run(capsys, "mcp", *argv) == (2, line)


def test_without_the_sdk_the_command_says_how_to_install_it(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` now fails as if it were not installed
    monkeypatch.delitem(sys.modules, "shardplan.solver.mcp.server", raising=False)
    code, err = run(capsys, "mcp")
    assert code == 2 and err == "shardplan: error: mcp: the MCP SDK is not installed: pip install 'shardplan[mcp]'\n"
