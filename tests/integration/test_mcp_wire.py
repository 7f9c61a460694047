"""``shardplan mcp`` driven with raw JSON-RPC lines on its stdin, as a client that is broken or hostile
would send them: every line is answered, and the server serves the next one."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

REPLY_S = 120.0  # generous: a loaded CI machine imports the solver slowly


class Wire:
    """One ``shardplan mcp`` process, initialised, spoken to a line at a time."""

    def __init__(self, root: Path, initialise: bool = True, ctrl_c_ignored: bool = False):
        ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ctrl_c_ignored else None
        self.proc = subprocess.Popen([sys.executable, "-m", "shardplan.solver.cli", "mcp", "--root", str(root)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     preexec_fn=ignore)
        if initialise:
            self.initialise()

    def initialise(self) -> None:
        reply = self.ask({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
        assert "result" in reply, self.diagnosis(reply)
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def reply(self) -> dict[str, Any]:
        """The next line the server writes, as JSON; fails (with the server's stderr) after REPLY_S."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_S)
        line = self.proc.stdout.readline() if ready else b""
        assert line, self.diagnosis(f"no reply within {REPLY_S:g} s")
        return json.loads(line)

    def ask(self, message: dict[str, Any] | bytes) -> dict[str, Any]:
        self.send(message if isinstance(message, bytes) else json.dumps(message).encode())
        return self.reply()

    def stderr(self) -> str:
        """What the server wrote on stderr (after it ended, or stopping it to read it)."""
        if self.proc.poll() is None:
            self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def diagnosis(self, what: Any) -> str:
        return f"{what}; exit {self.proc.poll()}; the server's stderr:\n{self.stderr()}"

    def wait(self, timeout_s: float = REPLY_S) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.proc.returncode is not None, self.diagnosis(f"still running after {timeout_s:g} s")
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def wire(tmp_path: Path):
    server = Wire(tmp_path)
    yield server
    server.close()


def ping(request_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}).encode()


@pytest.mark.parametrize("line,code,request_id,says", [
    (b"this is not json", -32700, None, "message: not JSON"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "ping"', -32700, None, "message: not JSON"),
    (b'\xff\xfe{"jsonrpc": "2.0", "id": 3, "method": "ping"}', -32700, None, "message: not UTF-8 text"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "p\xe9ng"}', -32700, None, "message: not UTF-8 text"),
    (b"[1, 2, 3]", -32600, None, "message: a batch"),
    (b'[{"jsonrpc": "2.0", "id": 3, "method": "ping"}]', -32600, None, "message: a batch"),
    (b'"ping"', -32600, None, "message: a JSON str"),
    (b"42", -32600, None, "message: a JSON int"),
    (b'{"jsonrpc": "2.0", "id": 3}', -32600, 3, "method:"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": [1, 2]}', -32600, 3, "params:"),
    (b'{"jsonrpc": "2.0", "id": "x", "method": "tools/call", "params": "plan"}', -32600, "x", "params:"),
    (b'{"jsonrpc": "1.0", "id": 3, "method": "ping"}', -32600, 3, "jsonrpc:"),
    (b'{"jsonrpc": "2.0", "id": [3], "method": "ping"}', -32600, None, "id:"),
    # The SDK answered these -32602 'Invalid request parameters', naming nothing.
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call"}', -32602, 3, "params: tools/call needs an object with name"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {}}', -32602, 3, "params.name: must be a string"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": 5}}', -32602, 3, "params.name:"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "plan", "arguments": [1]}}', -32602, 3,
     "params.arguments: must be an object"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {}}', -32602, 3, "params.uri:"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": 7}}', -32602, 3,
     "params.cursor: input should be a valid string, got '7'"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "resources/list", "params": {"_meta": 5}}', -32602, 3, "params._meta:"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel", "params": {"level": "loud"}}', -32602, 3,
     "params.level: input should be 'debug'"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {}}', -32602, 3, "params.name: field required"),
])
def test_a_line_that_is_no_message_is_answered_and_the_next_is_served(wire: Wire, line, code, request_id,
                                                                      says) -> None:
    reply = wire.ask(line)
    # JSON-RPC 2.0 §5.1: a parse error or invalid request is answered with id null unless the id can be read.
    assert reply["id"] == request_id and reply["error"]["code"] == code, wire.diagnosis(reply)
    assert reply["error"]["message"].startswith(f"shardplan: error: {says}"), wire.diagnosis(reply)
    assert wire.ask(ping(7)) == {"jsonrpc": "2.0", "id": 7, "result": {}}


def test_a_request_before_initialize_is_refused_by_name_and_the_session_then_begins(tmp_path: Path) -> None:
    """The SDK answered a request before the session's initialize with -32602 'Invalid request parameters', naming
    nothing; ping and an unknown method are answered as the SDK answers them, and after initialize the same request
    is served."""
    wire = Wire(tmp_path, initialise=False)
    try:
        reply = wire.ask({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert reply["id"] == 1 and reply["error"]["code"] == -32602, wire.diagnosis(reply)
        assert reply["error"]["message"] == ("shardplan: error: method: 'tools/list' before initialize; a session "
                                             "begins with an initialize request"), wire.diagnosis(reply)
        assert wire.ask(ping(2)) == {"jsonrpc": "2.0", "id": 2, "result": {}}
        unknown = wire.ask({"jsonrpc": "2.0", "id": 3, "method": "nothing/here"})
        assert unknown["error"]["code"] == -32601, wire.diagnosis(unknown)  # JSON-RPC: method not found
        wire.initialise()
        listed = wire.ask({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
        assert "plan" in [tool["name"] for tool in listed["result"]["tools"]], wire.diagnosis(listed)
    finally:
        wire.close()


def test_a_line_past_the_limit_is_refused_unread_and_the_next_is_served(wire: Wire) -> None:
    from shardplan.solver.mcp.transport import MAX_LINE_BYTES
    assert wire.proc.stdin is not None
    # Written while the server reads it (a pipe holds 64 KiB): a thread would be needed for a reply first.
    wire.send(b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + b"a" * MAX_LINE_BYTES + b'"}}')
    reply = wire.reply()
    assert reply["id"] is None and reply["error"]["code"] == -32600, wire.diagnosis(reply)
    assert f"at most {MAX_LINE_BYTES:,} are read" in reply["error"]["message"]
    assert wire.ask(ping(8)) == {"jsonrpc": "2.0", "id": 8, "result": {}}


def test_a_huge_integer_id_is_echoed_and_blank_lines_are_skipped(wire: Wire) -> None:
    wire.send(b"")
    wire.send(b"   ")
    assert wire.ask(ping(10**30)) == {"jsonrpc": "2.0", "id": 10**30, "result": {}}


def call_line(arguments: bytes, request_id: int = 5, tool: bytes = b"plan") -> bytes:
    """A tools/call line whose arguments are given as raw JSON text (so it can hold what json.dumps would not)."""
    return (b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}'
            % (request_id, tool, arguments))


DEEP = 100_000


@pytest.mark.parametrize("arguments,tool,field,says", [
    (b'{"model": "llama-3.1-8b", "isl": NaN}', b"plan", "params.arguments.isl", "'NaN' is not a JSON number"),
    (b'{"mem_cap_gib": -Infinity}', b"plan", "params.arguments.mem_cap_gib", "'-Infinity' is not a JSON number"),
    (b'{"config": {"hidden_size": Infinity}}', b"plan", "params.arguments.config.hidden_size",
     "'Infinity' is not a JSON number"),
    (b'{"time_limit": 1e400}', b"plan", "params.arguments.time_limit", "'1e400' is past the float range"),
    (b'{"isl": 1' + b"0" * 5000 + b"}", b"plan", "params.arguments.isl", "'1000"),
    (b'{"model": "llama-3.1-8b", "model": "deepseek-v3"}', b"plan", "params.arguments",
     "repeats the key 'model'"),
    (b'{"dag": {"nodes": [{"id": "a", "est_us": NaN}], "edges": []}}', b"validate_dag",
     "params.arguments.dag.nodes[0].est_us", "'NaN' is not a JSON number"),
    (b'{"config": {"x": ' + b"[" * DEEP + b"]" * DEEP + b"}}", b"plan",
     "params.arguments.config.x[0][0][0][0][0][0][0][0]...", "nests deeper than 67 levels"),
    (b'{"config": {"x": ' + b'{"a": ' * DEEP + b"1" + b"}" * DEEP + b"}}", b"plan",
     "params.arguments.config.x.a.a.a.a.a.a.a.a...", "nests deeper than 67 levels"),
])
def test_a_value_no_json_parser_agrees_on_is_an_error_naming_where_it_is(wire: Wire, arguments, tool, field,
                                                                        says) -> None:
    reply = wire.ask(call_line(arguments, tool=tool))
    assert reply["id"] == 5 and reply["error"]["code"] == -32602, wire.diagnosis(reply)  # JSON-RPC: invalid params
    assert reply["error"]["message"].startswith(f"shardplan: error: {field}: {says}"), wire.diagnosis(reply)
    assert wire.ask(ping(7)) == {"jsonrpc": "2.0", "id": 7, "result": {}}


def test_nesting_within_the_bound_reaches_the_tool(wire: Wire) -> None:
    # 64 levels inside the arguments is what an input file may hold (models.files.MAX_JSON_DEPTH).
    reply = wire.ask(call_line(b'{"config": {"x": ' + b"[" * 62 + b"]" * 62 + b"}}"))
    assert reply["id"] == 5 and reply["result"]["isError"], wire.diagnosis(reply)
    assert reply["result"]["content"][0]["text"].startswith("shardplan: error: architectures: missing")


def test_an_id_nested_too_deep_is_answered_with_id_null(wire: Wire) -> None:
    reply = wire.ask(b'{"id": ' + b"[" * DEEP + b"]" * DEEP + b"}")
    assert reply["id"] is None and reply["error"]["code"] == -32600, wire.diagnosis(reply)
    assert reply["error"]["message"].startswith("shardplan: error: id[0][0]"), wire.diagnosis(reply)


# --- how serving ends ----------------------------------------------------------------------------
BUSY_CALL = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "plan", "arguments": {
    "model": "deepseek-v3", "cluster": "4x8xH100", "objective": "throughput"}}}).encode()


@pytest.mark.parametrize("signum,code,line", [(signal.SIGTERM, 143, "shardplan: terminated\n"),
                                              (signal.SIGINT, 130, "shardplan: interrupted\n")])
@pytest.mark.parametrize("busy", [False, True], ids=["idle", "during-a-call"])
def test_a_signal_ends_the_server_with_the_clis_code_and_one_line(wire: Wire, signum, code, line, busy) -> None:
    assert wire.ask(ping(1)) == {"jsonrpc": "2.0", "id": 1, "result": {}}  # serving, its handlers installed
    if busy:
        wire.send(BUSY_CALL)
    wire.proc.send_signal(signum)
    ended = wire.wait()
    stderr = wire.stderr()
    # 128 + the signal's number, as the CLI and shells report it (README: 130 interrupted).
    assert (ended, stderr) == (128 + signum, line) == (code, line), f"exit {ended}; the server's stderr:\n{stderr}"


def test_a_server_started_with_ctrl_c_ignored_keeps_serving_through_one(tmp_path: Path) -> None:
    """Started with SIGINT ignored (``shardplan mcp &`` from a script), a Ctrl-C is not the server's: it answers the
    next request, and SIGTERM still ends it. Before, it watched SIGINT anyway and ended with 130."""
    server = Wire(tmp_path, ctrl_c_ignored=True)
    try:
        assert server.ask(ping(1)) == {"jsonrpc": "2.0", "id": 1, "result": {}}
        server.proc.send_signal(signal.SIGINT)
        assert server.ask(ping(2)) == {"jsonrpc": "2.0", "id": 2, "result": {}}, server.diagnosis("no reply")
        server.proc.send_signal(signal.SIGTERM)
        assert (server.wait(), server.stderr()) == (143, "shardplan: terminated\n")
    finally:
        server.close()


def test_closing_stdin_answers_the_call_in_flight_then_exits_0(wire: Wire) -> None:
    wire.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "plan", "arguments": {"model": "llama-3.1-8b", "cluster": "1xH100"}}}).encode())
    assert wire.proc.stdin is not None
    wire.proc.stdin.close()
    reply = wire.reply()
    # The SDK cancelled it when its read stream ended: {"code": -32000, "message": "Connection closed"}.
    assert reply["id"] == 2 and reply["result"]["structuredContent"]["status"] == "optimal", wire.diagnosis(reply)
    ended = wire.wait()
    stderr = wire.stderr()
    assert (ended, stderr) == (0, ""), f"exit {ended}; the server's stderr:\n{stderr}"


def test_a_client_that_stops_reading_ends_the_server_with_2_and_one_line(wire: Wire) -> None:
    assert wire.proc.stdout is not None
    wire.proc.stdout.close()  # the client went away: the server's next write finds no reader
    wire.send(ping(3))
    ended = wire.wait()
    stderr = wire.stderr()
    # The CLI's code and line for an output it cannot write (exit 2, one line, no traceback).
    assert (ended, stderr) == (2, "shardplan: error: cannot write standard output: Broken pipe (the client "
                                  "stopped reading)\n"), f"exit {ended}; the server's stderr:\n{stderr}"


def read_resource(wire: Wire, uri: str) -> dict[str, Any]:
    return wire.ask({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": uri}})


@pytest.mark.parametrize("uri,canonical", [
    ("shardplan://dag%2Dschema", "shardplan://dag-schema"),  # RFC 3986 §2.3: %2D is '-'
    ("shardplan://%72%75%6C%65%73", "shardplan://rules"),
    ("SHARDPLAN://rules", "shardplan://rules"),  # RFC 3986 §3.1: schemes are case-insensitive
])
def test_an_equivalent_resource_uri_reads_the_resource(wire: Wire, uri, canonical) -> None:
    reply = read_resource(wire, uri)
    assert "result" in reply, wire.diagnosis(reply)
    assert reply["result"] == read_resource(wire, canonical)["result"]
    assert reply["result"]["contents"][0]["uri"] == canonical


def test_an_unknown_resource_is_one_short_line_naming_the_uri(wire: Wire) -> None:
    reply = read_resource(wire, "shardplan://ru les#x?%zz/" + "a" * 100_000)
    message = reply["error"]["message"]
    assert reply["error"]["code"] == -32602 and message.startswith(
        "shardplan: error: uri: unknown resource 'shardplan://ru les#x?%zz/aaa"), wire.diagnosis(reply)
    assert len(message) < 200 and message.endswith("known: shardplan://rules, shardplan://dag-schema")
