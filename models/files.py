"""Read the small text files users hand us (config.json, load profiles, DAG files, CSVs) defensively.

A file is read only when it is a regular file (a FIFO or a device would block or never end), up to
``MAX_INPUT_BYTES``, decoded strictly as UTF-8 (a leading byte-order mark is dropped; UTF-16 and
Latin-1 are refused), and JSON is refused past ``MAX_JSON_DEPTH`` levels of nesting before the parser
recurses. Every failure is a ``SpecError`` naming the field the caller gives. Nothing here interprets
what the file says.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from shardplan.models.errors import SpecError, quoted

MAX_INPUT_BYTES = 1 << 20  # 1 MiB: the largest preset config is ~5 KiB, a 384-expert load profile ~1 MiB
MAX_CSV_BYTES = 64 << 20  # measured-point CSVs are tables of thousands of rows
MAX_JSON_DEPTH = 64  # configs nest 3 deep, DAG files 4: far below the parser's recursion limit
_UTF8_BOM = b"\xef\xbb\xbf"
# Byte-order marks of the encodings a spreadsheet's "Unicode text" export writes; UTF-32's first, since its
# little-endian mark begins with UTF-16's.
_OTHER_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
               (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))
# A JSON string literal, escapes included: its brackets are not nesting.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
# A \uD800-\uDFFF escape: JSON text may spell half of a UTF-16 pair alone, which is no character at all.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
SURROGATE = re.compile("[\ud800-\udfff]")


def read_text(path: str | Path, field: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of a regular file of at most ``max_bytes``, strictly UTF-8 (a BOM is dropped)."""
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise SpecError(field, f"cannot read {path}: {exc.strerror}") from None
    except ValueError:  # a NUL byte: no file can have that name (main(argv) in-process, a library caller)
        raise SpecError(field, f"{quoted(str(path))} is not a path") from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(field, f"{path} is not a regular file")
    if info.st_size > max_bytes:
        raise SpecError(field, f"{path} is {info.st_size:,} bytes; at most {max_bytes:,} are read")
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO after the stat, opening it does not wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise SpecError(field, f"{path} is not a regular file")
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise SpecError(field, f"cannot read {path}: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise SpecError(field, f"{path} is larger than {max_bytes:,} bytes")
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM):]
    for mark, encoding in _OTHER_BOMS:
        if data.startswith(mark):
            raise SpecError(field, f"{path} is {encoding} text (its byte-order mark says so); save it as UTF-8")
    try:
        return data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise SpecError(field, f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text`` (brackets inside strings do not count)."""
    depth = deepest = 0
    for bracket in _BRACKETS.finditer(_JSON_STRING.sub('""', text)):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse_json(text: str, field: str, where: str, max_depth: int = MAX_JSON_DEPTH,
               keep_non_finite: bool = False) -> Any:
    """``json.loads`` with the nesting checked first; a ``SpecError`` naming ``field`` for bad JSON.
    ``keep_non_finite``: ``NaN``, ``Infinity`` and numbers past the largest float are read as floats, for a caller
    whose model refuses them naming the field they are in (a profile file's ranges); everything else is as strict."""
    if json_depth(text) > max_depth:
        raise SpecError(field, f"{where} nests deeper than {max_depth} levels")
    numbers: dict[str, Any] = {} if keep_non_finite else {"parse_constant": _no_constant, "parse_float": _finite_float}
    try:
        data = json.loads(text, object_pairs_hook=_no_repeated_keys, parse_int=_float_sized_int, **numbers)
    except _RepeatedKey as exc:
        raise SpecError(field, f"{where} repeats the key {quoted(exc.key)} (which one counts is not clear)") from None
    except _NotFinite as exc:
        raise SpecError(field, f"{where} holds the number {quoted(exc.text)}, which is not finite (JSON numbers "
                               "are finite: RFC 8259 §6)") from None
    except _TooLarge as exc:
        raise SpecError(field, f"{where} holds the integer {quoted(exc.text, 24)}, larger than any number "
                               "a float holds (about 1.8e308)") from None
    except json.JSONDecodeError as exc:
        raise SpecError(field, f"{where} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (RecursionError, ValueError) as exc:  # e.g. an integer literal of more than 4,300 digits
        raise SpecError(field, f"{where} is not valid JSON ({type(exc).__name__})") from None
    lone = first_lone_surrogate(data) if _SURROGATE_ESCAPE.search(text) or SURROGATE.search(text) else None
    if lone is not None:
        raise SpecError(field, f"{where} {lone_surrogate(lone)}")
    return data


def lone_surrogate(char: str) -> str:
    """Why a lone surrogate ``char`` is refused, for a message that names where it is."""
    return (f"holds \\u{ord(char):04x}, half of a UTF-16 surrogate pair without the other half: not a character "
            "(RFC 8259 §8.2)")


def first_lone_surrogate(data: Any) -> str | None:
    """The first lone surrogate in a string (a key or a value) of parsed JSON ``data``, or None; walked without
    recursion. A paired escape (``\\ud83d\\ude00``) is parsed into its one character: what remains is lone. A
    DAG file's node kind of ``"\\ud800"`` reached the .dot and .mmd writers, whose UTF-8 encoding raised
    (exit 3), and an MCP reply holding one could not be serialised."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            found = SURROGATE.search(value)
            if found:
                return found.group()
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return None


class _NotFinite(Exception):
    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def _no_constant(text: str) -> float:
    """``NaN``, ``Infinity`` and ``-Infinity``, which Python's parser accepts and JSON does not: refused, so no
    input carries a number the output could not print."""
    raise _NotFinite(text)


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent; one past the largest float (``1e400``) would be infinite."""
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


class _TooLarge(Exception):
    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def _float_sized_int(text: str) -> int:
    """A JSON integer no larger than the largest float: the checks and costs read numbers as floats, and
    ``est_us: 1e400`` written as 1 and 400 zeros raised OverflowError there (exit 3) where ``1e400`` is refused.
    Counted by digits first, so a literal of thousands of digits is never converted."""
    if len(text.lstrip("-")) > 309:
        raise _TooLarge(text)
    value = int(text)
    try:
        float(value)
    except OverflowError:
        raise _TooLarge(text) from None
    return value


class _RepeatedKey(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members as a dict, refusing a key given twice: JSON parsers disagree on which one
    counts (Python keeps the last), so a config read here could say another thing than it shows."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(key)
        out[key] = value
    return out


def json_text(data: Any, **options: Any) -> str:
    """``json.dumps(data, **options)`` that refuses NaN and ±Infinity (``ValueError``): JSON has no such numbers
    (RFC 8259 §6), and Python writes them as bare ``NaN``/``Infinity``, which strict parsers (jq, JavaScript's
    JSON.parse, Go, serde) reject. Every JSON shardplan prints or writes goes through here; a metric that is
    genuinely unbounded is written as null by its producer (``outputs.plan_json._num``).

    >>> json_text({"rate": 1.5}), json_text([None])
    ('{"rate": 1.5}', '[null]')
    """
    return json.dumps(data, allow_nan=False, **options)


def read_json(path: str | Path, field: str, max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """A JSON file read through ``read_text`` and ``parse_json``."""
    return parse_json(read_text(path, field, max_bytes), field, str(path))


def reread_json(data: Any, field: str, where: str, max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """JSON handed over already parsed (an agent's object rather than a file), written back to text and read
    through ``parse_json`` with a file's size bound, so it is refused where a file holding it would be (NaN,
    Infinity, nesting past ``MAX_JSON_DEPTH``, more than ``max_bytes``) and with the same messages.

    >>> reread_json({"a": [1]}, "dag", "the dag")
    {'a': [1]}
    """
    try:
        text = json.dumps(data)  # NaN and Infinity are written, for parse_json to name them
    except (TypeError, ValueError, RecursionError):
        raise SpecError(field, f"{where} is not JSON data") from None
    size_bytes = len(text.encode("utf-8"))
    if size_bytes > max_bytes:
        raise SpecError(field, f"{where} is {size_bytes:,} bytes; at most {max_bytes:,} are read")
    return parse_json(text, field, where)


def csv_records(text: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    r"""The header of CSV ``text`` and each later record with the file line it starts on. A quoted cell may
    span lines, so counting records would name the wrong line for every row after one; csv's own line
    count, read before each record, does not. Raises ``csv.Error`` as csv does.

    >>> csv_records('a,b\n"two\nlines",1\n3,4\n')
    (['a', 'b'], [(2, ['two\nlines', '1']), (4, ['3', '4'])])
    """
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, [])
    records = []
    first_line = reader.line_num + 1
    for cells in reader:
        records.append((first_line, cells))
        first_line = reader.line_num + 1
    return header, records


def read_csv_rows(path: str | Path, field: str, columns: tuple[str, ...],
                  skip_blank_cells: bool = False) -> list[tuple[int, dict[str, str]]]:
    """A CSV file read through ``read_text`` (at most ``MAX_CSV_BYTES``): each row with its line number, as a
    dict by the header's names. A file csv cannot parse, a missing one of ``columns``, or a row with more or
    fewer cells than the header is a ``SpecError`` naming ``field``, the column or the row. Empty lines are
    skipped, and with ``skip_blank_cells`` rows whose every cell is blank too (a spreadsheet's trailing rows)."""
    text = read_text(path, field, MAX_CSV_BYTES)
    try:
        header, lines = csv_records(text)
    except csv.Error as exc:
        raise SpecError(field, f"{path}: not a readable CSV ({exc})") from None
    missing = [c for c in columns if c not in header]
    if missing:
        raise SpecError(field, f"{path}: missing column {missing[0]}")
    # A column named twice: the row dicts kept its last cell, so a second 'value' silently replaced the first.
    # Unnamed columns (a spreadsheet's trailing empty ones) are read by nothing and may repeat.
    seen: set[str] = set()
    for name in header:
        if name in seen and name.strip():
            raise SpecError(field, f"{path}: column {quoted(name)} appears twice in the header")
        seen.add(name)
    rows = []
    for line, cells in lines:
        if not cells or (skip_blank_cells and not any(cell.strip() for cell in cells)):
            continue
        if len(cells) != len(header):
            raise SpecError(f"{field} row {line}", f"its cells do not match its header ({len(cells)} cells; "
                                                   f"the header has {len(header)} columns)")
        rows.append((line, dict(zip(header, cells, strict=True))))
    return rows
