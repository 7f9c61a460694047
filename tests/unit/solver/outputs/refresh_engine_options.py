"""Print the option names of the installed vLLM and SGLang servers, for ``engine_options.py``.

Not a test: run it where the engines are installed (they need torch; the CPU build is enough) and paste
its output over the two sets in ``engine_options.py``, with the versions it prints::

    VLLM_TARGET_DEVICE=cpu python tests/unit/solver/outputs/refresh_engine_options.py

With ``--check FILE`` it parses every command of a JSON list ``[{"engine": ..., "argv": [...]}]`` with
the engines' own parsers instead (``vllm serve`` with its validation, SGLang's ``prepare_server_args``)
and prints one line per command.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap


def vllm_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    return parser


def sglang_parser():
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser


def option_names(parser: argparse.ArgumentParser) -> list[str]:
    names = set()
    for action in parser._actions:
        names.update(action.option_strings)
        for sub in getattr(action, "choices", None) or {}:
            if isinstance(action.choices, dict):
                names.update(s for a in action.choices[sub]._actions for s in a.option_strings)
    return sorted(n for n in names if n.startswith("--"))


def dump(name: str, version: str, names: list[str]) -> str:
    body = textwrap.fill(
        " ".join(repr(n) + "," for n in names), 110, initial_indent="    ", subsequent_indent="    ",
        break_on_hyphens=False, break_long_words=False,
    )
    return f"{name}_VERSION = {version!r}\n{name}_OPTIONS = frozenset({{\n{body}\n}})\n"


def check(path: str) -> int:
    import importlib.util

    installed = {e for e, module in (("vllm", "vllm"), ("sglang", "sglang")) if importlib.util.find_spec(module)}
    bad = 0
    for command in json.load(open(path)):
        argv = command["argv"]
        if command["engine"] not in installed:
            continue
        try:
            if command["engine"] == "vllm":
                from vllm.entrypoints.cli.serve import ServeSubcommand

                ServeSubcommand().validate(vllm_parser().parse_args(argv[1:]))
            elif command["engine"] == "sglang":
                from sglang.srt.server_args import prepare_server_args

                prepare_server_args(argv[3:])
            else:
                continue
            print("ok  ", " ".join(argv))
        except (Exception, SystemExit) as exc:
            bad += 1
            print("FAIL", " ".join(argv), type(exc).__name__, exc)
    return 1 if bad else 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        return check(sys.argv[2])
    from importlib.metadata import version

    print(dump("VLLM", version("vllm"), option_names(vllm_parser())))
    print(dump("SGLANG", version("sglang"), option_names(sglang_parser())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
