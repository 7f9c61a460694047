"""The stdio transport of ``shardplan mcp``: one JSON-RPC message a line in, one a line out, and every
line that is not a message answered with a JSON-RPC error rather than dropped.

The SDK's ``stdio_server`` decodes stdin leniently (an invalid UTF-8 byte became U+FFFD) and hands a line
it cannot read to the server as an exception, which the server logs and drops: a client that sent
``this is not json``, a batch array or a request without a method waited for an answer that never came.
Here such a line gets ``-32700`` (not JSON) or ``-32600`` (JSON, but not a JSON-RPC message) with id
null (or the request's id when the object names a usable one), and the next line is served.
Everything else is the SDK's: a message read here goes to the server as the SDK's ``SessionMessage``,
and the server's answers are written as the SDK writes them. No tool runs here.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, BinaryIO

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from shardplan.models.errors import quoted
from shardplan.solver.cli.results import one_line

# The longest line read: an inline config is at most 1 MiB (models.files.MAX_INPUT_BYTES) and an inline
# DAG of the largest preset cluster's logical detail a few MiB; a longer line is refused unread.
MAX_LINE_BYTES = 64 << 20
_CHUNK_BYTES = 1 << 20  # how much of a refused line is read at a time while skipping it


def error_reply(code: int, message: str, request_id: Any = None) -> types.JSONRPCError:
    """A JSON-RPC error answering ``request_id`` (None: the id could not be read) with shardplan's one line."""
    return types.JSONRPCError(jsonrpc="2.0", id=request_id,
                              error=types.ErrorData(code=code, message=one_line(f"error: {message}")))


def _usable_id(data: Any) -> Any:
    """The ``id`` of a JSON object, when it is one JSON-RPC allows (a string or an integer), else None."""
    request_id = data.get("id") if isinstance(data, dict) else None
    ok = isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool))
    return request_id if ok else None


def parse_line(raw: bytes) -> types.JSONRPCMessage | types.JSONRPCError:
    """The message on one line, or the error that answers it."""
    try:
        text = raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        return error_reply(types.PARSE_ERROR, f"message: not UTF-8 text (byte {exc.start}: {exc.reason})")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return error_reply(types.PARSE_ERROR, f"message: not JSON (column {exc.colno}: {exc.msg})")
    except (RecursionError, ValueError) as exc:  # nesting past the parser's recursion, a 4,300-digit integer
        return error_reply(types.PARSE_ERROR, f"message: not JSON ({type(exc).__name__})")
    if isinstance(data, list):
        return error_reply(types.INVALID_REQUEST, "message: a batch (JSON array); MCP takes one JSON-RPC "
                                                  "message a line")
    if not isinstance(data, dict):
        return error_reply(types.INVALID_REQUEST, f"message: a JSON {type(data).__name__}, not a JSON-RPC "
                                                  "message (an object)")
    if data.get("id") is not None and _usable_id(data) is None:  # the SDK would take it for a notification
        shown = quoted(json.dumps(data["id"]))
        return error_reply(types.INVALID_REQUEST, f"id: must be a string or an integer, got {shown}")
    try:
        return types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "message"  # loc[0] names the union member
        return error_reply(types.INVALID_REQUEST, f"{where}: not a JSON-RPC 2.0 message ({first['msg']})",
                           _usable_id(data))


def read_line(stream: BinaryIO) -> bytes | None:
    """The next line without its end (None at the end of input); a line past ``MAX_LINE_BYTES`` is
    skipped to its end and returned as ``b"\\0"`` followed by its length, which no message begins with."""
    line = stream.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None
    if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
        return line.rstrip(b"\r\n")
    length = len(line)
    while not line.endswith(b"\n"):
        line = stream.readline(_CHUNK_BYTES)
        if not line:
            break
        length += len(line)
    return b"\0" + str(length).encode()


def _refused_line(line: bytes) -> types.JSONRPCError:
    return error_reply(types.INVALID_REQUEST, f"message: a line of {int(line[1:]):,} bytes; at most "
                                              f"{MAX_LINE_BYTES:,} are read")


class StdioTransport:
    """stdin's lines to the server as messages, the server's messages to stdout as lines."""

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO):
        self.stdin, self.stdout = stdin, stdout
        self.to_server, self.from_client = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self.to_client, self.from_server = anyio.create_memory_object_stream[SessionMessage](0)

    async def read(self, replies: MemoryObjectSendStream[SessionMessage]) -> None:
        """Every line of stdin: a message to the server, anything else answered at once."""
        async with self.to_server, replies:
            while (line := await anyio.to_thread.run_sync(read_line, self.stdin, abandon_on_cancel=True)) is not None:
                if not line.strip():
                    continue  # a blank line between messages carries nothing to answer
                message = _refused_line(line) if line.startswith(b"\0") else parse_line(line)
                if isinstance(message, types.JSONRPCError):
                    await replies.send(SessionMessage(message))
                else:
                    await self.to_server.send(SessionMessage(message))

    async def write(self) -> None:
        """Every message the server (or ``read``) answers with, one line each."""
        async with self.from_server:
            async for session_message in self.from_server:
                line = session_message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await anyio.to_thread.run_sync(self._write_line, line.encode("utf-8"))

    def _write_line(self, data: bytes) -> None:
        self.stdout.write(data)
        self.stdout.flush()


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                                                   MemoryObjectSendStream[SessionMessage]]]:
    """The server's (read, write) streams over this process's stdin and stdout, as the SDK's
    ``stdio_server``: while serving, descriptor 0 reads the null device and 1 writes to stderr, so a
    handler's stray print cannot break a message on the wire; both are put back at the end."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        with os.fdopen(wire_in, "rb", closefd=False) as stdin, os.fdopen(wire_out, "wb", closefd=False) as stdout:
            transport = StdioTransport(stdin, stdout)
            async with anyio.create_task_group() as tg:
                tg.start_soon(transport.read, transport.to_client.clone())
                tg.start_soon(transport.write)
                yield transport.from_client, transport.to_client
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)
