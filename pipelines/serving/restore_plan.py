"""`offsetlake restore-plan`: every selected group's committed offsets at a past time, as the files
`kafka-consumer-groups.sh --reset-offsets --from-file` reads, with the script that applies them.

The offsets at TIME come from the snapshot's history, not from a new rebuild, and from the one engine: the history
rows at or before TIME (`offset_commits`, the markers that decided its transactions, the group records
`group_history.record_json` keeps) are turned back into the decoded records the loaders read, and replayed with
the snapshot's semantics and a cleanup pass at TIME (`coordinator.shard`), exactly as `rebuild --until-time TIME`
would replay the log. A history written before it kept those facts cannot be replayed: `HistoryUnavailable`.

What is written (`write_restore_plan`, `restore_plan_zip`):

* `<file>.csv` per group with offsets: `topic,partition,offset` lines, no header (ConsumerGroupCommand's
  single-group `--from-file` form). `<file>` is the group id when it is a safe file name (`[A-Za-z0-9_-]` first,
  then `[A-Za-z0-9._-]`, at most 200 characters); any other id is `%` followed by its UTF-8 bytes percent-encoded
  (every byte outside `[A-Za-z0-9_-]`, the dot included), so `urllib.parse.unquote(name[1:])` gives it back, and
  an id whose encoding would be longer than 200 characters is `~` and the first 32 hex digits of its SHA-256.
  Groups whose names would differ only in case (one file on a case-insensitive file system) have their capital
  letters percent-encoded too (`file_stems`).
  `index.json` maps every file name to its group id either way.
* `apply.sh`: per group a `--dry-run` command, then the `--execute` one (run only with `apply.sh --execute`).
* `README.txt`: what the plan is, and the groups the reset will refuse (members in the served snapshot), the
  groups gone since, the partitions whose target is below the log start offset the snapshot knows (the reset would
  skip records: how many, and how much time of data, up to the first record still held) or above the log end offset
  it knows, the groups with nothing to restore at TIME, the partitions committed now that held no offset at TIME
  (the reset leaves them). `clamp`: targets clamped into [log start, log end] in the
  files, and README.txt lists each one moved.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
import shutil
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import json as pa_json

from pipelines.coordinator.options import (DEFAULT_KAFKA_VERSION, DEFAULT_RETENTION_MINUTES, DEFAULT_SEMANTICS,
                                           ReplayOptions)
from pipelines.heap import gc_paused
from pipelines.io.snapshots import GroupNotFound, Snapshot, SnapshotReader
from pipelines.serving.group_regex import check as check_group_regex, matching
from pipelines.serving.history import (HistoryUnavailable, check_not_before, check_within, group_events, held_at,
                                       outcome_as_of, snapshot_commits)
from pipelines.serving.index import check_groups_known, no_group_matches
from pipelines.serving.reset_plan import legal_topic, reset_refused
from pipelines.times import EPOCH, datetime_to_ms, parse_time_ms
from schemas.decoded import DECODED_RECORD_SCHEMA

_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
_MAX_STEM = 200
_TOOL = "kafka-consumer-groups.sh"


@dataclass
class GroupPlan:
    group_id: str
    file: str | None  # None: nothing to restore at TIME
    offsets: list[tuple[str, int, int]]  # (topic, partition, committed offset at TIME), sorted
    skipped: list[str] = field(default_factory=list)  # partitions left out of the file, and why
    state_now: str | None = None  # in the served snapshot; None: the group does not exist there
    members_now: int = 0
    gone_reason: str | None = None
    current: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> offset in the served
    below_log_start: list[tuple[str, int, int, int]] = field(default_factory=list)  # topic, partition, target, start
    above_log_end: list[tuple[str, int, int, int]] = field(default_factory=list)  # topic, partition, target, end
    clamped: list[tuple[str, int, int, int]] = field(default_factory=list)  # topic, partition, target, written
    # committed in the served snapshot, no offset at TIME: the reset leaves them as they are
    not_reset: list[tuple[str, int, int]] = field(default_factory=list)  # topic, partition, offset now

    @property
    def refused(self) -> bool:
        return reset_refused(self.state_now)

    @property
    def unpassable(self) -> bool:
        """No command line can carry the id: an argument is a C string, and the shell (dash, bash) drops a NUL
        character from a script's text, so kafka-consumer-groups.sh would be handed another group's id (`a<NUL>b`
        as `ab`) and reset that group to this one's offsets."""
        return "\0" in self.group_id


@dataclass
class RestorePlan:
    snapshot_id: str
    semantics: str
    as_of_ms: int
    groups: list[GroupPlan]
    selection: str
    log_start_known: bool = False
    clamp: bool = False  # targets clamped into [log start, log end] (`--clamp`)
    # (topic, partition) -> the first record at the log start's time (ms), for the time a reset below it skips
    log_start_times: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"snapshot_id": self.snapshot_id, "semantics": self.semantics, "as_of": _iso(self.as_of_ms),
                "selection": self.selection,
                "groups": [{"group_id": g.group_id, "file": g.file,
                            "offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in g.offsets],
                            "refused": g.refused, "state_now": g.state_now, "gone": g.gone_reason,
                            "in_apply_sh": g.file is not None and not g.unpassable,
                            "not_reset": [{"topic": t, "partition": p, "offset": o} for t, p, o in g.not_reset],
                            "skipped": g.skipped} for g in self.groups]}


def counted(n: int, noun: str) -> str:
    """`1 group`, `2 groups`: a count with its noun (every noun here takes an s)."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def parse_instant(text: str, what: str = "time") -> int:
    """A TIME as every command takes it (`pipelines.times`: ISO-8601, UTC when no zone, or epoch milliseconds) ->
    epoch ms. Raises ValueError (TimeFormatError) with a one-line message."""
    return parse_time_ms(text or "", what=what)


# ------------------------------------------------------------------------------------------------ file names
def file_stem(group_id: str, *, capitals: bool = False) -> str:
    """The group's file name without `.csv` (see the module's docstring for the encoding). `capitals`: the id's
    capital letters percent-encoded too, for a plan where two groups' names would differ only in case."""
    if not capitals and _SAFE_NAME.fullmatch(group_id):
        return group_id
    if capitals:
        encoded = "%" + "".join(chr(b) if chr(b) in _LOWER_SAFE else f"%{b:02X}" for b in group_id.encode("utf-8"))
    else:
        encoded = "%" + quote(group_id.encode("utf-8"), safe="").replace(".", "%2E").replace("~", "%7E")
    if len(encoded) <= _MAX_STEM:
        return encoded
    return "~" + hashlib.sha256(group_id.encode("utf-8")).hexdigest()[:32]


_LOWER_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def file_stems(group_ids) -> dict[str, str]:
    """Group id -> its file name without `.csv`, no two of them the same but for case: on a case-insensitive file
    system (macOS', Windows') `Orders.csv` and `orders.csv` are one file, so the plan's second group would overwrite
    the first's targets and apply.sh reset both groups from it. The groups whose names would collide so are named
    with their capital letters percent-encoded as well (`%%4Frders`), which `unquote` still reverses."""
    stems = {g: file_stem(g) for g in group_ids}
    seen: dict[str, int] = {}
    for stem in stems.values():
        seen[stem.lower()] = seen.get(stem.lower(), 0) + 1
    return {g: file_stem(g, capitals=True) if seen[stem.lower()] > 1 else stem for g, stem in stems.items()}


# ------------------------------------------------------------------------------------------------ the replay
def _run_facts(snap: Snapshot) -> dict:
    """The snapshot's replay settings: semantics, retention, expiry on or off, Kafka version (a run written before
    the summary named the version replayed with 3.9's rules, the default then)."""
    run = snap.run or {}
    try:
        summary = json.loads(run.get("summary") or "{}")
    except (TypeError, ValueError):
        summary = {}
    return {"semantics": run.get("semantics") or summary.get("semantics") or DEFAULT_SEMANTICS,
            "retention_minutes": int(run.get("retention_minutes") or summary.get("retention_minutes")
                                     or DEFAULT_RETENTION_MINUTES),
            "expiry": bool(summary.get("expiry", True)),
            "kafka_version": str(summary.get("kafka_version") or DEFAULT_KAFKA_VERSION)}


_COMMIT_COLUMNS = ["offsets_partition", "record_offset", "group_id", "topic", "partition", "committed_offset",
                   "commit_timestamp", "is_tombstone", "producer_id", "txn_outcome", "leader_epoch", "metadata",
                   "record_timestamp", "expire_timestamp", "topic_id", "producer_epoch", "is_transactional",
                   "batch_first_offset", "txn_marker_offset", "txn_marker_timestamp", "batch_timestamp"]


#: the `group_history` columns a plan reads (`batch_timestamp`: none in a history written before it)
_EVENT_COLUMNS = ["group_id", "record_json", "event", "record_timestamp", "batch_timestamp"]


def _ms(column) -> pa.ChunkedArray:
    """A timestamp column as epoch ms (int64), nulls kept."""
    return pc.cast(pc.cast(column, pa.timestamp("ms", tz="UTC")), pa.int64())


def _history(reader: SnapshotReader, snap: Snapshot, groups: list[str] | None) -> tuple[pa.Table, pa.Table]:
    """(offset_commits rows, group_history rows) of the snapshot, for `groups` (None: all)."""
    flt = None if groups is None else [("group_id", "in", groups)]
    commits = _history_at(reader, snap, flt)
    if commits is None:
        raise HistoryUnavailable(f"snapshot {snap.snapshot_id!r} has no offset_commits history")
    missing = [c for c in _COMMIT_COLUMNS if c not in commits.column_names and c != "batch_timestamp"]
    if missing or (commits.num_rows and commits.column("batch_first_offset").null_count == commits.num_rows):
        raise HistoryUnavailable(
            f"snapshot {snap.snapshot_id!r}'s offset_commits history was written before restore plans "
            "(no transaction markers in it): rebuild it with this version, or make a what-if run up to the time to "
            "restore")
    history_flt = [("group_id", "in", groups)] if groups is not None else None
    events = group_events(reader, snap, filters=history_flt,
                          columns=_EVENT_COLUMNS)
    if groups is not None:  # the records naming topic ids are the whole run's (consumer groups' partition metadata)
        naming = group_events(
            reader, snap, columns=_EVENT_COLUMNS,
            filters=[("event", "in", ["partition_metadata", "partition_metadata_tombstone"]),
                     ("group_id", "not in", groups)])
        if naming is not None and events is not None:
            events = pa.concat_tables([events, naming.cast(events.schema)])
    if events is None:
        events = pa.table({"group_id": pa.array([], pa.string()), "record_json": pa.array([], pa.string())})
    if "record_json" not in events.column_names or (events.num_rows and
                                                    events.column("record_json").null_count == events.num_rows):
        raise HistoryUnavailable(
            f"snapshot {snap.snapshot_id!r}'s group_history was written before restore plans (no group records "
            "in it): rebuild it with this version, or make a what-if run up to the time to restore")
    return commits, events


# read as the files store them (a log-sized history repeats each id many times): the cut and the reduction only
# compare them, and the wide rows built for the kept records decode them
_DICTIONARY = ("group_id", "topic", "txn_outcome", "metadata", "topic_id")


def _history_at(reader: SnapshotReader, snap: Snapshot, filters, columns=_COMMIT_COLUMNS) -> pa.Table | None:
    """The `offset_commits` rows the plan reads, as the snapshot's run left them (`history.snapshot_commits`)."""
    return snapshot_commits(reader, snap, filters=filters, columns=columns, dictionary=_DICTIONARY)


def decoded_log(commits: pa.Table, events: pa.Table, options) -> pa.Table:
    """The history rows back as the decoded records the loaders read (`schemas/decoded.py`): the offset commits,
    one end-transaction marker per marker that decided a transaction, and the group records; only those the
    loaders read at `options`' cut (`ReplayOptions`): the history is log-sized and the decoded schema wide, so the
    cut (`shard.until_cut`) and the engine's reduction (`reduction.state_only_rows`) run first on the few
    columns they read, and the wide rows are built for the records they keep. A record is cut by when a reader
    first saw it, as the engine recorded it (`history.held_at`): its batch may hold other groups' later records."""
    markers = _markers(commits)
    held = None
    if options.until_time_ms is not None:
        upto = EPOCH + timedelta(milliseconds=options.until_time_ms)
        held = held_at(commits, upto)
        if "record_timestamp" in events.column_names:  # the cut before the JSON is parsed
            events = events.filter(held_at(events, upto))
    records = events.column("record_json").drop_null()
    group_records = _read_records(records, DECODED_RECORD_SCHEMA) if len(records) else None
    commits, markers, group_records, order = _state_relevant(commits, markers, group_records, options, held)
    parts = [_decoded(_commit_columns(commits), commits.num_rows, DECODED_RECORD_SCHEMA),
             _decoded(_marker_columns(markers), markers.num_rows, DECODED_RECORD_SCHEMA)]
    if group_records is not None:
        parts.append(group_records)
    return pa.concat_tables(parts).take(order)


def _markers(commits: pa.Table) -> pa.Table:
    """One row per end-transaction marker that decided history rows: (offsets_partition, producer_id,
    txn_marker_offset, txn_marker_timestamp_max, txn_outcome_max)."""
    decided = commits.select(["offsets_partition", "producer_id", "txn_marker_offset", "txn_marker_timestamp",
                              "txn_outcome"]).filter(pc.is_valid(commits.column("txn_marker_offset")))
    decided = decided.set_column(4, "txn_outcome", decided.column("txn_outcome").cast(pa.string()))
    return decided.group_by(["offsets_partition", "producer_id", "txn_marker_offset"]).aggregate(
        [("txn_marker_timestamp", "max"), ("txn_outcome", "max")])


def _commit_keys(c: pa.Table) -> dict:
    """The decoded columns of history commits the cut and the reduction read (all but `record_kind`)."""
    return {
        "offsets_partition": c.column("offsets_partition"), "offset": c.column("record_offset"),
        "batch_first_offset": c.column("batch_first_offset"), "timestamp": _ms(c.column("record_timestamp")),
        "producer_id": c.column("producer_id"), "is_transactional": c.column("is_transactional"),
        "is_tombstone": c.column("is_tombstone"), "group_id": c.column("group_id"), "topic": c.column("topic"),
        "partition": c.column("partition"),
    }


def _commit_columns(c: pa.Table) -> dict:
    n = c.num_rows
    return {
        **_commit_keys(c), "producer_epoch": c.column("producer_epoch"), "is_control": _const(False, pa.bool_(), n),
        "record_kind": _const("offset_commit", pa.string(), n), "key_type": _const(1, pa.int16(), n),
        "committed_offset": c.column("committed_offset"), "leader_epoch": pc.fill_null(c.column("leader_epoch"), -1),
        "metadata": c.column("metadata"), "commit_timestamp": _ms(c.column("commit_timestamp")),
        "expire_timestamp": _ms(c.column("expire_timestamp")), "topic_id": c.column("topic_id"),
    }


def _marker_columns(m: pa.Table) -> dict:
    k = m.num_rows
    outcome = m.column("txn_outcome_max")
    return {
        "offsets_partition": m.column("offsets_partition"), "offset": m.column("txn_marker_offset"),
        "batch_first_offset": m.column("txn_marker_offset"), "timestamp": _ms(m.column("txn_marker_timestamp_max")),
        "producer_id": m.column("producer_id"), "is_transactional": _const(True, pa.bool_(), k),
        "is_control": _const(True, pa.bool_(), k), "record_kind": _const("control", pa.string(), k),
        # the old loader ends a transaction at any control batch, COMMIT installing it: only the outcome matters
        "control_type": pc.if_else(pc.equal(outcome, "committed"), "COMMIT", "ABORT"),
    }


def _const(value, dtype, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, dtype), n)


_NARROW = ("offsets_partition", "offset", "batch_first_offset", "timestamp", "record_kind", "control_type",
           "producer_id", "is_transactional", "is_tombstone", "group_id", "topic", "partition")


def _state_relevant(commits: pa.Table, markers: pa.Table, group_records: pa.Table | None, options,
                    held: pa.ChunkedArray | None = None):
    """(commits, markers, group records) cut to the rows the loaders read at `options`' cut, and the order that
    puts the three, concatenated, in log order: `shard.until_cut` and `reduction.state_only_rows` over a narrow
    table of all three, in log order, each row tagged with its source and row number. `held`: which commits a
    reader had seen by the cut (`history.held_at`)."""
    # imported here, not at module level: numpy ~0.1-0.3 s of import (python -X importtime)
    import numpy as np

    # these import numpy too, which the quick commands that load this module run without (`jobs.cli.run`)
    from pipelines.coordinator.decoded import until_cut_mask
    from pipelines.coordinator.reduction import state_only_rows
    from pipelines.serving.codes import string_codes

    # record kinds as a dictionary (the reduction compares them to text): filters and takes move one byte a row
    kinds = pa.array(["offset_commit", "control"] + ([] if group_records is None else sorted(
        set(pc.unique(group_records.column("record_kind").drop_null()).to_pylist()) - {"offset_commit", "control"})),
        pa.string())
    c = commits
    narrow_commits = {**_commit_keys(c), "record_kind": _kinds(kinds, pa.repeat(pa.scalar(0, pa.int8()), c.num_rows))}
    narrow_markers = {**_marker_columns(markers),
                      "record_kind": _kinds(kinds, pa.repeat(pa.scalar(1, pa.int8()), markers.num_rows))}
    sources = [(narrow_commits, c.num_rows), (narrow_markers, markers.num_rows)]
    if group_records is not None:
        columns = {n: group_records.column(n) for n in _NARROW}
        columns["record_kind"] = _kinds(kinds, pc.index_in(columns["record_kind"], kinds).cast(pa.int8()))
        sources.append((columns, group_records.num_rows))
    narrow = []
    for src, (columns, n) in enumerate(sources):
        t = pa.table({name: columns[name] if name in columns else pa.nulls(n, _NARROW_TYPES[name])
                      for name in _NARROW}).cast(_NARROW_SCHEMA)
        narrow.append(t.append_column("__src", _const(src, pa.int8(), n))
                      .append_column("__row", pa.array(np.arange(n, dtype=np.int64))))
    table = pa.concat_tables(narrow)
    for name in ("group_id", "topic"):  # the reduction only compares them: codes sort and group faster than text
        codes, _ = string_codes(table.column(name))
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(codes, mask=codes == -1))
    # the cut and the log order as one take: each copy of a log-sized table costs more than the kernels on it
    keep = until_cut_mask(table, options)
    if keep is not None and held is not None:  # the commits a reader had not seen by the cut: their batch is later
        held = pa.chunked_array([*held.chunks, pa.repeat(pa.scalar(True), table.num_rows - c.num_rows)], pa.bool_())
        keep = pc.and_(keep, held)
    part, offset = table.column("offsets_partition").to_numpy(), table.column("offset").to_numpy()
    if keep is None:
        order = _log_order(part, offset)
    else:
        cut = np.flatnonzero(keep.to_numpy(zero_copy_only=False))
        order = cut[_log_order(part[cut], offset[cut])]
    table = table.take(order)
    kept = state_only_rows(table, options.is_modern).select(["__src", "__row"])
    src = kept.column("__src").to_numpy()
    row = kept.column("__row").to_numpy()
    # a filter keeps each source's order and works chunk by chunk; the kept rows' place in the three filtered and
    # concatenated is their source's base plus their rank there
    order = np.empty(len(row), dtype=np.int64)
    base = 0
    picked = []
    for i, t in enumerate((commits, markers, group_records)):
        if t is None:
            continue
        mine = np.flatnonzero(src == i)
        mask = np.zeros(t.num_rows, dtype=bool)
        mask[row[mine]] = True
        picked.append(t.filter(pa.array(mask)))
        order[mine] = base + np.searchsorted(np.flatnonzero(mask), row[mine])
        base += len(mine)
    return (picked[0], picked[1], picked[2] if group_records is not None else None,
            pa.array(order))


def _kinds(kinds: pa.Array, indices) -> pa.ChunkedArray:
    indices = indices if isinstance(indices, pa.ChunkedArray) else pa.chunked_array([indices], pa.int8())
    return pa.chunked_array([pa.DictionaryArray.from_arrays(ch, kinds) for ch in indices.chunks],
                            pa.dictionary(pa.int8(), pa.string()))


def _log_order(part, offset):
    """The indices that sort rows by (offsets partition, offset), ties in row order (a stable sort). The rows come
    as a few runs already in log order (each history file holds one partition's records in log order), so runs
    are moved whole and only runs that overlap are sorted; a plain sort when there are many runs."""
    # imported here, not at module level: numpy ~0.1-0.3 s of import (python -X importtime)
    import numpy as np

    n = len(part)
    if not (n and part.min() >= 0 and part.max() < 1 << 15 and offset.min() >= 0 and offset.max() < 1 << 48):
        return np.lexsort((offset, part))
    position = part.astype(np.int64) << 48
    position |= offset
    starts = np.flatnonzero(position[1:] < position[:-1]) + 1
    if len(starts) > 10_000:
        return np.argsort(position, kind="stable")
    starts = np.concatenate(([0], starts))
    ends = np.append(starts[1:], n)
    first, last = position[starts], position[ends - 1]
    pieces = []
    by = np.argsort(first, kind="stable").tolist()
    i = 0
    while i < len(by):  # a cluster: runs whose ranges touch, sorted together
        j, top = i + 1, last[by[i]]
        while j < len(by) and first[by[j]] <= top:
            top = max(top, last[by[j]])
            j += 1
        if j == i + 1:
            pieces.append(np.arange(starts[by[i]], ends[by[i]]))
        else:
            rows = np.concatenate([np.arange(starts[r], ends[r]) for r in sorted(by[i:j])])
            pieces.append(rows[np.argsort(position[rows], kind="stable")])
        i = j
    return np.concatenate(pieces)


def _read_records(records, schema: pa.Schema) -> pa.Table:
    """`record_json` values as decoded rows, parsed by Arrow's JSON reader (one line each: JSON text never holds a
    raw line break; the lines are the values' own bytes, each with a newline appended)."""
    # imported here, not at module level: numpy ~0.1-0.3 s of import (python -X importtime)
    import numpy as np

    lines = pc.binary_join_element_wise(records, "", "\n")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    width = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    offsets = np.frombuffer(lines.buffers()[1], dtype=width)[lines.offset:lines.offset + len(lines) + 1]
    text = lines.buffers()[2][int(offsets[0]):int(offsets[-1])]
    table = pa_json.read_json(pa.BufferReader(text), parse_options=pa_json.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="ignore"))
    return pa.table([table.column(f.name).cast(f.type) if f.name in table.column_names else
                     pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)


def _narrow_schema() -> pa.Schema:
    return pa.schema([pa.field(n, pa.dictionary(pa.int8(), pa.string())) if n == "record_kind" else
                      pa.field(n, pa.dictionary(pa.int32(), pa.string())) if n in ("group_id", "topic") else
                      DECODED_RECORD_SCHEMA.field(n) for n in _NARROW])


_NARROW_SCHEMA = _narrow_schema()
_NARROW_TYPES = {f.name: f.type for f in _NARROW_SCHEMA}


def _decoded(columns: dict, n: int, schema: pa.Schema) -> pa.Table:
    return pa.table([columns[f.name].cast(f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema],
                    schema=schema)


def offsets_at(reader: SnapshotReader, snap: Snapshot, as_of_ms: int, groups: list[str] | None = None
               ) -> dict[str, list[tuple[str, int, int]]]:
    """Group id -> its committed offsets at `as_of_ms` (what OffsetFetch answered then: `loaded_offsets` and
    `empty_group_offsets` of a `rebuild --until-time` at that time), for `groups` (None: every group)."""
    # imported here, not at module level: numpy ~0.1-0.3 s of import (python -X importtime)
    from pipelines.coordinator.expiry import ExpiryOptions
    from pipelines.coordinator.shard import load_shards, tabulate_shards
    # numpy, which the quick commands that load this module run without (`jobs.cli.run`)
    from pipelines.coordinator.streamed import STATE_ONLY
    from pipelines.coordinator.tables import topic_names

    facts = _run_facts(snap)
    commits, events = _history(reader, snap, groups)
    options = ReplayOptions(semantics=facts["semantics"], until_time_ms=as_of_ms, snapshot_id=snap.snapshot_id,
                            load_time_ms=as_of_ms, kafka_version=facts["kafka_version"])
    log = decoded_log(commits, events, options)
    expiry = ExpiryOptions(as_of_ms=as_of_ms, retention_minutes=facts["retention_minutes"],
                           semantics=facts["semantics"], kafka_version=facts["kafka_version"]) \
        if facts["expiry"] else None
    with gc_paused():  # the loaders' objects hold no cycles; dropped before the collector is back
        loaded = load_shards(log, options, mode=STATE_ONLY)
        del log
        tables = tabulate_shards(loaded.states, options, expiry, topic_names(loaded.naming.to_pylist()))
        del loaded
        wanted = None if groups is None else set(groups)
        out: dict[str, list[tuple[str, int, int]]] = {}
        for name in ("loaded_offsets", "empty_group_offsets"):
            t = tables[name].select(["group_id", "topic", "partition", "committed_offset"])
            for gid, topic, part, off in zip(*(t.column(i).to_pylist() for i in range(4))):
                if wanted is None or gid in wanted:
                    out.setdefault(gid, []).append((topic, part, off))
        return {g: sorted(v) for g, v in out.items()}


# ------------------------------------------------------------------------------------------------ the plan
def _selected(reader: SnapshotReader, snap: Snapshot, groups, group_regex, changed_since_ms,
              damaged: tuple[int, int | None] | None = None) -> tuple[list | None, str]:
    """The group ids asked for (None: every group with offsets at TIME) and the selection in words."""
    if groups:
        return sorted(set(groups)), "--group " + " ".join(groups)
    if damaged is not None:
        # imported here, not at module level: numpy ~0.1-0.3 s of import (python -X importtime)
        from pipelines.serving.changes import damaged_groups

        since, until = damaged
        last = snap.history_end
        end = until if until is not None else max(since, datetime_to_ms(last) if last else since)
        ids = damaged_groups(reader, snap, _datetime(since), _datetime(end))
        return ids, f"damaged from {_iso(since)} to {_iso(end)} (offsets rewound, deleted or expired; groups deleted)"
    if group_regex is None and changed_since_ms is None:
        return None, "every group with committed offsets at TIME"
    ids: set[str] = set()
    # a commit changed its group when it was written and when it took effect: a transactional one at its COMMIT
    # marker (`applied_timestamp`, as the engine recorded it), which may come after T when the record came before
    commits = _history_at(reader, snap, None, ["group_id", "record_timestamp", "batch_timestamp",
                                               "applied_timestamp", "txn_marker_timestamp", "txn_outcome"])
    end = snap.history_end
    if commits is not None and end is not None:
        # the history is every run's: the version a what-if snapshot pinned holds a later run's records past its
        # end, which it never read, and a marker past it took effect in no state of this snapshot (as
        # `/groups/{id}/commits` reads it)
        commits = outcome_as_of(commits.filter(held_at(commits, end)), end)
    events = reader.snapshot_table("group_history", snap, columns=["group_id", "record_timestamp"])
    for t, times in ((commits, ("record_timestamp", "applied_timestamp")), (events, ("record_timestamp",))):
        if t is None or not t.num_rows:
            continue
        if changed_since_ms is not None:
            since = [pc.fill_null(pc.greater_equal(_ms(t.column(ts)), changed_since_ms), False) for ts in times
                     if ts in t.column_names]
            t = t.filter(since[0] if len(since) == 1 else pc.or_(*since))
        ids.update(g for g in pc.unique(t.column("group_id")).to_pylist() if g is not None)
    if group_regex is not None:
        ids = set(matching(ids, group_regex))
    what = []
    if group_regex is not None:
        what.append(f"--group-regex {group_regex}")
    if changed_since_ms is not None:
        what.append(f"--changed-since {_iso(changed_since_ms)}")
    return sorted(ids), " ".join(what)


def _served_facts(reader: SnapshotReader, snap: Snapshot, ids: list[str]) -> tuple[dict, dict, dict, dict, dict]:
    """(live groups: id -> (state, members), gone: id -> why, log end offsets, log start offsets, the log starts'
    first record times in ms) of the served snapshot."""
    flt = [("group_id", "in", ids)]
    live: dict[str, tuple[str, int]] = {}
    t = reader.snapshot_table("loaded_groups", snap, filters=flt, columns=["group_id", "state", "member_count"])
    for r in (t.to_pylist() if t is not None else ()):
        live[r["group_id"]] = (r["state"], r["member_count"] or 0)
    gone: dict[str, str] = {}
    t = reader.snapshot_table("removed_groups", snap, filters=flt, columns=["group_id", "tombstone_timestamp"])
    for r in (t.to_pylist() if t is not None else ()):
        at = r["tombstone_timestamp"]
        gone[r["group_id"]] = "deleted" + (f" at {_iso(datetime_to_ms(at))}" if at else "")
    t = reader.snapshot_table("expired_groups", snap, filters=flt, columns=["group_id", "reason"])
    for r in (t.to_pylist() if t is not None else ()):
        gone[r["group_id"]] = f"expired ({r['reason']})"
    ends: dict[tuple[str, int], int] = {}
    starts: dict[tuple[str, int], int] = {}
    start_times: dict[tuple[str, int], int] = {}
    t = reader.snapshot_table("log_end_offsets", snap, columns=["topic", "partition", "log_end_offset",
                                                                "log_start_offset", "log_start_timestamp"])
    for r in (t.to_pylist() if t is not None else ()):
        key = (r["topic"], r["partition"])
        ends[key] = max(r["log_end_offset"], ends.get(key, r["log_end_offset"]))
        if r.get("log_start_offset") is not None:  # a snapshot written before the column existed has none
            starts[key] = r["log_start_offset"]
            if r.get("log_start_timestamp") is not None:
                start_times[key] = int(r["log_start_timestamp"].timestamp() * 1000)
    return live, gone, ends, starts, start_times


def _served_offsets(reader: SnapshotReader, snap: Snapshot, ids: list[str]) -> dict[str, dict]:
    """Group id -> (topic, partition) -> its committed offset in the served snapshot."""
    out: dict[str, dict] = {}
    for name in ("loaded_offsets", "empty_group_offsets"):
        t = reader.snapshot_table(name, snap, filters=[("group_id", "in", ids)],
                                  columns=["group_id", "topic", "partition", "committed_offset"])
        if t is not None:
            for gid, topic, part, off in zip(*(t.column(i).to_pylist() for i in range(4))):
                out.setdefault(gid, {})[(topic, part)] = off
    return out


def restore_plan(reader: SnapshotReader, snap: Snapshot, as_of_ms: int, *, groups: list[str] | None = None,
                 group_regex: str | None = None, changed_since_ms: int | None = None,
                 damaged: tuple[int, int | None] | None = None, clamp: bool = False) -> RestorePlan:
    """The plan that puts every selected group back to its committed offsets at `as_of_ms` (see the module);
    `damaged` (since, until): the groups `changes` reports damaged then; `clamp`: each target clamped into [log
    start, log end] where the snapshot knows them (kafka-consumer-groups.sh moves a target below the log start to
    the log start, and one past the end to the end, as it finds them when it runs: 4.0 ConsumerGroupCommand
    .checkOffsetsRange, 2.8 alike; clamped, the files say what it will write).
    Raises HistoryUnavailable; BadGroupRegex for a bad `group_regex`; AfterSnapshot for a time past the snapshot's
    as-of; BeforeHistory for an --as-of before its history, where no group had an offset."""
    check_within(snap, "as_of", as_of_ms, "and the offsets committed since are not in it (a plan from there would put "
                 "groups back to where they were then)")
    for option, since in (("changed_since", changed_since_ms), ("damaged_since", damaged and damaged[0])):
        if since is not None:
            check_within(snap, option, since, "so no group is known to have changed since")
    if group_regex is not None:
        check_group_regex(group_regex)
    check_groups_known(reader, snap, groups or ())
    ids, selection = _selected(reader, snap, groups, group_regex, changed_since_ms, damaged)
    if group_regex is not None and not ids and (why := no_group_matches(reader, snap, group_regex)):
        raise GroupNotFound(why)  # a mistyped regex, as a mistyped --group: not an empty plan
    at = offsets_at(reader, snap, as_of_ms, ids)
    if not any(at.values()):
        check_not_before(reader, snap, "as_of", as_of_ms, "so no offset is known to restore (an empty plan would "
                         "say there is none)")
    ids = sorted(at) if ids is None else ids
    live, gone, ends, starts, start_times = _served_facts(reader, snap, ids)
    current = _served_offsets(reader, snap, ids)
    plans = []
    for gid in ids:
        p = GroupPlan(gid, None, [], current=current.get(gid, {}))
        then = {(topic, part) for topic, part, _ in at.get(gid, ())}
        p.not_reset = sorted((t, part, off) for (t, part), off in p.current.items() if (t, part) not in then)
        for topic, part, off in at.get(gid, ()):
            if not legal_topic(topic):
                p.skipped.append(f"{topic!r}-{part}: not a legal Kafka topic name")
            elif off is None or off < 0:
                p.skipped.append(f"{topic}-{part}: committed offset {off} cannot be reset to")
            else:
                target = off
                if (topic, part) in starts and off < starts[(topic, part)]:
                    p.below_log_start.append((topic, part, off, starts[(topic, part)]))
                    target = starts[(topic, part)]
                if (topic, part) in ends and off > ends[(topic, part)]:
                    p.above_log_end.append((topic, part, off, ends[(topic, part)]))
                    target = ends[(topic, part)]
                if clamp and target != off:
                    p.clamped.append((topic, part, off, target))
                p.offsets.append((topic, part, target if clamp else off))
        if gid in live:
            p.state_now, p.members_now = live[gid]
        else:
            p.gone_reason = gone.get(gid, "not in the snapshot")
        plans.append(p)
    stems = file_stems(p.group_id for p in plans if p.offsets)
    for p in plans:
        if p.offsets:
            p.file = stems[p.group_id] + ".csv"
    facts = _run_facts(snap)
    return RestorePlan(snap.snapshot_id, facts["semantics"], as_of_ms, plans, selection, bool(starts), clamp,
                       start_times)


# integer arithmetic: past year 2106 a float of seconds loses the millisecond (.999 read as .998)
def _datetime(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def _iso(ms: int) -> str:
    return _datetime(ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def plan_files(plan: RestorePlan) -> dict[str, str]:
    """File name -> text of every file of the plan."""
    files: dict[str, str] = {}
    index: dict[str, str] = {}
    for g in plan.groups:
        if g.file is None:
            continue
        files[g.file] = "".join(f"{t},{p},{o}\n" for t, p, o in g.offsets)
        index[g.file] = g.group_id
    files["index.json"] = json.dumps(index, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    files["apply.sh"] = _apply_sh(plan)
    files["README.txt"] = _readme(plan)
    return files


def _apply_sh(plan: RestorePlan) -> str:
    """The script that applies the plan: per group, its `--dry-run`, then (`--execute`) its `--execute`. A group
    that fails (the tool exits non-zero, or prints an `Error:` line: kafka-consumer-groups.sh exits 0 when it
    refuses a group with active members, `ConsumerGroupCommand.resetOffsets`, or its command failed) does not stop
    the others; each group it applied is recorded in applied.txt (its file name), so a rerun applies only the rest;
    a dry run records nothing. It ends with what it applied, what failed and what it skipped, and exits 1 when a
    group failed."""
    lines = [
        "#!/bin/sh",
        f"# offsetlake restore-plan: groups of snapshot {plan.snapshot_id} back to their committed offsets at "
        f"{_iso(plan.as_of_ms)}.",
        "# Usage: BOOTSTRAP=host:9092 sh apply.sh [--dry-run|--execute]   (default --dry-run: nothing changes)",
        "# --execute runs each group's --dry-run, then its --execute, and records the group's file in applied.txt;",
        "# a group that fails does not stop the others, and a rerun skips the groups applied.txt lists. Read",
        "# README.txt first.",
        "set -u",
        ': "${BOOTSTRAP:?set BOOTSTRAP to the bootstrap servers of the cluster}"',
        'KAFKA_CONSUMER_GROUPS="${KAFKA_CONSUMER_GROUPS:-' + _TOOL + '}"',
        # one argument at most, and not an empty one: `apply.sh --execute GROUP` would reset every group of the
        # plan, and `apply.sh "$UNSET"` would run a dry run the caller did not ask for
        'if [ $# -eq 0 ]; then MODE=--dry-run; elif [ $# -eq 1 ]; then MODE="$1"; else MODE=; fi',
        'case "$MODE" in --dry-run|--execute) ;; *) echo "usage: apply.sh [--dry-run|--execute] (one of them, and'
        ' nothing else: it applies every group of this plan, make a plan of fewer with restore-plan --group; given:'
        ' $*)" >&2; exit 2;; esac',
        # CDPATH unset: with it, `cd plan` may go to another directory of that name, and prints where it went
        'HERE="$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)"',
        'APPLIED="$HERE/applied.txt"',
        "ok=0; failed=0; skipped=0; failures=''",
        "",
        'KCG_OUT="$(mktemp)" || exit 1',
        'trap \'rm -f "$KCG_OUT" "$KCG_OUT.rc"\' EXIT',
        "# kcg ARG...: kafka-consumer-groups.sh, its output shown as it comes; it failed when it exits non-zero or",
        "# prints an Error: line, as it does with exit 0 for a group it refuses (members still active) or a command",
        "# that failed",
        "kcg() {",
        '  { "$KAFKA_CONSUMER_GROUPS" "$@"; echo $? > "$KCG_OUT.rc"; } | tee "$KCG_OUT"',
        '  [ "$(cat "$KCG_OUT.rc")" = 0 ] && ! grep -q \'^Error:\' "$KCG_OUT"',
        "}",
        "",
        "# reset FILE GROUP: one group's reset; FILE names it in applied.txt",
        "reset() {",
        '  if [ "$MODE" = --execute ] && [ -f "$APPLIED" ] && grep -qxF -- "$1" "$APPLIED"; then',
        '    echo "skipped $1: applied before (applied.txt)"; skipped=$((skipped + 1)); return 0',
        "  fi",
        '  if kcg --bootstrap-server "$BOOTSTRAP" --group "$2" --reset-offsets --from-file "$HERE/$1" --dry-run \\',
        '     && { [ "$MODE" = --dry-run ] || kcg --bootstrap-server "$BOOTSTRAP" --group "$2" --reset-offsets \\',
        '            --from-file "$HERE/$1" --execute; }; then',
        '    ok=$((ok + 1))',
        '    if [ "$MODE" = --execute ]; then echo "$1" >> "$APPLIED"; fi',
        "  else",
        '    echo "FAILED $1 (see the error above); the other groups go on" >&2',
        '    failed=$((failed + 1)); failures="$failures $1"',
        "  fi",
        "}",
        "",
    ]
    for g in plan.groups:
        if g.file is None:
            continue
        note = " (refused while it has members: see README.txt)" if g.refused else ""
        lines.append(f"# {json.dumps(g.group_id, ensure_ascii=False)}: {counted(len(g.offsets), 'partition')}{note}")
        if g.unpassable:
            lines.append("#   not run: its id holds a NUL character, which no command line carries (see README.txt)")
            continue
        lines.append(f"reset {shlex.quote(g.file)} {shlex.quote(g.group_id)}")
    lines += [
        "",
        'if [ "$MODE" = --execute ]; then done_as=applied; else done_as="dry-run ok"; fi',
        'echo "summary: $ok $done_as, $failed failed, $skipped skipped (applied before)"',
        'if [ "$failed" -gt 0 ]; then',
        '  echo "failed:$failures" >&2',
        '  echo "fix the cause, then run apply.sh --execute again: it applies only the groups not in applied.txt" >&2',
        "  exit 1",
        "fi",
    ]
    return "\n".join(lines) + "\n"


def _readme(plan: RestorePlan) -> str:
    with_file = [g for g in plan.groups if g.file]
    out = [
        f"Restore plan: committed offsets at {_iso(plan.as_of_ms)}",
        f"snapshot {plan.snapshot_id} ({plan.semantics} semantics), groups: {plan.selection}",
        f"{counted(len(with_file), 'group')}, {counted(sum(len(g.offsets) for g in with_file), 'partition')}; "
        "index.json maps each file to its group id.",
        "",
        "Apply: review this file, then  BOOTSTRAP=host:9092 sh apply.sh --dry-run  and, when the dry run shows",
        "what you expect,  sh apply.sh --execute . kafka-consumer-groups resets only groups without active members:",
        "stop their consumers first.",
        "",
    ]

    def section(title: str, items: list[str]) -> None:
        out.append(f"{title}: {len(items) or 'none'}")
        out.extend(f"  {i}" for i in items)
        out.append("")

    def name(g: GroupPlan) -> str:
        return json.dumps(g.group_id, ensure_ascii=False) + (f" ({g.file})" if g.file else "")

    section("REFUSED by the reset while they have active members (in the served snapshot)",
            [f"{name(g)}: {g.state_now}, {counted(g.members_now, 'member')}" for g in plan.groups
             if g.refused and g.file])
    section("GONE: groups that no longer exist in the served snapshot (the reset creates their offsets again)",
            [f"{name(g)}: {g.gone_reason}" for g in plan.groups if g.state_now is None and g.file])
    below = [f"{name(g)} {t}-{p}: target {o} < log start {s}: the reset skips {s - o:,} records"
             + _skipped_time(plan, (t, p)) for g in plan.groups for t, p, o, s in g.below_log_start]
    if plan.log_start_known:
        section("BELOW LOG START: targets the broker no longer holds (the reset moves each to the log start it finds "
                "then, and the consumer resumes at the first record still held"
                + ("; clamped to the log start below" if plan.clamp else "") + ")", below)
    else:
        out += ["BELOW LOG START: not checked: the snapshot knows no data-topic log start offsets (its input held no",
                "  data-topic segments or log-start-offset-checkpoint); check with",
                "  kafka-get-offsets.sh --bootstrap-server $BOOTSTRAP --time -2 before --execute", ""]
    section("ABOVE LOG END: targets past the log end offset the snapshot knows (the reset clamps them"
            + ("; clamped to the log end below" if plan.clamp else "") + ")",
            [f"{name(g)} {t}-{p}: target {o} > log end {e}" for g in plan.groups for t, p, o, e in g.above_log_end])
    if plan.clamp:
        section("CLAMPED (--clamp): targets written as the nearest offset the log holds, in [log start, log end]",
                [f"{name(g)} {t}-{p}: {o} -> {w}" for g in plan.groups for t, p, o, w in g.clamped])
    section("NOTHING TO RESTORE: selected groups with no committed offset at that time (no file)",
            [name(g) for g in plan.groups if not g.file])
    section("LEFT OUT of the files", [f"{name(g)} {s}" for g in plan.groups for s in g.skipped])
    section("NOT RESET: partitions committed in the served snapshot that held no offset at that time (the reset leaves "
            "them as they are; with the group inactive, kafka-consumer-groups.sh --delete-offsets --group G --topic "
            "T:P removes one, and the consumer then starts per auto.offset.reset)",
            [f"{name(g)} {t}-{p}: {o}" for g in plan.groups for t, p, o in g.not_reset])
    unpassable = [name(g) for g in with_file if g.unpassable]
    if unpassable:
        section("NOT IN apply.sh: ids holding a NUL character, which no command line carries (the shell drops it and "
                "kafka-consumer-groups.sh would reset another group): reset each through the Admin API "
                "(alterConsumerGroupOffsets) with its file", unpassable)
    out.append("TARGETS: per partition, the offset committed in the served snapshot -> the target (difference)")
    for g in with_file:
        out.append(f"  {name(g)}")
        for t, p, o in g.offsets:
            now = g.current.get((t, p))
            moved = "new" if now is None else "unchanged" if now == o else f"{o - now:+,}"
            out.append(f"    {t}-{p}: {'-' if now is None else now} -> {o} ({moved})")
    out.append("")
    return "\n".join(out)


def _skipped_time(plan: RestorePlan, tp: tuple[str, int]) -> str:
    """How much time of data a reset below the log start skips: from the plan's time to the first record the log
    still holds (what the consumer would be handed), when the snapshot knows that record's time."""
    at = plan.log_start_times.get(tp)
    if at is None:
        return ""
    skipped = max(0, at - plan.as_of_ms) / 1000
    return f", {skipped:,.0f} s of data (the first record still held was written at {_iso(at)})"


class OutNotEmpty(ValueError):
    """The directory a plan goes into holds files already: another plan's files would be applied with it."""


class OutNotAPlan(OutNotEmpty):
    """The directory holds files no restore plan writes: forcing would delete them, so it is refused."""


# what `write_restore_plan` and apply.sh leave in a plan's directory: all that `force` may delete
_PLAN_FILES = re.compile(r"(index\.json|apply\.sh|README\.txt|applied\.txt|[^/]+\.csv)")


def write_restore_plan(plan: RestorePlan, out_dir, force: bool = False) -> Path:
    """The plan's files in `out_dir` (created), which must be empty: an earlier plan's group files left there would
    be applied with this one's. `force`: empties it first, when it holds an earlier plan's files alone (a typo'd
    --out naming the warehouse, a table or a home directory was emptied whole). Returns the directory."""
    out = Path(out_dir)
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise OutNotEmpty(f"{out} is not empty (an earlier plan's files would be applied with this one): "
                              "choose an empty directory, or force it to be emptied first")
        other = sorted(e.name for e in out.iterdir() if e.is_dir() or not _PLAN_FILES.fullmatch(e.name))
        if other:
            raise OutNotAPlan(f"{out} holds what no restore plan writes ({', '.join(repr(n) for n in other[:3])}"
                              f"{', …' if len(other) > 3 else ''}): it is emptied only when it holds an earlier plan")
        for entry in out.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    for name, text in plan_files(plan).items():
        (out / name).write_text(text, encoding="utf-8")
    (out / "apply.sh").chmod(0o755)
    return out


def restore_plan_zip(plan: RestorePlan) -> bytes:
    """The plan's files as one zip (`restore-plan/<file>`), apply.sh executable."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in plan_files(plan).items():
            info = zipfile.ZipInfo(f"restore-plan/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if name == "apply.sh" else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, text.encode("utf-8"))
    return buf.getvalue()
