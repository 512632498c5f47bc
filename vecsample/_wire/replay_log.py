"""The replay log's file format: a versioned header, then small msgpack records.

The log: ``MAGIC``, the format version (uint16) and the header's length (uint32), a msgpack map
(what identifies the run, ``header``: the layout and every option that decides what the
run samples, ``Options.identity``), then one msgpack array ``[tag, fields...]`` per record
(``Tag``). Records are appended as calls happen; a run that crashed leaves a log that reads up to
its last complete record. The recorder and the replayer that use it are in replay.py.
"""

from __future__ import annotations

import hashlib
import numbers
import os
import re
import reprlib
import struct
import weakref
from collections.abc import Callable, Iterable, Iterator
from enum import IntEnum
from typing import IO, Any

import msgpack
import numpy as np

from vecsample import errors
from vecsample._wire.protocol import Command
from vecsample.types import PathArg

#: The first bytes of every log.
MAGIC = b"VSREPLAY"
#: The format written; a reader accepts only this one. 2: the header holds every option of
#: ``Options.identity`` and ``num_workers`` counts processes (1 counted pipelined halves).
VERSION = 2
_PREFIX = struct.Struct("<8sHI")  # magic, version, header length

#: " at 0x7f...": the address in a default repr, different in every process.
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class Tag(IntEnum):
    """The kind of a record; each record is the array ``[tag, fields...]``."""

    SEND = 1  # [SEND, worker]
    SEND_ALL = 2  # [SEND_ALL]
    RECV = 3  # [RECV, [workers in the order returned]]
    RECV_ERROR = 4  # [RECV_ERROR, [workers handed over], error type, [hung workers]]
    RESET = 5  # [RESET, seed (int, None or a digest), options digest, mask digest]
    COMMAND = 6  # [COMMAND, Command, payload digest]
    RESTART = 7  # [RESTART, worker, reason]: after the call in which it happened


#: The commands a COMMAND record names: those ``VecSampler`` records (a reset has its own kind).
RECORDED_COMMANDS = (Command.RESET_TASK, Command.CALL, Command.GET_ATTR, Command.SET_ATTR)
_COMMANDS = frozenset(int(c) for c in RECORDED_COMMANDS)
#: The size of a ``digest``.
DIGEST_SIZE = 8


def _worker(x: object) -> bool:
    return type(x) is int and x >= 0  # not a bool: msgpack keeps true apart from 1


def _workers(x: object) -> bool:
    return type(x) is list and all(_worker(w) for w in x) and len(set(x)) == len(x)


def _digest(x: object) -> bool:
    return x is None or (type(x) is bytes and len(x) == DIGEST_SIZE)


def _seed(x: object) -> bool:
    return type(x) is int or _digest(x)


def _command(x: object) -> bool:
    return type(x) is int and x in _COMMANDS


def _text(x: object) -> bool:
    return type(x) is str


_WORKERS = "a list of distinct ints >= 0"
_DIGEST = f"{DIGEST_SIZE} bytes or nil"
#: The fields that follow the tag in a record of each kind: what each is, and its check. The
#: reader checks every record against it, so that the replayer only ever sees well-formed ones.
FIELDS: dict[Tag, tuple[tuple[str, Callable[[object], bool]], ...]] = {
    Tag.SEND: (("worker: an int >= 0", _worker),),
    Tag.SEND_ALL: (),
    Tag.RECV: ((f"workers: {_WORKERS}", _workers),),
    Tag.RECV_ERROR: ((f"workers handed over: {_WORKERS}", _workers),
                     ("error type: a str", _text), (f"hung workers: {_WORKERS}", _workers)),
    Tag.RESET: ((f"seed: an int, nil or {DIGEST_SIZE} bytes", _seed),
                (f"options digest: {_DIGEST}", _digest), (f"mask digest: {_DIGEST}", _digest)),
    Tag.COMMAND: (("command: one of " + ", ".join(f"{int(c)} ({c.name.lower()})"
                                                  for c in RECORDED_COMMANDS), _command),
                  (f"payload digest: {_DIGEST}", _digest)),
    Tag.RESTART: (("worker: an int >= 0", _worker), ("reason: a str", _text)),
}


def digest(value: object) -> bytes | None:
    """8 bytes that tell two values apart (None stays None): of a numpy array's bytes, else of
    its repr without memory addresses (which differ from run to run)."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        data = value.dtype.str.encode() + repr(value.shape).encode() + value.tobytes()
    else:
        data = ADDRESS.sub("", repr(value)).encode()
    return hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest()


def seed_field(seed: object) -> object:
    """A reset's seed as recorded: an int (numpy's too) or None as it is, else its digest."""
    if seed is None or isinstance(seed, numbers.Integral):
        return None if seed is None else int(seed)
    if isinstance(seed, Iterable):
        return digest([None if s is None else int(s) for s in seed])
    return digest(seed)


# --- the file ------------------------------------------------------------------------------------


class LogWriter:
    """Appends records to a new log; the header is on disk before the first record."""

    def __init__(self, path: PathArg, head: dict[str, Any]) -> None:
        self.path = os.fspath(path)
        try:
            self._file: IO[bytes] = open(self.path, "wb", buffering=1 << 16)  # noqa: SIM115
        except OSError as exc:
            raise errors.ConfigError(name="record", expected="a path where a file can be "
                                     "written", got=self.path, fix=str(exc)) from exc
        body = msgpack.packb(head)
        self._file.write(_PREFIX.pack(MAGIC, VERSION, len(body)) + body)
        self._file.flush()
        # A sampler that is never closed still leaves its log complete at interpreter exit.
        self._finalizer = weakref.finalize(self, self._file.close)
        self.write = self._write_bytes
        self._pack = msgpack.Packer().pack

    def _write_bytes(self, data: bytes) -> None:
        self._file.write(data)

    def record(self, *fields: Any) -> None:
        self._file.write(self._pack(list(fields)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._finalizer()


class LogReader:
    """Reads a log record by record; ``header`` is checked when opened."""

    def __init__(self, path: PathArg) -> None:
        self.path = os.fspath(path)
        try:
            self._file: IO[bytes] = open(self.path, "rb")  # noqa: SIM115
        except OSError as exc:
            raise self._error(f"cannot be opened ({exc})",
                              "pass the path the run recorded to") from exc
        self._finalizer = weakref.finalize(self, self._file.close)
        self.header = self._read_header()
        self._unpacker = msgpack.Unpacker(self._file, raw=False, strict_map_key=False)
        self._records: Iterator[Any] = iter(self._unpacker)
        self.count = 0  # records read so far
        self.end = ""  # once the end is reached: where, and whether a record was cut short

    def _error(self, problem: str, fix: str) -> errors.ReplayLogError:
        return errors.ReplayLogError(path=self.path, problem=problem, fix=fix)

    def _read_header(self) -> dict[str, Any]:
        prefix = self._file.read(_PREFIX.size)
        if len(prefix) < _PREFIX.size or prefix[:len(MAGIC)] != MAGIC:
            self.close()
            raise self._error(f"does not start with {MAGIC!r}, it is not a vecsample replay "
                              f"log", "pass the file that VecSampler(record=...) wrote")
        _, version, size = _PREFIX.unpack(prefix)
        self._base = _PREFIX.size + size  # where the records start
        if version < VERSION:  # an older vecsample's: its header lacks options this one checks
            self.close()
            raise errors.ReplayDivergedError(
                path=self.path, call=0, expected=f"a log in format version {version} (an "
                "older vecsample's)", got=f"a sampler that replays version {VERSION}, whose "
                "header holds every option that decides what a run samples",
                fix="record the run again with this vecsample, or replay it with the vecsample "
                "that recorded it")
        if version != VERSION:
            self.close()
            raise self._error(f"is in format version {version}, this vecsample reads version "
                              f"{VERSION}", "replay it with the vecsample that recorded it")
        try:
            head = msgpack.unpackb(self._file.read(size), raw=False)
        except (ValueError, msgpack.UnpackException) as exc:
            self.close()
            raise self._error(f"has a corrupt header ({exc})", "record the run again") from exc
        if not isinstance(head, dict):
            self.close()
            raise self._error("has a header that is not a map", "record the run again")
        return head

    def next(self) -> list[Any] | None:
        """The next record, or None at the end of the log (or of its last complete record)."""
        offset = self._unpacker.tell() + self._base
        try:
            record = next(self._records, None)
        except (ValueError, msgpack.UnpackException) as exc:
            raise self._error(f"record {self.count} (byte {offset}) is corrupt ({exc})",
                              "record the run again") from exc
        if record is None:
            size = os.fstat(self._file.fileno()).st_size
            self.end = f"after {self.count} records" + (
                f" (then {size - offset} bytes of a record cut short: the run crashed)"
                if size > offset else "")
            return None
        problem = malformed(record)
        if problem:
            raise self._error(f"record {self.count} (byte {offset}) is not a valid record: "
                              f"{reprlib.repr(record)} ({problem})", "record the run again")
        self.count += 1
        return list(record)

    def close(self) -> None:
        self._finalizer()


def malformed(record: object) -> str:
    """What is wrong with ``record`` as a record of the log ("" if nothing): its kind, its
    number of fields, or a field of the wrong type (``FIELDS``)."""
    if not isinstance(record, list) or not record:
        return f"expected an array [kind, fields...], got {type(record).__name__}"
    tag = record[0]
    if type(tag) is not int or tag not in Tag._value2member_map_:
        kinds = ", ".join(f"{int(t)} ({t.name})" for t in Tag)
        return f"expected a kind first, one of {kinds}; got {reprlib.repr(tag)}"
    fields = FIELDS[Tag(tag)]
    layout = ", ".join([str(tag), *(what.partition(":")[0] for what, _ in fields)])
    if len(record) != 1 + len(fields):
        return (f"a {Tag(tag).name} record is [{layout}]: {1 + len(fields)} entries, got "
                f"{len(record)}")
    for (what, check), value in zip(fields, record[1:], strict=True):
        if not check(value):
            return f"a {Tag(tag).name} record is [{layout}], with {what}; got {reprlib.repr(value)}"
    return ""


def describe(record: list[Any] | None, end: str = "") -> str:
    """A record as the call that made it, for error messages (``end``: where the log ends)."""
    if record is None:
        return f"no further call (the log ends {end or 'here'})"
    tag, fields = Tag(record[0]), record[1:]
    if tag is Tag.SEND:
        return f"step_send({fields[0]}, ...)"
    if tag is Tag.SEND_ALL:
        return "send_all(...) (or step(...))"
    if tag is Tag.RECV:
        return f"step_recv() returning workers {fields[0]}"
    if tag is Tag.RECV_ERROR:
        return f"step_recv() returning workers {fields[0]} and raising {fields[1]}"
    if tag is Tag.RESET:
        return f"reset(seed={fields[0]!r}, ...)"
    if tag is Tag.COMMAND:
        return f"{Command(fields[0]).name.lower()}(...)"
    return f"a restart of worker {fields[0]} ({fields[1]})"


__all__ = ["FIELDS", "MAGIC", "RECORDED_COMMANDS", "VERSION", "LogReader", "LogWriter", "Tag",
           "describe", "digest", "malformed", "seed_field"]
