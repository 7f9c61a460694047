"""The files one command writes: checked before any work, written beside their targets, renamed at the end.

``OutputFiles`` refuses, before the command solves anything, an output whose folder is missing or
not writable, one that is a directory or another non-regular file, two options naming one file, and
an output that is one of the command's inputs (compared as resolved paths, so ``./a.json`` and a
symlink to it are the same file). Writers are handed a temporary path in the target's folder with
the target's extension; ``commit`` renames them all once the command's work is done, ``discard``
removes them, so an error leaves nothing behind and never half a file.

An output named through a symlink is written through it, as most Unix tools write: the target is resolved,
the temporary made in the target's folder and renamed onto the target, so the link stays a link and its
target (created, if the link dangles) gets the content, atomically. An existing target keeps its permission
bits. A hard link to the target is not updated: the rename gives the name a new file.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import weakref
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

import click

from shardplan.models import SpecError
from shardplan.models.errors import printable


def _resolved(path: str | Path) -> str:
    return os.path.realpath(os.path.abspath(path))


# /dev/stdout and its kin, and the descriptor folders they lead to (/dev/fd -> /proc/self/fd -> /proc/PID/fd).
_STREAMS = frozenset({"/dev/stdin", "/dev/stdout", "/dev/stderr"})
_DESCRIPTORS = re.compile(r"^/(?:dev|proc/[^/]+)/fd/")
_MAX_LINKS = 40  # as the kernel's limit on links followed in one lookup


def _names_a_stream(path: str) -> bool:
    """Whether ``path``, or a link on the way to what it names, is an open descriptor: ``--out /dev/stdout``.

    Resolved, such a path is the descriptor's target: a pipe (``/proc/PID/fd/pipe:[N]``, so the folder
    check said 'cannot write to /proc/PID/fd: No such file or directory'), a terminal (refused as not a
    regular file), or the file stdout was redirected to, which the temporary's rename then replaced under
    the shell's redirection. None of them is what the option is for.
    """
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        folder, name = os.path.split(current)
        current = os.path.join(os.path.realpath(folder), name)
        if current in _STREAMS or _DESCRIPTORS.match(current):
            return True
        try:
            link = os.readlink(current)
        except OSError:  # not a link (or gone): what it names is not reached through a descriptor
            return False
        current = os.path.normpath(os.path.join(folder, link))
    return False


def _is_same_file(a: str, b: str) -> bool:
    """Same resolved path, or (both existing) the same inode: a hard link is the same file."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class OutputFiles:
    """The outputs of one command (``with OutputFiles(inputs) as outputs: ...``)."""

    def __init__(self, inputs: Iterable[str | Path | None] = ()) -> None:
        self._inputs = [_resolved(p) for p in inputs if p is not None and os.path.exists(p)]
        self._targets: dict[str, str] = {}  # _targets[option]: the resolved path the option names
        self._shown: dict[str, str] = {}  # _shown[option]: the path as the user typed it
        self._temps: dict[str, str] = {}  # _temps[option]: where its writer writes until commit
        _LIVE.add(self)

    def add(self, option: str, path: str | Path | None, *, directory_ok: bool = False) -> None:
        """Check ``path`` for ``--option`` now, before any work; None (option not given) is skipped."""
        if path is None:
            return
        if not str(path):  # realpath("") is the current folder: calibrate --out '' wrote its profiles there
            raise SpecError(option, "an empty path; name the file to write")
        if str(path) == "-":  # standard output to most tools, but stdout carries the result: a file "-" was written
            raise SpecError(option, "give a file path; '-' (standard output) is not supported "
                                    "(./- names a file called -)")
        shown, target = str(path), _resolved(path)
        if _names_a_stream(str(path)):
            raise SpecError(option, f"{printable(shown)} is an open stream (such as standard output), not a file; "
                                    "name a file to write")
        if directory_ok and os.path.isdir(target):
            folder = target
        else:
            folder = os.path.dirname(target)
            if os.path.isdir(target):
                raise SpecError(option, f"{shown} is a directory")
            if os.path.lexists(target):
                mode = _mode(option, shown, target)
                if not stat.S_ISREG(mode):
                    raise SpecError(option, f"{shown} exists and is not a regular file")
                # The rename that puts an output in place needs only the folder's permission: a file its owner
                # made read-only was replaced all the same. Refused as a plain open() would refuse it, and
                # for root too when no one at all may write it.
                if not os.access(target, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
                    raise SpecError(option, f"{shown} is read-only")
        if not os.path.isdir(folder):
            raise SpecError(option, f"directory {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise SpecError(option, f"cannot write to {folder}")
        _probe(option, folder)
        for known in self._inputs:
            if _is_same_file(target, known):
                raise SpecError(option, f"{shown} is an input of this command; write to another file")
        for other, taken in self._targets.items():
            if _is_same_file(target, taken):
                raise SpecError(option, f"{shown} is also the file of --{other}; give each output its own file")
        self._targets[option] = target
        self._shown[option] = shown

    def temp(self, option: str) -> str:
        """A new temporary path for ``--option``'s writer: in the target's folder, same extension."""
        target = self._targets[option]
        try:
            if os.path.isdir(target):  # a directory output: its files go into a temporary directory inside
                path = tempfile.mkdtemp(dir=target, prefix=".shardplan-")
            else:
                folder, name = os.path.split(target)
                fd, path = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=Path(name).suffix or ".tmp")
                os.close(fd)
                os.chmod(path, _mode_to_write(target))  # mkstemp makes 0600
        except OSError as exc:  # the folder changed since add() probed it
            raise SpecError(option, f"cannot write {self._shown[option]}: {exc.strerror}") from None
        self._temps[option] = path
        return path

    def commit(self) -> None:
        """Rename every written temporary onto its target."""
        for option, path in list(self._temps.items()):
            target = self._targets[option]
            if os.path.isdir(path):
                for name in sorted(os.listdir(path)):
                    os.replace(os.path.join(path, name), os.path.join(target, name))
                os.rmdir(path)
            else:
                os.replace(path, target)
            del self._temps[option]

    def discard(self) -> None:
        """Remove every temporary not yet committed."""
        for path in list(self._temps.values()):  # a copy: discard_all may run beside the writer's thread
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        self._temps.clear()

    def __enter__(self) -> OutputFiles:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # On success the command commits where it chooses (before printing); whatever is left is discarded.
        self.discard()


# Every OutputFiles not yet collected, for discard_all.
_LIVE: weakref.WeakSet[OutputFiles] = weakref.WeakSet()


def discard_all() -> None:
    """Remove the temporaries of every command's outputs still in flight: for a process about to end at once
    (the MCP server on a signal, ``os._exit``), whose calls' ``with`` blocks never reach their ``discard``."""
    for outputs in list(_LIVE):
        outputs.discard()


def _mode(option: str, shown: str, target: str) -> int:
    """The mode of an existing ``target``; a symlink loop or a vanished link target is the option's error."""
    try:
        return os.stat(target).st_mode
    except OSError as exc:
        raise SpecError(option, f"cannot use {shown}: {exc.strerror}") from None


def _probe(option: str, folder: str) -> None:
    """Create and remove a file in ``folder``: the permission bits do not tell (root passes ``os.access``
    on /proc, /sys or a read-only mount, and creating a file there fails only when tried)."""
    try:
        fd, path = tempfile.mkstemp(dir=folder, prefix=".shardplan-probe-")
    except OSError as exc:
        raise SpecError(option, f"cannot write to {folder}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(path)


def _mode_to_write(target: str) -> int:
    """The permission bits an output gets: an existing file's own (a file kept private, 0600, stays private, as
    writing into it would keep it), else what a plain open() creates (0666 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def say_wrote(path: str | Path) -> None:
    """The human view's line for a file written: its path as given, every control character escaped."""
    click.echo(f"wrote {printable(str(path))}")
