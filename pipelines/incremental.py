"""`rebuild --incremental`: start from the latest succeeded scheduled snapshot's checkpoint, decode only the new bytes.

Exact by construction. Every run (incremental or not) saves, next to its snapshot:

* ``<warehouse>/_state/<snapshot_id>/decoded/`` — the decoded rows the next run needs (Parquet, Spark write): the
  state-equivalent subset of the rows the replay used (`coordinator.retained`: installed offsets, last plain writes and
  tombstones per key, open transactions, the markers of kept transactional rows, each group's last GroupMetadata
  record and its live KIP-848 incarnation, the records naming topic ids), never ``error`` (quarantined) or
  ``unknown`` (skipped) rows. Its size follows the coordinator's state, not the log. A state written by an older
  version holds every replayed row, which is a superset and resumes the same way. A what-if run (``--as-of``,
  ``--until-*``) saves none: it is always a full run, and the chain goes on from the latest scheduled snapshot
  as if it had not happened.
* ``<warehouse>/_checkpoints/<snapshot_id>.json`` (`io.checkpoint.write_checkpoint`, atomic) — what was read:
  semantics, the ``num_partitions`` setting, until bounds, the newest record timestamp and the highest offsets
  partition of ALL rows seen so far (error/unknown rows included, as a full run counts them), and per offsets
  partition every segment file read: name, base offset, size, bytes consumed (up to the end of the last entry
  that could be framed; what follows — a torn or zero tail — is read again next time), sha256 of its first
  ``min(64 KiB, consumed)`` bytes and of the last consumed entry's bytes, plus the partition's next offset.

An incremental run checks that today's input EXTENDS that checkpoint — every checkpointed file still there, same
head and last-entry bytes, at least ``consumed`` bytes long; no file before the checkpoint's log start and no new
file overlapping offsets already read; same semantics, same ``num_partitions`` setting, no until bounds now or
then, no tabular dump now or then — and otherwise falls back to a full rebuild with the reason. It then decodes
only the new bytes (a checkpointed file from its ``consumed`` position, a new file from 0: work items carry a
``start_position``, reported positions stay absolute) and replays ``new rows ∪ previous state``. The new rows are
exactly the full run's rows after the checkpoint because the framing walk is the decoder's
(`FileLogInputStream.nextBatch`: an entry is read or not, reading resumes at an entry boundary, nothing is read
twice or skipped), and replaying the previous state with any later rows gives what replaying all earlier rows
with them gives (the defining property of `coordinator.retained`, tested on generated logs cut at batch
boundaries). The replay is the engine's, as in a full run (in-process when the rows are at most
``rebuild.local_replay_max_rows``). The newest timestamp (default ``as_of``
and the load time) and the highest partition come from
the checkpoint's totals combined with the new rows, so rows not kept in the state still count. Expiry, validation
and the write then run as usual on the union: the snapshot tables are the full run's.

Accounting of an incremental run covers the NEW bytes only: ``records_in``/``records_out``/``records_quarantined``,
the record-type counts, the ``accounting`` check and the ``quarantine`` table describe the records decoded in this
run (quarantine of older bytes is in the snapshot that first read them); discovery problems of the current input
(e.g. an unreadable path, a `.swap` file) are not bytes of any segment and are reported by every run.
``offset_commits`` is built from the union, so the history merge sees what a full run sees.

Not detected (documented limit): a rewrite of an already-consumed file that keeps its first 64 KiB, its size at
least ``consumed`` and the bytes of its last consumed entry identical, while changing bytes in between.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa

from pipelines.io.checkpoint import (
    count_state_rows,
    read_state_rows,
    remove_orphaned_state,
    state_dir,
    write_state_rows,
)

CHECKPOINT_FORMAT = 1
HEAD_BYTES = 64 * 1024
LOG_START_MOVED = "log start moved / segments deleted or compacted"
NO_PREVIOUS = "no previous snapshot with a checkpoint"


# ================================================================================================================
# the plan of one run: full or incremental, and what to decode
# ================================================================================================================
@dataclass
class IncrementalStart:
    """How this run starts: ``mode`` ``incremental`` (decode ``decode_plan``, union the previous state) or
    ``full`` (decode everything), with the reason."""

    mode: str
    reason: str
    decode_plan: object  # frames.decode.DecodePlan
    previous_snapshot: str | None = None
    previous: dict | None = None  # the previous checkpoint (incremental only)
    previous_state: str | None = None  # its decoded-rows Parquet directory
    new_bytes: int = 0
    new_records: int = 0
    resume_at: dict = field(default_factory=dict)  # path -> start position, files read before

    @property
    def is_incremental(self) -> bool:
        return self.mode == "incremental"

    def summary(self) -> dict:
        return {"mode": self.mode, "reason": self.reason, "previous_snapshot": self.previous_snapshot,
                "new_bytes": self.new_bytes, "new_records": self.new_records}

    def progress_line(self) -> str:
        if self.is_incremental:
            return (f"incremental from snapshot {self.previous_snapshot}: {self.new_bytes:,} new bytes in "
                    f"{sum(1 for i in self.decode_plan.items if i['kind'] == 'segment')} segment(s)")
        prev = f" (previous snapshot {self.previous_snapshot})" if self.previous_snapshot else ""
        return f"full rebuild: {self.reason}{prev}"

    # -- the numbers a full run would compute over all rows -----------------------------------------------------
    def max_timestamp(self, new_max: int | None) -> int | None:
        old = self.previous.get("max_timestamp") if self.is_incremental else None
        vals = [v for v in (old, new_max) if v is not None]
        return max(vals) if vals else None

    def max_partition(self, new_max: int) -> int:
        old = self.previous.get("max_partition", -1) if self.is_incremental else -1
        return max(int(old if old is not None else -1), new_max)

    def replayable(self, spark, decoded):
        """The rows the replay reads: this run's decoded rows without error/unknown rows (`filter_replayable`
        drops them anyway), plus the previous state when incremental."""
        rows = _replayable_new_rows(decoded)
        if not self.is_incremental:
            return rows
        previous = spark.read.schema(decoded.schema).parquet(self.previous_state)
        return rows.unionByName(previous)


    # -- the in-process replay of a small run (coordinator.shard, without Spark) ---------------------------------
    def local_replay_rows(self, new_records: int, max_rows: int) -> int | None:
        """The rows to replay when this run replays in-process (at most `max_rows` rows: the new records, plus the
        previous state when incremental), else None (one Spark task per offsets partition)."""
        if max_rows <= 0 or new_records > max_rows:
            return None
        total = new_records + (count_state_rows(self.previous_state) if self.is_incremental else 0)
        return total if total <= max_rows else None

    def replayable_arrow(self, decoded) -> pa.Table:
        """`replayable` as one Arrow table on the driver: this run's decoded rows (through Spark's Arrow) and, when
        incremental, the previous state (read directly)."""
        from pipelines.coordinator.shard import REPLAY_COLUMNS, conform_decoded

        new = conform_decoded(_replayable_new_rows(decoded).select(*REPLAY_COLUMNS).toArrow())
        if not self.is_incremental:
            return new
        previous = conform_decoded(read_state_rows(self.previous_state))
        return pa.concat_tables([previous, new])


    def with_previous_history(self, warehouse, history: pa.Table, snapshot_id: str) -> pa.Table:
        """The run's `group_history`: the previous snapshot's events, then this run's events of the NEW records
        (the replay also passes over the saved rows, whose events the previous snapshot already holds: those at an
        offset below the partition's next offset in the checkpoint are dropped)."""
        if not self.is_incremental:
            return history
        next_offset = {int(p): (cp.get("next_offset") or 0) for p, cp in self.previous["partitions"].items()}
        keep = [o >= next_offset.get(p, 0) for p, o in zip(history.column("offsets_partition").to_pylist(),
                                                            history.column("record_offset").to_pylist())]
        new = history.filter(pa.array(keep, pa.bool_()))
        previous = warehouse.read_table("group_history", snapshot_id=self.previous_snapshot)
        previous = previous.set_column(previous.schema.get_field_index("snapshot_id"), "snapshot_id",
                                       pa.array([snapshot_id] * previous.num_rows, pa.string()))
        out = pa.concat_tables([previous.cast(new.schema), new])
        return out.sort_by([("offsets_partition", "ascending"), ("record_offset", "ascending")]) \
            if out.num_rows else out


def _replayable_new_rows(decoded):
    """This run's decoded rows without error/unknown rows (`filter_replayable` drops them anyway)."""
    from pyspark.sql import functions as F

    return decoded.filter(~F.col("record_kind").isin("error", "unknown"))


def _full(reason: str, plan, previous_snapshot: str | None = None) -> IncrementalStart:
    return IncrementalStart(mode="full", reason=reason, decode_plan=plan, previous_snapshot=previous_snapshot,
                            new_bytes=plan.total_bytes)


def is_what_if(req) -> bool:
    """A point-in-time or as-of run: recorded as `what-if`, neither extending nor breaking the incremental chain."""
    return req.as_of is not None or req.until_offset is not None or req.until_time is not None


def start(warehouse, req, conf: dict, plan, snapshot_id: str) -> IncrementalStart:
    """Decide full vs incremental for this run and build the plan of what to decode (see the module docstring)."""
    from pipelines.io.checkpoint import read_checkpoint

    if not req.incremental:
        return _full("--incremental not given", plan)
    if is_what_if(req):
        return _full("--as-of/--until-offset/--until-time given: a what-if run replays the whole log and stays "
                     "out of the incremental chain", plan)
    if plan.num_tabular:
        return _full("tabular input: incremental runs need segment files (byte positions to resume at)", plan)
    prev_id = warehouse.latest_snapshot_id()  # the latest succeeded scheduled snapshot: what-if runs are skipped
    prev = read_checkpoint(warehouse, prev_id) if prev_id else None
    if prev is None or prev.get("format") != CHECKPOINT_FORMAT:
        return _full(NO_PREVIOUS, plan, prev_id)
    if prev_id == snapshot_id:
        return _full(f"the previous snapshot is {snapshot_id} itself (a rerun replaces it)", plan, prev_id)
    state = state_dir(warehouse, prev_id) / "decoded"
    if not state.is_dir():
        return _full(f"the previous snapshot's decoded state is missing ({state})", plan, prev_id)
    if prev.get("tabular"):
        return _full("the previous snapshot was built from a tabular dump", plan, prev_id)
    if not prev.get("group_history"):
        return _full("the previous snapshot has no group_history (written by an older version)", plan, prev_id)
    if prev.get("until_offset") is not None or prev.get("until_time") is not None:
        return _full("the previous snapshot was cut with --until-offset/--until-time", plan, prev_id)
    if prev.get("semantics") != conf["semantics"]:
        return _full(f"semantics changed ({prev.get('semantics')} -> {conf['semantics']})", plan, prev_id)
    if prev.get("num_partitions_setting") != conf["num_partitions"]:
        return _full(f"num_partitions setting changed ({prev.get('num_partitions_setting')} -> "
                     f"{conf['num_partitions']})", plan, prev_id)
    problem, resume = check_extends(prev, plan)
    if problem:
        return _full(problem, plan, prev_id)

    items, new_bytes = [], 0
    for item in plan.items:
        if item["kind"] != "segment":
            items.append(item)  # discovery problems: a fact of today's input, reported by every run
            continue
        at = resume.get(item["path"], 0)
        if at >= item["size"]:
            continue  # nothing new in this file
        items.append({**item, "start_position": at})
        new_bytes += item["size"] - at
    decode_plan = replace(plan, items=items, total_bytes=new_bytes,
                          num_segments=sum(1 for i in items if i["kind"] == "segment"))
    return IncrementalStart(mode="incremental", reason="the input extends the previous snapshot's checkpoint",
                            decode_plan=decode_plan, previous_snapshot=prev_id, previous=prev,
                            previous_state=str(state), new_bytes=new_bytes, resume_at=resume)


def check_extends(prev: dict, plan) -> tuple[str | None, dict[str, int]]:
    """Does the planned input extend the checkpoint ``prev``? Returns (why not | None, path -> resume position).

    Reads at most 64 KiB plus one entry of every checkpointed file (on the driver, which listed them)."""
    by_part: dict[int, dict[str, dict]] = {}
    for item in plan.items:
        if item["kind"] != "segment":
            continue
        files = by_part.setdefault(int(item["offsets_partition"]), {})
        name = Path(item["path"]).name
        if name in files:
            return f"segment {name} of partition {item['offsets_partition']} appears twice in the input", {}
        files[name] = item
    resume: dict[str, int] = {}
    for part_key, cp in sorted(prev.get("partitions", {}).items(), key=lambda kv: int(kv[0])):
        part = int(part_key)
        files = by_part.get(part)
        segs = sorted(cp["segments"], key=lambda s: s["base_offset"])
        if not segs:
            continue
        if not files:
            return f"{LOG_START_MOVED} (partition {part}: no segment in the input; partition set changed)", {}
        first_base = segs[0]["base_offset"]
        for s in segs:
            cur = files.get(s["name"])
            if cur is None:
                return f"{LOG_START_MOVED} (partition {part}: {s['name']} is gone)", {}
            why = _file_differs(cur["path"], cur["size"], s)
            if why:
                return f"{LOG_START_MOVED} (partition {part}: {s['name']} {why})", {}
            resume[cur["path"]] = int(s["consumed"])
        seen = {s["name"] for s in segs}
        next_offset = cp.get("next_offset")
        for name, cur in files.items():
            if name in seen:
                continue
            if cur["base_offset"] < first_base:
                return (f"{LOG_START_MOVED} (partition {part}: {name} starts before the checkpoint's log start "
                        f"{first_base})"), {}
            if next_offset is not None and cur["base_offset"] < next_offset:
                return (f"{LOG_START_MOVED} (partition {part}: new segment {name} overlaps offsets already read, "
                        f"next offset {next_offset})"), {}
            if cur["base_offset"] < segs[-1]["base_offset"]:
                return f"{LOG_START_MOVED} (partition {part}: new segment {name} between read segments)", {}
    return None, resume


def _file_differs(path: str, size: int, seg: dict) -> str | None:
    consumed = int(seg["consumed"])
    if size < consumed:
        return f"shrank ({size} bytes, {consumed} read before)"
    try:
        with open(path, "rb") as f:
            head = f.read(int(seg["head_bytes"]))
            if hashlib.sha256(head).hexdigest() != seg["head_sha256"]:
                return "changed (its first bytes differ: rewritten, compacted, or another cluster's log)"
            if seg.get("last_batch_sha256"):
                f.seek(int(seg["last_batch_position"]))
                last = f.read(int(seg["last_batch_size"]))
                if hashlib.sha256(last).hexdigest() != seg["last_batch_sha256"]:
                    return "changed (its last read batch differs: rewritten or compacted)"
    except OSError as e:
        return f"cannot be read ({e})"
    return None


# ================================================================================================================
# the framing walk that says how far each file was read (executor side)
# ================================================================================================================
SCAN_SCHEMA = pa.schema([
    ("path", pa.string()), ("offsets_partition", pa.int32()), ("size", pa.int64()), ("consumed", pa.int64()),
    ("head_bytes", pa.int64()), ("head_sha256", pa.string()), ("last_batch_position", pa.int64()),
    ("last_batch_size", pa.int64()), ("last_batch_sha256", pa.string()), ("last_offset", pa.int64()),
])


SCAN_DDL = ("path string, offsets_partition int, size long, consumed long, head_bytes long, head_sha256 string, "
            "last_batch_position long, last_batch_size long, last_batch_sha256 string, last_offset long")


def scan_segment(path: str, start_position: int = 0) -> dict:
    """How far `read_batches_from_file(path, start_position=…)` reads: the end of the last entry it can frame
    (reading stops at a tail shorter than a head, a size below the minimum, or an entry running past the end;
    an entry with a bad CRC or magic is still read past), that entry's position, size, sha256 and last offset
    (v2: base offset + lastOffsetDelta; magic 0/1: the entry's offset), and the sha256 of the first
    ``min(64 KiB, consumed)`` bytes. The last_* fields are None when no entry was framed after ``start_position``.
    """
    from pipelines.decoding.batches import HEADER_SIZE_UP_TO_MAGIC, LEGACY_RECORD_OVERHEAD_V0, LOG_OVERHEAD

    out = dict(path=path, size=0, consumed=start_position, head_bytes=0, head_sha256=None, last_batch_position=None,
               last_batch_size=None, last_batch_sha256=None, last_offset=None)
    with open(path, "rb") as f:
        end = os.fstat(f.fileno()).st_size
        out["size"] = end
        pos = start_position
        last = None
        while end - pos > HEADER_SIZE_UP_TO_MAGIC:
            f.seek(pos)
            head = f.read(HEADER_SIZE_UP_TO_MAGIC + 10)
            if len(head) < HEADER_SIZE_UP_TO_MAGIC:
                break
            offset = int.from_bytes(head[0:8], "big", signed=True)
            size = int.from_bytes(head[8:12], "big", signed=True)
            total = LOG_OVERHEAD + size
            if size < LEGACY_RECORD_OVERHEAD_V0 or pos + total > end:
                break
            last_offset = offset
            if head[16] == 2 and len(head) >= 27:
                last_offset = offset + int.from_bytes(head[23:27], "big", signed=True)
            last = (pos, total, last_offset)
            pos += total
        out["consumed"] = pos
        if last is not None:
            f.seek(last[0])
            out.update(last_batch_position=last[0], last_batch_size=last[1], last_offset=last[2],
                       last_batch_sha256=hashlib.sha256(f.read(last[1])).hexdigest())
        n = min(HEAD_BYTES, pos)
        f.seek(0)
        out.update(head_bytes=n, head_sha256=hashlib.sha256(f.read(n)).hexdigest())
    return out


def _scan_items(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        rows = []
        for item in batch.to_pylist():
            if item["kind"] != "segment":
                continue
            try:
                r = scan_segment(item["path"], item.get("start_position") or 0)
            except OSError:
                continue  # unreadable now: not in the checkpoint, so the next run cannot resume it
            r["offsets_partition"] = item["offsets_partition"]
            rows.append(r)
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=SCAN_SCHEMA)


# ================================================================================================================
# saving the checkpoint of a run
# ================================================================================================================
def save_checkpoint(spark, warehouse, snapshot_id: str, replayed, plan, inc: IncrementalStart, *, conf: dict, req,
                    max_timestamp: int | None, max_partition: int) -> dict:
    """Write this run's state (the replayed rows, Parquet) and checkpoint (JSON) — see the module docstring.

    ``plan`` is the run's whole input plan (not only what was decoded). The Parquet is written to a temporary
    directory and renamed into place; the JSON, written last and atomically, is what makes the state usable."""
    from pipelines.frames.decode import DecodePlan, _work_frame
    from pipelines.io.checkpoint import write_checkpoint

    final = write_state_rows(warehouse, snapshot_id, replayed)

    # How far every segment file has been read: files decoded from a resume point are walked from there only;
    # files with nothing new keep their previous entry.
    prev_files: dict[str, dict] = {}
    if inc.is_incremental:
        for part, cp in inc.previous["partitions"].items():
            for s in cp["segments"]:
                prev_files[f"{part}/{s['name']}"] = s
    scan_items = []
    for item in plan.items:
        if item["kind"] == "segment":
            scan_items.append({**item, "start_position": inc.resume_at.get(item["path"], 0)})
    scanned: dict[str, dict] = {}
    work = _work_frame(spark, DecodePlan(scan_items, 0, len(scan_items), 0, [], plan.max_partition)) \
        if scan_items else None
    if work is not None:
        for r in work.mapInArrow(_scan_items, SCAN_DDL).collect():
            scanned[r["path"]] = r.asDict()
    partitions: dict[str, dict] = {}
    for item in scan_items:
        r = scanned.get(item["path"])
        if r is None:
            continue
        part = str(item["offsets_partition"])
        name = Path(item["path"]).name
        old = prev_files.get(f"{part}/{name}")
        seg = dict(name=name, base_offset=int(item["base_offset"]), size=int(r["size"]), consumed=int(r["consumed"]),
                   head_bytes=int(r["head_bytes"]), head_sha256=r["head_sha256"],
                   last_batch_position=r["last_batch_position"], last_batch_size=r["last_batch_size"],
                   last_batch_sha256=r["last_batch_sha256"], last_offset=r["last_offset"])
        if seg["last_batch_sha256"] is None and old is not None:  # nothing new framed: keep what was read before
            for k in ("last_batch_position", "last_batch_size", "last_batch_sha256", "last_offset"):
                seg[k] = old.get(k)
        p = partitions.setdefault(part, {"segments": [], "next_offset": None})
        p["segments"].append(seg)
        if seg["last_offset"] is not None:
            p["next_offset"] = max(p["next_offset"] or 0, int(seg["last_offset"]) + 1)
    # files read before but skipped now (nothing new) are in scan_items too; partitions in the previous
    # checkpoint are therefore all carried over.
    for p in partitions.values():
        p["segments"].sort(key=lambda s: s["base_offset"])
    checkpoint = dict(
        format=CHECKPOINT_FORMAT, snapshot_id=snapshot_id, mode=inc.mode, previous_snapshot=inc.previous_snapshot,
        semantics=conf["semantics"], num_partitions_setting=conf["num_partitions"],
        until_offset=req.until_offset, until_time=req.until_time, tabular=bool(plan.num_tabular),
        max_timestamp=max_timestamp, max_partition=max_partition, group_history=True,
        decoded_state=str(final.relative_to(Path(getattr(warehouse, "path", warehouse)))),
        partitions=partitions,
    )
    write_checkpoint(warehouse, snapshot_id, checkpoint)
    return checkpoint


def clean_state(warehouse, emit: Callable[[str], None] | None = None) -> list[str]:
    """Remove `_state/<id>` and `_checkpoints/<id>.json` of snapshots that no longer exist (after `retain`)."""
    removed = remove_orphaned_state(warehouse, (r["snapshot_id"] for r in warehouse.snapshots()))
    if removed and emit:
        emit(f"          removed the incremental state of {len(removed)} deleted snapshot(s)")
    return removed
