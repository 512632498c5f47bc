"""Infos in shared memory: a numeric column per info key, with a presence mask, learned as keys
appear.

Two tables (step infos, and the infos of resets done by autoreset) give every env a row of
``ROW_BYTES``: one presence byte per column, then the columns' values. A value can live in a
column when it is a Python ``int`` (64-bit), ``float`` or ``bool``, a numpy number, or a numeric
numpy array; its column has that exact type (and dtype and shape). Anything else, or a value of
another type than its key's column, travels pickled in the step's reply, as all infos did before.

The schema is learned, never declared. A worker sends a key it has no column for pickled, and
names it as a candidate; the parent gives it a column (``Schema.propose``), appends the column
to a log in shared memory and bumps a counter there; each worker reads the new columns from the
log before its next step (``InfoWriter.sync``). The log only grows, so nothing a worker reads
is ever rewritten. After a step, the worker says in two words of its control row which columns
it wrote (bitmasks); the parent copies the rows' bytes those use, in one copy (``read_block``,
``read_batch``), into the result's ``InfoMap``, which reads the columns out of the copy and
builds per-env dicts only when they are read. ``VectorEnv`` builds
gymnasium's vector infos from the copied columns directly (``vecsample.adapters.vector_infos``).
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

#: Bytes per env and table: presence bytes, then values (a few dozen float keys fit).
ROW_BYTES = 512
#: The presence bytes at the start of a row; one per column.
MASK_BYTES = 64
#: Columns at most: which ones a step wrote travels as a bitmask in one int64 word.
MAX_COLUMNS = 63
#: Bytes of the schema log (a column's entry is a short pickle).
LOG_BYTES = 1 << 16
STEP, RESET = 0, 1
#: Keys gymnasium's vector infos treat specially: never columns.
RESERVED = frozenset({"final_obs", "final_info"})
_INT64 = (-(2**63), 2**63)

#: (kind, dtype str, shape): the type of a value a column can hold.
Signature = tuple[type, str, tuple[int, ...]]
#: Infos of one step, sparse: (local env index, step info, reset info or None); the reset info
#: is set when the env was auto-reset during this step. What does not fit in the columns
#: travels in the step's reply (protocol.StepReply).
InfoRecord = tuple[int, dict[str, object], "dict[str, object] | None"]


def signature(key: str, value: Any) -> Signature | None:
    """The column type for ``value``, or None when it must travel pickled."""
    kind = type(value)
    if key in RESERVED:
        return None
    if kind is float:
        return float, "<f8", ()
    if kind is bool:
        return bool, "|b1", ()
    if kind is int:
        return (int, "<i8", ()) if _INT64[0] <= value < _INT64[1] else None
    if kind is np.ndarray:
        if value.dtype.kind in "biufc" and 0 < value.nbytes <= ROW_BYTES - MASK_BYTES:
            return np.ndarray, value.dtype.str, tuple(value.shape)
        return None
    if issubclass(kind, np.number):
        return kind, np.dtype(kind).str, ()
    return None


@dataclass(frozen=True)
class Column:
    """One info key's column: where its values sit in a row, and which values it takes."""

    index: int
    key: str
    kind: type
    dtype: str
    shape: tuple[int, ...]
    offset: int
    #: The dtype as numpy's, and the bytes of one value: read for every column of every step
    #: received (``values``), so worked out once here (np.dtype and np.prod cost microseconds
    #: each in a parent just woken from its wait).
    np_dtype: np.dtype[Any] = field(init=False, repr=False, compare=False)
    nbytes: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dtype = np.dtype(self.dtype)
        object.__setattr__(self, "np_dtype", dtype)
        object.__setattr__(self, "nbytes", dtype.itemsize * math.prod(self.shape))

    def accepts(self) -> Callable[[Any], bool]:
        """A fast test that a value has exactly this column's type (and fits it)."""
        kind, dtype, shape = self.kind, self.dtype, self.shape
        if kind is np.ndarray:
            return lambda v: type(v) is kind and v.dtype.str == dtype and v.shape == shape
        if kind is int:
            return lambda v: type(v) is int and _INT64[0] <= v < _INT64[1]
        return lambda v: type(v) is kind

    def zero(self) -> Any:
        return np.zeros(self.shape, self.dtype) if self.shape else 0

    def values(self, rows: np.ndarray) -> np.ndarray:
        """This column's values in ``rows`` (a (n, ROW_BYTES) uint8 view): (n, *shape)."""
        raw = rows[:, self.offset:self.offset + self.nbytes]
        return raw.view(self.np_dtype).reshape(len(rows), *self.shape)

    def python(self, values: np.ndarray, idx: np.ndarray) -> list[Any]:
        """The values at ``idx`` with the type the env gave them (int, float, numpy...)."""
        if self.kind in (int, float, bool):
            out: list[Any] = values[idx].tolist()
            return out
        return [values[i] for i in idx]


class InfoTables:
    """The tables' and the log's shared memory: views of the sampler's region, which
    ``shm.SharedBuffers`` owns, lays out and rebuilds these views from in each worker."""

    def __init__(self, num_envs: int, rows: np.ndarray, log: np.ndarray) -> None:
        self.num_envs = num_envs
        self.raw = rows  # (2, num_envs, ROW_BYTES) uint8: the STEP table, then the RESET one
        self.log = log  # (LOG_BYTES,) uint8

    def rows(self, table: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Rows [lo, hi) of ``table`` (STEP or RESET) as a (n, ROW_BYTES) uint8 view."""
        hi = self.num_envs if hi is None else hi
        return self.raw[table, lo:hi]

    def log_view(self) -> np.ndarray:
        return self.log


class Schema:
    """The parent's columns: given out as keys appear, appended to the shared log."""

    def __init__(self, tables: InfoTables) -> None:
        self.columns: list[Column] = []
        self._keys: set[str] = set()
        self._next = MASK_BYTES  # where the next column's values go in a row
        self._log = tables.log_view()
        self._log_end = 0
        self._rows = [tables.rows(STEP), tables.rows(RESET)]  # per table: (num_envs, ROW_BYTES)

    def copy(self, table: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """A copy of rows [lo, hi) of ``table``, of the bytes the columns use (presence bytes,
        then the values of every column given out so far)."""
        return self._rows[table][lo:hi, :self._next].copy()

    def copy_rows(self, table: int, rows: np.ndarray) -> np.ndarray:
        """``copy`` of the rows ``rows`` of ``table``, gathered in that order."""
        return self._rows[table][rows, :self._next]

    def propose(self, candidates: dict[str, Signature]) -> bool:
        """Gives a column to each candidate that fits; whether any was added."""
        added = False
        for key, (kind, dtype, shape) in candidates.items():
            if key in self._keys or len(self.columns) >= MAX_COLUMNS:
                continue
            self._keys.add(key)  # a key that does not fit stays pickled: not proposed again
            offset = -(-self._next // 8) * 8  # 8-byte aligned
            column = Column(len(self.columns), key, kind, dtype, shape, offset)
            entry = pickle.dumps((key, kind, dtype, shape, offset), pickle.HIGHEST_PROTOCOL)
            if offset + column.nbytes > ROW_BYTES or self._log_end + 4 + len(entry) > LOG_BYTES:
                continue
            self._log[self._log_end + 4:self._log_end + 4 + len(entry)] = np.frombuffer(
                entry, dtype=np.uint8)
            self._log[self._log_end:self._log_end + 4] = np.frombuffer(
                len(entry).to_bytes(4, "little"), dtype=np.uint8)
            self._log_end += 4 + len(entry)
            self._next = offset + column.nbytes
            self.columns.append(column)
            added = True
        return added


def read_log(tables: InfoTables, start: int, count: int, pos: int) -> tuple[list[Column], int]:
    """Columns ``start`` .. ``count - 1`` of the log, read from byte ``pos``; and the next pos."""
    log = tables.log_view()
    out = []
    for index in range(start, count):
        size = int.from_bytes(bytes(log[pos:pos + 4]), "little")
        key, kind, dtype, shape, offset = pickle.loads(bytes(log[pos + 4:pos + 4 + size]))
        out.append(Column(index, key, kind, dtype, shape, offset))
        pos += 4 + size
    return out, pos


class InfoWriter:
    """A worker's side: splits its step's info records into columns and leftovers."""

    def __init__(self, tables: InfoTables, lo: int, hi: int) -> None:
        self.count = hi - lo
        self.rows = [tables.rows(STEP, lo, hi), tables.rows(RESET, lo, hi)]
        self.masks = [r[:, :MASK_BYTES].view(np.bool_) for r in self.rows]
        self.tables = tables
        self.columns: list[Column] = []
        self.by_key: dict[str, tuple[Column, Callable[[Any], bool]]] = {}
        self.views: list[list[np.ndarray]] = [[], []]
        self._pos = 0
        #: Per table, the bitmask of the columns ``put`` wrote in this step.
        self.put_bits = [0, 0]

    def sync(self, published: int) -> None:
        """Starts a step: reads the columns the parent added since the last one (``published``
        in all)."""
        self.put_bits = [0, 0]
        if published == len(self.columns):
            return
        new, self._pos = read_log(self.tables, len(self.columns), published, self._pos)
        for column in new:
            self.columns.append(column)
            self.by_key[column.key] = (column, column.accepts())
            for t in (STEP, RESET):
                self.views[t].append(column.values(self.rows[t]))

    def put(self, table: int, columns: Mapping[str, Any], rows: np.ndarray) -> dict[str, Any]:
        """Writes a batch's columns (``key -> (count, ...) array``, present in the rows of the
        mask ``rows``) into ``table``: one copy per key into its shared column, and no per-env
        work. Returns the columns that have no shared column of their
        type (yet: its first steps), for the caller to send env by env as records; ``write``
        then names them as candidates and reports the columns written here with its own."""
        left: dict[str, Any] = {}
        if not rows.any():
            return left
        for key, values in columns.items():
            found = self.by_key.get(key)
            if found is None or not _fits(found[0], values, self.count):
                left[key] = values
                continue
            index = found[0].index
            # Every row: the values of an absent env are never read (its presence is False).
            np.copyto(self.views[table][index], values)
            self.masks[table][:, index] = rows
            self.put_bits[table] |= 1 << index
        return left

    def write(self, records: list[InfoRecord],
              ) -> tuple[list[InfoRecord], dict[str, Signature], int, int]:
        """Writes what fits into the columns; returns (leftover records, candidate keys, and
        the bitmasks of the step and reset columns written, ``put``'s of this step included)."""
        gathered: list[dict[int, tuple[list[Any], list[bool]]]] = [{}, {}]
        candidates: dict[str, Signature] = {}
        leftovers: list[InfoRecord] = []
        for j, info, reset_info in records:
            left = self._gather(gathered[STEP], j, info, candidates) if info else None
            left_reset = (self._gather(gathered[RESET], j, reset_info, candidates)
                          if reset_info else None)
            if left or left_reset:
                leftovers.append((j, left or {}, left_reset))
        return (leftovers, candidates, self._flush(STEP, gathered[STEP]) | self.put_bits[STEP],
                self._flush(RESET, gathered[RESET]) | self.put_bits[RESET])

    def _gather(self, out: dict[int, tuple[list[Any], list[bool]]], j: int,
                info: dict[str, Any], candidates: dict[str, Signature]) -> dict[str, Any] | None:
        left: dict[str, Any] | None = None
        by_key = self.by_key
        for key, value in info.items():
            found = by_key.get(key)
            if found is not None and found[1](value):
                slot = out.get(found[0].index)
                if slot is None:
                    zero = found[0].zero()
                    slot = out[found[0].index] = ([zero] * self.count, [False] * self.count)
                slot[0][j] = value
                slot[1][j] = True
                continue
            if left is None:
                left = {}
            left[key] = value
            if found is None and key not in candidates:
                sig = signature(key, value)
                if sig is not None:
                    candidates[key] = sig
        return left

    def _flush(self, table: int, gathered: dict[int, tuple[list[Any], list[bool]]]) -> int:
        """Writes each gathered column whole (values and presence of every env); a column not
        written this step is not in the bitmask, so its stale rows are never read."""
        bits = 0
        for index, (values, present) in gathered.items():
            self.views[table][index][:] = values
            self.masks[table][:, index] = present
            bits |= 1 << index
        return bits


def _fits(column: Column, values: Any, count: int) -> bool:
    """Whether ``values``, a batch's column, holds exactly what ``column`` holds per env: each
    env's value (``values[j]``) of the column's type, dtype and shape."""
    if type(values) is not np.ndarray or values.dtype.str != column.dtype or (
            values.shape != (count, *column.shape)):
        return False
    if column.kind is np.ndarray:
        return values.ndim > 1
    return values.ndim == 1 and column.kind is values.dtype.type


#: A column of one step: (column, every row's values, every row's presence).
Read = tuple[Column, np.ndarray, np.ndarray]


class Columns(Sequence[Read]):
    """The columns one step wrote in some rows of a table, from a copy of those rows taken
    when the step was received (the workers may rewrite theirs as soon as they are sent again,
    and the result must not change then). The copy is one ``numpy`` call over the bytes the
    columns use; each column's values and presence are views of it, made when first read, so a
    step whose infos are never read costs that one copy. ``stale``: per column index, the rows
    of the workers that did not write that column this step, shown as absent (zeros)."""

    def __init__(self, schema: Schema, raw: np.ndarray, bits: int,
                 stale: Callable[[int], np.ndarray | None] | None = None) -> None:
        self._columns, self._raw, self._bits, self._stale = schema.columns, raw, bits, stale
        self._read: list[Read] | None = None

    def _reads(self) -> list[Read]:
        if self._read is None:
            present = self._raw[:, :MASK_BYTES].view(np.bool_)
            out, bits = [], self._bits
            while bits:
                low = bits & -bits
                column = self._columns[low.bit_length() - 1]
                values, shown = column.values(self._raw), present[:, column.index]
                stale = None if self._stale is None else self._stale(low)
                if stale is not None:  # as a worker writes the rows of envs without the key
                    values, shown = values.copy(), shown & ~stale
                    values[stale] = 0
                out.append((column, values, shown))
                bits ^= low
            self._read = out
        return self._read

    def __len__(self) -> int:
        return self._bits.bit_count()

    @overload
    def __getitem__(self, i: int) -> Read: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Read]: ...
    def __getitem__(self, i: int | slice) -> Read | Sequence[Read]:
        return self._reads()[i]

    def __iter__(self) -> Iterator[Read]:
        return iter(self._reads())


#: One worker's columns of one step (or every worker's, from ``read_batch``): the env id of its
#: first row (rows follow in order), or of every row (a partial batch's gathered rows,
#: ``read_rows``), and the columns.
Block = tuple["int | np.ndarray", Sequence[Read]]


def read_block(schema: Schema, table: int, lo: int, hi: int, bits: int) -> Block:
    """The columns named by ``bits`` for rows [lo, hi), from one copy of those rows."""
    return lo, Columns(schema, schema.copy(table, lo, hi), bits)


def read_batch(schema: Schema, table: int, bits: np.ndarray, sizes: np.ndarray) -> Block:
    """``read_block`` for every row at once, after a full batch: one copy of every row; a
    worker that did not write a column this step (its bit clear in ``bits``, one bitmask per
    worker, whose blocks have ``sizes`` rows) shows none of it."""
    union = int(np.bitwise_or.reduce(bits))
    if bool((bits == union).all()):  # the common step: every worker wrote every column
        return 0, Columns(schema, schema.copy(table), union)
    mine = bits.copy()  # the caller's words are the next step's

    def stale(low: int) -> np.ndarray | None:
        wrote = (mine & low).astype(bool)
        return None if wrote.all() else ~np.repeat(wrote, sizes)

    return 0, Columns(schema, schema.copy(table), union, stale)


def read_rows(schema: Schema, table: int, bits: np.ndarray, rows: np.ndarray,
              sizes: np.ndarray) -> Block:
    """``read_batch`` for some workers' blocks, gathered: ``rows`` are the env ids of their
    blocks one after another (``sizes`` rows each, one bitmask each in ``bits``); one gathered
    copy of those rows."""
    union = int(np.bitwise_or.reduce(bits))
    mine = bits.copy()  # the caller's words are the next step's

    def stale(low: int) -> np.ndarray | None:
        wrote = (mine & low).astype(bool)
        return None if wrote.all() else ~np.repeat(wrote, sizes)

    return rows, Columns(schema, schema.copy_rows(table, rows), union, stale)


class InfoMap(MutableMapping[int, dict[str, Any]]):
    """Infos by global env id, like a dict; built from column copies only when first read.

    Its ``columnar`` form (column blocks, and per-env leftovers beside them) is always readable,
    so ``VectorEnv`` builds its vector infos from the columns without per-env dicts. Per-env
    dicts added later (a restart's ``restart_reason`` and reset infos) join the leftovers
    (``add``); only an item set or deleted by hand turns the whole map into leftovers."""

    def __init__(self) -> None:
        self._blocks: list[Block] = []
        self._left: dict[int, dict[str, Any]] = {}
        self._dict: dict[int, dict[str, Any]] | None = None

    def add(self, block: Block | None, leftovers: dict[int, dict[str, Any]]) -> None:
        """Adds one worker's columns and pickled leftovers (by global env id); a leftover
        merges into its env's leftovers (an empty one still lists the env)."""
        if block is not None and block[1]:
            self._blocks.append(block)
        for env, info in leftovers.items():
            self._left.setdefault(env, {}).update(info)
        self._dict = None

    def absorb(self, other: InfoMap) -> None:
        """Adds everything of ``other`` (another worker's envs), columns and leftovers."""
        self._blocks += other._blocks
        self._left.update(other._left)
        self._dict = None

    def columnar(self) -> tuple[list[Block], dict[int, dict[str, Any]]]:
        """(blocks, leftovers): the columns copied from the workers, and the per-env rest."""
        return self._blocks, self._left

    def _built(self) -> dict[int, dict[str, Any]]:
        if self._dict is None:
            self._dict = _materialize(self._blocks, self._left)
        return self._dict

    def __getitem__(self, env: int) -> dict[str, Any]:
        return self._built()[env]

    def __setitem__(self, env: int, info: dict[str, Any]) -> None:
        built = self._built()
        built[env] = info
        self._blocks, self._left = [], built

    def __delitem__(self, env: int) -> None:
        built = self._built()
        del built[env]
        self._blocks, self._left = [], built

    def __iter__(self) -> Iterator[int]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())

    def __repr__(self) -> str:
        return repr(self._built())


def _materialize(blocks: list[Block], left: dict[int, dict[str, Any]],
                 ) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for first, columns in blocks:
        for column, values, present in columns:
            idx = np.flatnonzero(present)
            envs = (idx + first if isinstance(first, int) else first[idx]).tolist()
            for env, value in zip(envs, column.python(values, idx), strict=True):
                out.setdefault(env, {})[column.key] = value
    for env, info in left.items():
        out.setdefault(env, {}).update(info)
    return dict(sorted(out.items()))
