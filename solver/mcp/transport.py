"""The stdio transport of ``shardplan mcp``: one JSON-RPC message a line in, one a line out, and every
line that is not a message answered with a JSON-RPC error rather than dropped.

The SDK's ``stdio_server`` decodes stdin leniently (an invalid UTF-8 byte became U+FFFD) and hands a line
it cannot read to the server as an exception, which the server logs and drops: a client that sent
``this is not json``, a batch array or a request without a method waited for an answer that never came.
Here such a line gets ``-32700`` (not JSON) or ``-32600`` (JSON, but not a JSON-RPC message) with id
null (or the request's id when the object names a usable one), and the next line is served. A message
is read as strictly as an input file (NaN, a repeated key, deep nesting: ``-32602`` naming where), a
request's params as its SDK model reads them and a request before initialize refused by name (the SDK
answered both with -32602 'Invalid request parameters', naming nothing), and how serving ends is the CLI's
contract (``StdioTransport``, ``Ending``). A message read here goes to the server as the SDK's
``SessionMessage``, and its answers are written as the SDK writes them. No tool runs here.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, BinaryIO, get_args

import anyio
import anyio.abc
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ValidationError

from shardplan.models.errors import quoted
from shardplan.models.files import MAX_JSON_DEPTH, SURROGATE, lone_surrogate
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


# --- values no JSON parser agrees on ------------------------------------------------------------
# A message's arguments are read as strictly as an input file (models.files.parse_json): no NaN or Infinity
# (RFC 8259 §6; Python's parser takes them, and the answer could not print them), no number past the float
# range (1e400 is infinite) or integer past Python's 4,300 digits, no key given twice (parsers disagree on
# which counts), and nesting bounded before the parser recurses (100,000 nested arrays raised RecursionError
# in json.loads, and pydantic's parser refused 200 levels: both lines were dropped unanswered). Each
# refusal names where in the message the value is, and answers the request's id when the line names one.
MAX_MESSAGE_DEPTH = MAX_JSON_DEPTH + 3  # an input file's bound, inside the message, params and arguments
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]|[^\s\[\]{}:,"]+', re.DOTALL)


class _Bad:
    """A value refused while parsing, kept in place so the path to it can be found."""

    def __init__(self, text: str, reason: str = "is not a JSON number (JSON numbers are finite: RFC 8259 §6)"):
        self.text, self.reason = text, reason


def _float(text: str) -> float | _Bad:
    value = float(text)
    return value if math.isfinite(value) else _Bad(text, "is past the float range (JSON numbers are finite: "
                                                         "RFC 8259 §6)")


def _int(text: str) -> int | _Bad:
    try:
        return int(text)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        return _Bad(text, f"is an integer of {len(text):,} digits")


class _Object(dict[str, Any]):
    """A JSON object; ``repeated`` is a key it gives twice."""

    repeated: str | None = None

    @classmethod
    def of(cls, pairs: list[tuple[str, Any]]) -> _Object:
        out = cls()
        for key, value in pairs:
            if key in out and out.repeated is None:
                out.repeated = key
            out[key] = value
        return out


def _path_text(path: list[str | int]) -> str:
    """``params.arguments.config.x[0][0]``, at most 12 steps shown."""
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step if len(step) <= 40 else step[:37] + '...'}"
                   for step in path[:12]).lstrip(".")
    return (text or "message") + ("..." if len(path) > 12 else "")


def first_bad(data: Any) -> tuple[list[str | int], str] | None:
    """(the path to the first refused value in parsed ``data``, why), or None; walked without recursion."""
    stack: list[tuple[list[str | int], Any]] = [([], data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _Bad):
            return path, f"{quoted(value.text)} {value.reason}"
        if isinstance(value, _Object) and value.repeated is not None:
            return path, f"repeats the key {quoted(value.repeated)} (which one counts is not clear)"
        # A lone \ud800 escape: the reply echoing it (fix_dag's inline DAG) could not be serialised, which ended the
        # server, and a path holding one raised UnicodeEncodeError in the tool (an internal error).
        strings = [value] if isinstance(value, str) else list(value) if isinstance(value, dict) else []
        lone = next((found.group() for text in strings if (found := SURROGATE.search(text))), None)
        if lone is not None:
            return path, lone_surrogate(lone)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack.extend((path + [key], item) for key, item in reversed(list(items)))
    return None


def too_deep(text: str) -> tuple[list[str | int], Any] | None:
    """(the path to the first array or object nested past ``MAX_MESSAGE_DEPTH``, the message's id when it
    comes first), or None; brackets inside strings are not nesting. The text need not be valid JSON."""
    stack: list[list[Any]] = []  # each open container: [its kind, the key or index inside it]
    request_id, previous = None, ""
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            if len(stack) >= MAX_MESSAGE_DEPTH:
                return [step for _, step in stack], request_id
            stack.append([token, 0 if token == "[" else None])
        elif token in "]}":
            if stack:
                stack.pop()
        elif token == ",":
            if stack and stack[-1][0] == "[":
                stack[-1][1] += 1
        elif stack and stack[-1][0] == "{" and previous in "{,":
            stack[-1][1] = token[1:-1]  # a key, as written
        elif len(stack) == 1 and stack[0][1] == "id" and previous == ":":
            request_id = _usable_id({"id": _loads_or_none(token)})
        previous = token
    return None


def _loads_or_none(token: str) -> Any:
    try:
        return json.loads(token)
    except ValueError:
        return None


def _bad_value(path: list[str | int], reason: str, request_id: Any) -> types.JSONRPCError:
    code = types.INVALID_PARAMS if path[:1] == ["params"] else types.INVALID_REQUEST
    return error_reply(code, f"{_path_text(path)}: {reason}", request_id)


def parse_line(raw: bytes) -> types.JSONRPCMessage | types.JSONRPCError:
    """The message on one line, or the error that answers it."""
    try:
        text = raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        return error_reply(types.PARSE_ERROR, f"message: not UTF-8 text (byte {exc.start}: {exc.reason})")
    deep = too_deep(text)
    if deep is not None:
        path, request_id = deep
        return _bad_value(path, f"nests deeper than {MAX_MESSAGE_DEPTH} levels (arrays and objects)", request_id)
    try:
        data = json.loads(text, object_pairs_hook=_Object.of, parse_constant=_Bad, parse_float=_float,
                          parse_int=_int)
    except json.JSONDecodeError as exc:
        return error_reply(types.PARSE_ERROR, f"message: not JSON (column {exc.colno}: {exc.msg})")
    except (RecursionError, ValueError) as exc:  # nesting past the parser's recursion, a 4,300-digit integer
        return error_reply(types.PARSE_ERROR, f"message: not JSON ({type(exc).__name__})")
    bad = first_bad(data)
    if bad is not None:
        path, reason = bad
        return _bad_value(path, reason, _usable_id(data))
    if isinstance(data, list):
        return error_reply(types.INVALID_REQUEST, "message: a batch (JSON array); MCP takes one JSON-RPC "
                                                  "message a line")
    if not isinstance(data, dict):
        return error_reply(types.INVALID_REQUEST, f"message: a JSON {type(data).__name__}, not a JSON-RPC "
                                                  "message (an object)")
    if data.get("id") is not None and _usable_id(data) is None:  # the SDK would take it for a notification
        shown = quoted(json.dumps(data["id"]))
        return error_reply(types.INVALID_REQUEST, f"id: must be a string or an integer, got {shown}")
    shape = _params_problem(data)
    if shape is not None:
        return error_reply(types.INVALID_PARAMS, shape, _usable_id(data))
    try:
        return types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "message"  # loc[0] names the union member
        return error_reply(types.INVALID_REQUEST, f"{where}: not a JSON-RPC 2.0 message ({first['msg']})",
                           _usable_id(data))


# The params each request this server serves needs, for _params_problem: the SDK answers a request without them
# with -32602 'Invalid request parameters' and an empty data field, naming nothing.
_NEEDED_PARAMS: dict[str, tuple[str, ...]] = {"tools/call": ("name",), "resources/read": ("uri",)}
# Every request a client may send, by method (the SDK's ClientRequest members): the SDK answers one whose params
# its model refuses (a cursor that is no string, a log level it does not know) the same way, naming nothing.
_REQUESTS: dict[str, type[BaseModel]] = {get_args(member.model_fields["method"].annotation)[0]: member
                                         for member in get_args(types.ClientRequest)}


def _params_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a client request's ``params``, naming the field: where a ``tools/call`` or
    ``resources/read`` request lacks what it needs, or the request's model (``_REQUESTS``) refuses it."""
    method = data.get("method")
    if not isinstance(method, str) or method not in _REQUESTS or "id" not in data:
        return None
    params = data.get("params")
    if params is not None and not isinstance(params, dict):  # not a JSON-RPC message: -32600, from its own check
        return None
    needed = _NEEDED_PARAMS.get(method, ())
    if needed and params is None:
        return f"params: {method} needs an object with {', '.join(needed)}"
    given = params or {}
    for key in needed:
        if not isinstance(given.get(key), str):
            return f"params.{key}: must be a string, got {quoted(json.dumps(given.get(key)))}"
    arguments = given.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        return f"params.arguments: must be an object of the tool's inputs, got {quoted(json.dumps(arguments))}"
    try:
        _REQUESTS[method].model_validate({"method": method, "params": params}, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _path_text([part if isinstance(part, int) else str(part) for part in first["loc"]])
        return f"{where}: {first['msg'][:1].lower()}{first['msg'][1:]}, got {quoted(json.dumps(first['input']))}"
    return None


# What the SDK serves before a session's initialize request: the rest it answers with -32602 'Invalid request
# parameters' and an empty data field, naming nothing.
_BEFORE_INITIALIZE = frozenset({"initialize", "ping"})


def _before_initialize(request: types.JSONRPCRequest) -> types.JSONRPCError | None:
    """The answer to a request read before any initialize request, where the SDK would refuse it unnamed."""
    if request.method in _BEFORE_INITIALIZE or request.method not in _REQUESTS:
        return None  # an unknown method: the SDK's 'Method not found', named
    return error_reply(types.INVALID_PARAMS, f"method: {quoted(request.method)} before initialize; a session "
                                             "begins with an initialize request", request.id)


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


def unwritable(message: types.JSONRPCMessage, exc: ValueError) -> bytes | None:
    """The line answering a request whose answer cannot be written as JSON (a string no UTF-8 holds: it raised
    in the writer, which ended the server), or None for a notification, which nothing waits for."""
    request_id = getattr(message, "id", None)
    if request_id is None:
        return None
    reply = error_reply(types.INTERNAL_ERROR, f"result: cannot be written as JSON ({type(exc).__name__})", request_id)
    return (reply.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode("utf-8")


EXIT_BAD_OUTPUT = 2  # the CLI's code for an output it cannot write (solver/cli/main.py)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as the CLI
EXIT_TERMINATED = 143  # 128 + SIGTERM, as the CLI


@dataclass
class Ending:
    """How serving ended: 0 when stdin closed and every request read was answered; otherwise the exit
    code and the one line for stderr (a signal, or a stdout the client no longer reads)."""

    code: int = 0
    line: str = ""


class StdioTransport:
    """stdin's lines to the server as messages, the server's messages to stdout as lines.

    At the end of stdin the server is told only once every request read has been answered (the SDK
    cancels the calls still running when its read stream ends: their answers were 'Connection closed').
    SIGTERM, SIGINT or a stdout that cannot be written end serving at once (``Ending``)."""

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO, scope: anyio.CancelScope):
        self.stdin, self.stdout, self.scope = stdin, stdout, scope
        self.to_server, self.from_client = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self.to_client, self.from_server = anyio.create_memory_object_stream[SessionMessage](0)
        self.unanswered: set[Any] = set()  # ids of requests read and not yet answered
        self.answered = anyio.Event()  # set when an answer was written
        self.ending = Ending()
        self.initialized = False  # an initialize request was read (and handed to the server)

    async def read(self, replies: MemoryObjectSendStream[SessionMessage]) -> None:
        """Every line of stdin: a message to the server, anything else answered at once."""
        async with self.to_server, replies:
            while (line := await anyio.to_thread.run_sync(read_line, self.stdin, abandon_on_cancel=True)) is not None:
                if not line.strip():
                    continue  # a blank line between messages carries nothing to answer
                message = _refused_line(line) if line.startswith(b"\0") else parse_line(line)
                if isinstance(message, types.JSONRPCError):
                    await replies.send(SessionMessage(message))
                    continue
                if isinstance(message, types.JSONRPCRequest) and not self.initialized:
                    early = _before_initialize(message)
                    if early is not None:
                        await replies.send(SessionMessage(early))
                        continue
                    self.initialized = message.method == "initialize"
                if isinstance(message, types.JSONRPCRequest):
                    self.unanswered.add(message.id)
                elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                    self.unanswered.discard((message.params or {}).get("requestId"))  # may go unanswered
                await self.to_server.send(SessionMessage(message))
            while self.unanswered:
                self.answered = anyio.Event()
                await self.answered.wait()

    async def write(self) -> None:
        """Every message the server (or ``read``) answers with, one line each."""
        async with self.from_server:
            async for session_message in self.from_server:
                message = session_message.message
                try:
                    data = (message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode("utf-8")
                except ValueError as exc:  # PydanticSerializationError, UnicodeEncodeError: one answer, not the server
                    answer = unwritable(message, exc)
                    if answer is None:
                        continue
                    data = answer
                try:
                    await anyio.to_thread.run_sync(self._write_line, data)
                except OSError as exc:  # BrokenPipeError: the client went away
                    self.end(EXIT_BAD_OUTPUT, f"error: cannot write standard output: {exc.strerror} (the client "
                                              "stopped reading)")
                    return
                if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                    self.unanswered.discard(message.id)
                    self.answered.set()

    def _write_line(self, data: bytes) -> None:
        self.stdout.write(data)
        self.stdout.flush()

    async def watch_signals(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """SIGTERM and SIGINT end serving with the CLI's exit codes and lines; a SIGINT ignored when serving began
        stays ignored (a shell without job control starts a background job so: its Ctrl-C is not the job's)."""
        watched = [signal.SIGTERM]
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            watched.append(signal.SIGINT)
        with anyio.open_signal_receiver(*watched) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGTERM:
                    self.end(EXIT_TERMINATED, "terminated")
                else:
                    self.end(EXIT_INTERRUPTED, "interrupted")

    def end(self, code: int, line: str) -> None:
        if not self.ending.code:
            self.ending = Ending(code, line)
        self.scope.cancel()


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                                                   MemoryObjectSendStream[SessionMessage], Ending]]:
    """The server's (read, write) streams over this process's stdin and stdout, and how serving ended (read it
    after the block), as the SDK's ``stdio_server``: while serving, descriptor 0 reads the null device and 1
    writes to stderr, so a handler's stray print cannot break a message on the wire; both are put back at the end."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    stdin, stdout = os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False)
    try:
        async with anyio.create_task_group() as tg:
            transport = StdioTransport(stdin, stdout, tg.cancel_scope)
            await tg.start(transport.watch_signals)
            tg.start_soon(transport.read, transport.to_client.clone())
            tg.start_soon(transport.write)
            holder = Ending()
            try:
                yield transport.from_client, transport.to_client, holder
            finally:
                tg.cancel_scope.cancel()  # the signal watcher; reader and writer have ended with the server
                holder.code, holder.line = transport.ending.code, transport.ending.line
    finally:
        with suppress(OSError):  # a stdout the client closed: flushing it fails again
            stdout.close()
        # stdin is left open: after a signal the reading thread still waits in its readline, and closing
        # the buffer would wait for that thread's lock (the descriptor is a duplicate, closed below).
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)
