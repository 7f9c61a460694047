"""MCP server benchmark (issue 16, acceptance 3): a ``plan`` call's time against the CLI's, and the
server's resident memory when idle.

For each case the CLI runs as a fresh process (``python -m shardplan.solver.cli solve ... --json``,
wall time from spawn to exit: what an agent that shells out waits) and the same problem is asked of
one ``shardplan mcp`` server through the SDK's stdio client (wall time of ``call_tool``). Both
answers are compared apart from ``solve_time_s``. The server's resident set (VmRSS) is read from
/proc right after the handshake (idle, nothing asked yet) and again after the last call (idle, the
caches warm). Target: each call within the CLI's time + 0.5 s; idle RSS < 200 MB.

    python -m benchmarks.mcp_server [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from shardplan.solver.cli.results import without_timing

TARGET_EXTRA_S = 0.5
TARGET_IDLE_MB = 200.0
CLI = [sys.executable, "-m", "shardplan.solver.cli"]


@dataclass(frozen=True)
class Case:
    name: str
    args: dict[str, Any]  # the plan tool's arguments; the CLI gets them as --key value


CASES = (
    Case("DeepSeek-V3 4x8xH200 latency", {"model": "deepseek-v3", "cluster": "4x8xH200"}),
    Case("DeepSeek-V3 2x8xH200 (default)", {}),
    Case("Llama-3.1-70B 8xH100 throughput", {"model": "llama-3.1-70b", "cluster": "8xH100",
                                             "objective": "throughput"}),
)


def cli_argv(args: dict[str, Any]) -> list[str]:
    argv = [*CLI, "solve", "--json"]
    for key, value in args.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def run_cli(args: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    done = subprocess.run(cli_argv(args), capture_output=True, text=True, check=False)
    return time.perf_counter() - started, json.loads(done.stdout)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def server_pid() -> int:
    """The one child of this process running ``shardplan.solver.cli mcp``."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == me and b"mcp" in cmdline and b"shardplan.solver.cli" in cmdline:
            return int(entry.name)
    raise RuntimeError("the server process was not found")


@dataclass
class Row:
    case: str
    cli_s: float
    mcp_s: float
    same: bool


async def measure(repeat: int) -> tuple[list[Row], float, float]:
    params = StdioServerParameters(command=CLI[0], args=[*CLI[1:], "mcp"], env=dict(os.environ))
    rows = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        pid = server_pid()
        idle_cold_mb = rss_mb(pid)
        for case in CASES:
            cli_times, mcp_times, same = [], [], True
            for _ in range(repeat):
                cli_s, cli_data = run_cli(case.args)
                started = time.perf_counter()
                result = await session.call_tool("plan", case.args)
                mcp_times.append(time.perf_counter() - started)
                cli_times.append(cli_s)
                answer = None if result.is_error else without_timing(result.structured_content)
                same = same and answer == without_timing(cli_data)
            rows.append(Row(case.name, statistics.median(cli_times), statistics.median(mcp_times), same))
        idle_warm_mb = rss_mb(pid)
    return rows, idle_cold_mb, idle_warm_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the table shows medians")
    opts = parser.parse_args()
    rows, cold_mb, warm_mb = anyio.run(measure, opts.repeat)
    print(f"{'case':34} {'CLI s':>7} {'MCP s':>7} {'MCP - CLI':>10} {'<= +0.5 s':>10} {'same JSON':>10}")
    for r in rows:
        ok = r.mcp_s <= r.cli_s + TARGET_EXTRA_S
        print(f"{r.case:34} {r.cli_s:7.2f} {r.mcp_s:7.2f} {r.mcp_s - r.cli_s:10.2f} {'yes' if ok else 'NO':>10} "
              f"{'yes' if r.same else 'NO':>10}")
    print(f"server RSS idle after start: {cold_mb:.0f} MB; idle after the calls: {warm_mb:.0f} MB "
          f"(target < {TARGET_IDLE_MB:.0f} MB)")


if __name__ == "__main__":
    main()
