"""A loaded shard as the next `--incremental` run resumes it.

Kafka's coordinator keeps its shard in memory and goes on replaying what is appended to the partition; an offline
run keeps the shard between runs instead: its state after the last record it read (`loader.ShardState`: groups,
committed and pending offsets with what a marker compares, the offsets of each open transaction's records), so the
next run loads only the records appended since (`streamed.StreamedShards(..., resume=)`). Beside it, what the shard's
later runs need of its past records that the state does not hold:

* the history rows (`offset_commits`) of the records of transactions still open: a later marker decides their
  outcome, and the run that reads it upgrades those rows;
* per topic id, the shard's latest ConsumerGroupPartitionMetadata (type 4) value naming it (topic names are
  cluster-wide, the latest by log position wins: each shard keeping its latest keeps the run's latest, even of
  groups since removed);
* each producer's last marker of each control type (the pending-offsets check compares with the last one).

Written as bytes: a header line with the format and the shard's size in state entries (read without the rest),
the state pickled, and the three tables as Arrow IPC. The state is unpickled with only the engine's own types and
plain values allowed (`_StateUnpickler`): a state file is read back from the warehouse, and a tampered one must
fail to load, not run code. `tests/coordinator/test_saved.py` checks the defining property on generated logs cut
at every batch boundary, both semantics: resume(load(prefix), rest) == load(prefix ∪ rest).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import pickle
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator import committed, decoded, groups, loader
from pipelines.coordinator.committed import CommittedOffsets
from pipelines.coordinator.loader import ShardState
from pipelines.heap import gc_paused
from pipelines.io.blobs import from_plain_blob
from schemas.decoded import DECODED_RECORD_SCHEMA
from schemas.tables import OFFSET_COMMITS


def _layout() -> str:
    """The saved shard's layout: a version for how `ShardState` pickles and what it holds (bump it when
    `__getstate__` changes, or when a state saved before would resume wrong: 7, a legacy shard holds the simple
    groups its offset values made), and the fields of every type the state holds, so a field added or renamed makes
    a new format by itself."""
    types = (loader.ShardState, groups.GroupStore, groups.ClassicGroup, groups.ClassicMember, groups.SimpleGroup,
             groups.ConsumerGroup, groups.ShareGroup, groups.StreamsGroup, groups.ConsumerGroupMember,
             groups.MemberMetadata, groups.GroupRecord)
    fields = repr([(t.__name__, getattr(t, "__slots__", None), getattr(t, "_fields", None),
                    [f.name for f in dataclasses.fields(t)] if dataclasses.is_dataclass(t) else None) for t in types])
    fields += str(committed.SCHEMA)
    return "7." + hashlib.sha256(fields.encode()).hexdigest()[:12]


#: The format of the saved shards this version writes and reads (a checkpoint names it: another means a full run).
FORMAT = _layout()
MAGIC = b"offsetlake-shard/" + FORMAT.encode()


class SavedShardError(ValueError):
    """A state file that is not a saved shard of this version (or was altered)."""


@dataclass
class SavedShard:
    state: ShardState  # as loading left it, without the group events of the records it loaded
    open_history: pa.Table  # the `offset_commits` rows of the open transactions' records
    naming: pa.Table  # `shard.NAMING_COLUMNS`: the latest type-4 value naming each topic id
    markers: pa.Table  # `shard.MARKER_COLUMNS`: each producer's last marker of each control type

    @property
    def entries(self) -> int:
        """The shard's size in state entries (offsets, pending offsets, groups): what resuming it holds."""
        s = self.state
        return (len(s.offsets) + s.pending.num_rows + len(s.groups.groups)
                + self.open_history.num_rows)

    def to_bytes(self) -> bytes:
        out = io.BytesIO()
        out.write(MAGIC + b" %d\n" % self.entries)
        with gc_paused():
            state = pickle.dumps(self.state, protocol=pickle.HIGHEST_PROTOCOL)
        for part in (state,
                     *(_ipc(t) for t in (self.open_history, self.naming, self.markers))):
            out.write(len(part).to_bytes(8, "little"))
            out.write(part)
        return out.getvalue()

    @staticmethod
    def from_bytes(data: bytes, source: str, partition: int, modern: bool) -> "SavedShard":
        """The saved shard of `data`: one of offsets `partition`, saved under `modern`'s semantics, whose every field
        holds what its type declares (`check_state`), as a run resuming it needs."""
        with _reading(source):
            parts = _parts(data, source)
            with gc_paused():
                state = _StateUnpickler(io.BytesIO(parts[0])).load()
            tables = [from_plain_blob(p) for p in parts[1:4]]
            if not isinstance(state, ShardState) or len(tables) != 3:
                raise SavedShardError(f"{source}: unreadable saved shard")
            check_state(state, partition, modern, source)  # a slot never set raises AttributeError
            for name, table, schema in zip(("open_history", "naming", "markers"), tables, _TABLE_SCHEMAS):
                if not table.schema.equals(schema):
                    raise SavedShardError(f"{source}: unreadable saved shard: its {name} rows are of another layout")
        return SavedShard(state, *tables)

    @staticmethod
    def union(parts: list["SavedShard"]) -> "SavedShard":
        """One partition's shard from those its groups' buckets saved (a split partition's full run:
        `frames.segment_shards`), which share no key (`ShardState.union`); the markers are bucket 0's, the only
        one that saves them."""
        if len(parts) == 1:
            return parts[0]

        def rows(name: str) -> pa.Table:
            tables = [getattr(p, name) for p in parts]
            return pa.concat_tables([t.cast(tables[0].schema) for t in tables])

        return SavedShard(ShardState.union([p.state for p in parts]), rows("open_history"),
                          latest_namers(rows("naming")), rows("markers"))


def naming_of(data: bytes, source: str = "state") -> pa.Table:
    """The `naming` rows of a saved shard's bytes, without loading its state: the topic names a run needs before
    it loads any shard."""
    with _reading(source):
        parts = _parts(data, source)
        if len(parts) != 4:
            raise ValueError(f"{len(parts)} parts, not 4")
        return from_plain_blob(parts[2])


def _parts(data: bytes, source: str) -> list[bytes]:
    """The state and the three tables of a saved shard's bytes, as `to_bytes` lays them out."""
    header, _, body = data.partition(b"\n")
    if not header.startswith(MAGIC + b" "):
        raise SavedShardError(f"{source}: not a saved shard of this version")
    parts, at = [], 0
    while at < len(body):
        n = int.from_bytes(body[at:at + 8], "little")
        parts.append(body[at + 8:at + 8 + n])
        at += 8 + n
    return parts


@contextlib.contextmanager
def _reading(source: str):
    """Whatever a damaged or altered file makes the readers raise, as one `SavedShardError` line."""
    try:
        yield
    except SavedShardError:
        raise
    except Exception as e:
        why = " ".join(str(e).split())  # one line
        raise SavedShardError(f"{source}: unreadable saved shard: {type(e).__name__}: {why}") from None


def entries_of(data: bytes) -> int:
    """The state entries a saved shard's bytes hold, from their header."""
    header = data[:64].partition(b"\n")[0]
    return int(header[len(MAGIC):]) if header.startswith(MAGIC + b" ") else 0


def saved_shards(states: list[ShardState], history: pa.Table, naming: pa.Table, markers: pa.Table
                 ) -> dict[int, SavedShard]:
    """Each loaded shard as the next run resumes it: its state, its history rows still pending out of `history`
    (outcomes decided), the latest of its `naming` rows per topic id and its last of `markers` per producer and
    type (`history`, `naming` and `markers`: every shard's rows, the previous saved shards' and the records loaded
    since)."""
    still_open = history.filter(pc.fill_null(pc.equal(history.column("txn_outcome"), "pending"), False))
    markers = last_markers(markers)
    return {s.partition: SavedShard(dataclasses.replace(s, groups=s.groups.resumed()),
                                    _of(still_open, s.partition), latest_namers(_of(naming, s.partition)),
                                    _of(markers, s.partition)) for s in states}


def _of(table: pa.Table, partition: int) -> pa.Table:
    return table.filter(pc.equal(table.column("offsets_partition"), partition))


def latest_namers(naming: pa.Table) -> pa.Table:
    """The rows of `naming` (type-4 records of one shard) that are the latest to name some topic id: a tombstone, or
    a value superseded for every topic it named, is none of them, alone or not."""
    if naming.num_rows == 0:
        return naming
    naming = naming.sort_by([("offset", "ascending")])
    namer: dict[str, int] = {}
    for i, topics in enumerate(naming.column("topics_metadata").to_pylist()):
        for t in topics or ():
            namer[t["topic_id"]] = i
    return naming.take(pa.array(sorted(set(namer.values())), pa.int64()))


def last_markers(markers: pa.Table) -> pa.Table:
    """Each producer's last marker of each control type among `markers`, per offsets partition."""
    if markers.num_rows <= 1:
        return markers
    keys = [c for c in markers.column_names if c != "offset"]
    last = markers.group_by(keys, use_threads=False).aggregate([("offset", "max")])
    return last.rename_columns([*keys, "offset"]).select(markers.column_names).cast(markers.schema)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


# A state file is read back from the warehouse: an unpickled state of the right classes may still hold a str where
# the replay keeps an int, a group under another id, another partition's shard, which a resumed run would write
# into its snapshot (or fail on with a traceback). What each field may hold is what the types declare; each type's
# test is compiled from its annotations into one expression, as a walk of nested lambdas took 6x the unpickling.
_INT64 = (-(1 << 63), 1 << 63)


class _Tests:
    """Per state type, a function telling whether a value is one (`of`), its fields as their annotations say."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {"_lo": _INT64[0], "_hi": _INT64[1]}
        self.tests: dict[type, Callable[[Any], bool]] = {}

    def of(self, cls: type) -> Callable[[Any], bool]:
        if cls not in self.tests:
            self.names[cls.__name__] = cls
            body = " and ".join([f"type(v) is {cls.__name__}"] + [self.expr(h, f"v.{k}", 0)
                                                                 for k, h in self.fields(cls).items()])
            exec(f"def test(v):\n    return {body}\n", self.names)
            self.tests[cls] = self.names[f"is_{cls.__name__}"] = self.names.pop("test")
        return self.tests[cls]

    @staticmethod
    def fields(cls: type) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in dataclasses.fields(cls)}

    def expr(self, hint: Any, v: str, depth: int) -> str:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        x, k = f"x{depth}", f"k{depth}"
        if origin in (typing.Union, types.UnionType):
            none_first = sorted(args, key=lambda a: a is not type(None))
            return "(" + " or ".join(self.expr(a, v, depth) for a in none_first) + ")"
        if hint is None or hint is type(None):
            return f"{v} is None"
        if hint is int:
            return f"(type({v}) is int and _lo <= {v} < _hi)"
        if hint in (str, bool):
            return f"type({v}) is {hint.__name__}"
        if origin in (list, Sequence):
            kinds = "type({v}) is list" if origin is list else "type({v}) in (list, tuple)"
            return f"({kinds.format(v=v)} and all({self.expr(args[0], x, depth + 1)} for {x} in {v}))"
        if origin is dict:
            return (f"(type({v}) is dict and all({self.expr(args[0], k, depth + 1)} and "
                    f"{self.expr(args[1], x, depth + 1)} for {k}, {x} in {v}.items()))")
        if typing.is_typeddict(hint):
            hints = typing.get_type_hints(hint)
            self.names[f"keys_{hint.__name__}"] = hints.keys()
            return (f"(type({v}) is dict and {v}.keys() == keys_{hint.__name__} and "
                    + " and ".join(self.expr(h, f"{v}[{n!r}]", depth) for n, h in hints.items()) + ")")
        if dataclasses.is_dataclass(hint):
            self.of(hint)
            return f"is_{hint.__name__}({v})"
        raise TypeError(f"no test for {hint!r}")

    def of_hint(self, hint: Any) -> Callable[[Any], bool]:
        exec(f"def test(v):\n    return {self.expr(hint, 'v', 0)}\n", self.names)
        return self.names.pop("test")


# What `to_bytes` writes its tables as: a resumed run concatenates them with its own rows of these layouts
_TABLE_SCHEMAS = (OFFSET_COMMITS, pa.schema([DECODED_RECORD_SCHEMA.field(c) for c in decoded.NAMING_COLUMNS]),
                  pa.schema([DECODED_RECORD_SCHEMA.field(c) for c in decoded.MARKER_COLUMNS]))
_TESTS = _Tests()
_IS_GROUP = _TESTS.of_hint(groups.Group)
_IS_RECORD = _TESTS.of(groups.GroupRecord)
_IS_OPEN_RECORDS = _TESTS.of_hint(dict[int, list[int]])


def check_state(state: Any, partition: int, modern: bool, source: str) -> None:
    """Raises `SavedShardError` unless `state` is a `ShardState` of offsets `partition`, saved under `modern`'s
    semantics, whose every field holds what its type declares."""
    def wrong(what: str) -> SavedShardError:
        return SavedShardError(f"{source}: unreadable saved shard: {what}")

    if type(state) is not ShardState:
        raise wrong(f"a {type(state).__name__}, not a shard's state")
    if type(state.partition) is not int or state.partition != partition:
        raise wrong(f"the state of offsets partition {state.partition!r:.80}, not {partition}")
    if type(state.modern) is not bool:
        raise wrong(f"modern = {state.modern!r:.80}")
    if state.modern is not modern:
        raise wrong(f"saved under {'modern' if state.modern else 'legacy'} semantics, not this run's")
    store = state.groups
    if type(store) is not groups.GroupStore or type(store.groups) is not dict \
            or type(store.last_group_record) is not dict:
        raise wrong("its groups are not a group store")
    if type(state.offsets) is not CommittedOffsets or type(state.pending) is not pa.Table \
            or state.pending.schema != committed.SCHEMA or not _IS_OPEN_RECORDS(state.open_records):
        raise wrong("its offsets are not a shard's")
    for gid, g in store.groups.items():
        if not _IS_GROUP(g) or g.group_id != gid:
            fields = _TESTS.fields(type(g)) if type(g) in typing.get_args(groups.Group) else {}
            bad = [k for k, h in fields.items() if not _TESTS.of_hint(h)(getattr(g, k))] or ["group_id"] \
                if fields else []
            raise wrong(f"group {gid!r:.80}: " + (f"{bad[0]} = {getattr(g, bad[0])!r:.80}" if bad
                                              else f"a {type(g).__name__}, not a group"))
    for gid, r in store.last_group_record.items():
        if type(gid) is not str or not _IS_RECORD(r):
            raise wrong(f"the last record of group {gid!r:.80}: {r!r:.80}")


class _StateUnpickler(pickle.Unpickler):
    """Unpickles the engine's state types and plain values only."""

    # The classes a saved shard names, and nothing else: its plain values (str, int, list, dict, tuple, None, bool)
    # have opcodes of their own, and any other callable is one a crafted file can call (`builtins.list` of
    # `builtins.bytes(10**12)` asks for terabytes). Each of these defines `__setstate__`, so BUILD on a class
    # itself fails instead of setting its attributes (`groups._set_slots`).
    ALLOWED = {
        "pipelines.coordinator.loader": {"ShardState"},
        "pipelines.coordinator.groups": {"GroupStore", "ClassicGroup", "ClassicMember", "SimpleGroup", "ConsumerGroup",
                                         "ShareGroup", "StreamsGroup", "ConsumerGroupMember", "MemberMetadata",
                                         "GroupRecord"},
    }

    def find_class(self, module, name):
        if name in self.ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a saved shard")
