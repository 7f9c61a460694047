"""Write the expected output of every stored problem: ``python -m tests.regression.record [NAME ...]``.

Run it only when a change is meant to alter plans, and say in the commit which plans moved and why.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.regression.problems import PROBLEMS
from tests.regression.runner import EXPECTED_DIR, run_solve


def main(names: list[str]) -> None:
    EXPECTED_DIR.mkdir(exist_ok=True)
    for name in names or sorted(PROBLEMS):
        exit_code, output = run_solve(PROBLEMS[name])
        Path(EXPECTED_DIR, f"{name}.json").write_text(output)
        print(f"{name}: exit {exit_code}")


if __name__ == "__main__":
    main(sys.argv[1:])
