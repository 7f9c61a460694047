"""``shardplan mcp``: the tools and resources served over stdio with the MCP SDK's low-level server.

The low-level server rather than ``MCPServer``'s decorators because the contract is the CLI's: a
result is exactly the dict ``--json`` prints, and an error exactly the one line the CLI prints,
where the decorators would prefix the tool's name and turn a schema error into several lines.
Each call runs its handler on a worker thread, one call at a time (CP-SAT runs one worker and the
machines this serves have few cores), under a wall-clock bound: the solver's own time limit plus
room to explain or price. A call past its bound is answered with an error and its thread left to
end at its solver limit; the next call's handler waits for that thread (within the next call's own
bound), so two handlers never run at once: the price memos and the evaluation count a work limit reads
are process-wide, and an abandoned search still filling them would change where the next one ends. A call
that fails in any way leaves the server serving the next.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from shardplan.models import ShardplanError, SolverLimitError, SpecError
from shardplan.models.errors import quoted, spec_error_from
from shardplan.models.files import json_text
from shardplan.solver.cli.outputs import discard_all
from shardplan.solver.cli.results import error_message, one_line
from shardplan.solver.mcp.resources import RESOURCES, normal_uri
from shardplan.solver.mcp.safety import Root, TimeLimits
from shardplan.solver.mcp.tools import TOOLS, Session, ToolSpec
from shardplan.solver.mcp.transport import Ending, stdio_transport

log = logging.getLogger("shardplan.mcp")
SERVER_NAME = "shardplan"
_BY_NAME = {tool.name: tool for tool in TOOLS}
_RESOURCES = {resource.uri: resource for resource in RESOURCES}


class Worker:
    """Runs one call's handler at a time on a thread, abandoning it past its wall-clock bound."""

    def __init__(self) -> None:
        self._turn = anyio.Lock()  # one call answered at a time
        self._running = threading.Lock()  # one handler running at a time, an abandoned one included

    async def run(self, work: Callable[[], Any], wall_s: float) -> Any:
        started, abandoned = threading.Event(), threading.Event()

        def alone() -> Any:
            with self._running:
                if abandoned.is_set():
                    return None  # given up while an earlier handler still ran: nothing waits for it
                started.set()
                return work()

        async with self._turn:
            with anyio.move_on_after(wall_s):
                return await anyio.to_thread.run_sync(alone, abandon_on_cancel=True)
            abandoned.set()
        if not started.is_set():
            raise SolverLimitError(f"busy: an earlier call abandoned past its bound was still running after "
                                   f"{wall_s:g} s; call again when it ends (at its own limit)")
        raise SolverLimitError(f"time-limit: the call ran past its bound of {wall_s:g} s and was abandoned; "
                               "ask for less (a smaller time_limit, limit or model)")


def error_result(line: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=line)], is_error=True)


def json_result(tool: ToolSpec, data: Any) -> types.CallToolResult:
    """The CLI's JSON as text, and as structured content (a list wrapped under the tool's key: a
    structured result is an object for clients of MCP before 2026-07-28)."""
    structured = {tool.list_key: data} if tool.list_key else data
    text = json_text(data, indent=2, sort_keys=False)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured)


async def call(
    tool_name: str, arguments: dict[str, Any] | None, session: Session, worker: Worker
) -> types.CallToolResult:
    """One tool call, start to end: every failure becomes an error result with the CLI's one line."""
    tool = _BY_NAME.get(tool_name)
    if tool is None:
        return error_result(one_line(error_message(SpecError("tool", f"unknown tool {quoted(tool_name)}; known: "
                                                                     f"{', '.join(_BY_NAME)}"))))
    try:
        try:
            args = tool.input.model_validate(arguments or {})
        except ValidationError as exc:
            raise spec_error_from(exc) from None
        wall_s = tool.wall_s(args, session.limits)
        data = await worker.run(lambda: tool.run(args, session), wall_s)
    except (ShardplanError, RecursionError) as exc:
        return error_result(one_line(error_message(exc)))
    except Exception as exc:  # a bug or an exhausted resource: one line to the agent, the traceback to stderr
        log.exception("tool %s failed", tool_name)
        return error_result(one_line(f"internal error: {type(exc).__name__}: {exc}"))
    return json_result(tool, data)


def tool_list() -> list[types.Tool]:
    return [types.Tool(name=tool.name, description=tool.description, input_schema=tool.input.model_json_schema())
            for tool in TOOLS]


def resource_list() -> list[types.Resource]:
    return [types.Resource(uri=r.uri, name=r.name, description=r.description, mime_type="application/json")
            for r in RESOURCES]


def build_server(session: Session) -> Server[Any]:
    """The low-level server with shardplan's tools and resources."""
    worker = Worker()

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list())

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await call(params.name, params.arguments, session, worker)

    async def on_list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=resource_list())

    async def on_read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        resource = _RESOURCES.get(normal_uri(str(params.uri)))
        if resource is None:  # the URI quoted shortened: an agent's 1 MB URI made a 1 MB error line
            raise MCPError(types.INVALID_PARAMS, one_line(f"error: uri: unknown resource {quoted(str(params.uri))}; "
                                                          f"known: {', '.join(_RESOURCES)}"))
        text = json_text(resource.read(), indent=2)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=resource.uri, mime_type="application/json", text=text)])

    return Server(SERVER_NAME, on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                  on_list_resources=on_list_resources, on_read_resource=on_read_resource)


async def _serve(server: Server[Any]) -> Ending:
    async with stdio_transport() as (read_stream, write_stream, ending):
        await server.run(read_stream, write_stream, server.create_initialization_options())
    return ending


def serve(root: str | None, limits: TimeLimits) -> None:
    """Serve on stdin/stdout until the client closes stdin and every call read is answered (then return: exit
    0). SIGTERM (143), SIGINT (130; unless ignored when serving began) or a stdout that cannot be written (2) end
    the process at once with one line on stderr, the CLI's codes: a call's handler may still be searching on its
    thread, and no search can be stopped from outside, so the process does not wait for it; its temporary outputs
    are removed first (a file it had already renamed into place stays)."""
    ending = anyio.run(_serve, build_server(Session(Root(root), limits)))
    if ending.code:
        discard_all()
        with contextlib.suppress(OSError):
            sys.stderr.write(one_line(ending.line) + "\n")
            sys.stderr.flush()
        os._exit(ending.code)
