"""The plan of one run: full or incremental (and why), what to decode, and the numbers a full run would compute."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from pipelines.frames.decode import DecodePlan
from pipelines.incremental.checkpoint import CHECKPOINT_FORMAT, OLDER_FORMATS, SAVED_FORMAT, read_policy_of
from pipelines.incremental.saved import SavedShards
from pipelines.io import storage
from pipelines.io.checkpoint import (UnsealedCheckpoint, read_checkpoint, remove_other_states, state_dir,
                                     state_file_partitions, stashed_checkpoints, write_checkpoint)
from pipelines.times import MAX_TIME_MS, MIN_TIME_MS

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
    decode_plan: DecodePlan
    previous_snapshot: str | None = None
    previous: dict | None = None  # the previous checkpoint (incremental only)
    previous_state: str | None = None  # its saved shards' directory
    previous_files: list[str] | None = None  # the files of it the checkpoint names
    state_entries: int = 0  # the saved shards' size in state entries (`coordinator.saved.SavedShard.entries`)
    new_bytes: int = 0
    resume_at: dict = field(default_factory=dict)  # path -> start position, files read before

    @property
    def is_incremental(self) -> bool:
        return self.mode == "incremental"

    def summary(self, new_records: int) -> dict:
        """`runs.summary.incremental`, once the run has decoded its `new_records`."""
        return {"mode": self.mode, "reason": self.reason, "previous_snapshot": self.previous_snapshot,
                "new_bytes": self.new_bytes, "new_records": new_records}

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

    def log_gaps(self, new: dict[int, dict]) -> dict[int, dict]:
        """Per offsets partition whose log lacks offsets (`frames.tally.Tally.log_gaps`), over the previous runs'
        records too: where this run's decoding starts past the offset the previous run's reading stopped at, the
        offsets between are missing."""
        old = {int(p): g for p, g in ((self.previous or {}).get("log_gaps") or {}).items()} \
            if self.is_incremental else {}
        resumed = self.next_offsets() or {}
        out = dict(old)
        for p, g in new.items():
            end, until = g.get("compacted_below"), g.get("compacted_until")
            first = g.get("first_offset")
            if end is None and p in resumed and first is not None and first > resumed[p]:
                end = first
            elif end is not None and p in resumed and end <= resumed[p]:
                # a gap ending where the previous runs' reading stopped starts at rows read again (a torn tail's
                # error row, reported by each run): the offsets between were read by those runs, nothing is missing
                end = None
            if end is not None:
                out[p] = {"first_offset": old.get(p, g).get("first_offset"), "compacted_below": end,
                          "compacted_until": until}
        return out

    @property
    def earlier_load_failures(self) -> bool:
        """Whether the earlier runs' records may hold a group record the coordinator's load fails on: their
        checkpoint counts them (`checkpoint.prepare_checkpoint`), one written before it did says nothing of them."""
        if not self.is_incremental:
            return False
        counted = self.previous.get("load_failures")
        return counted is None or counted > 0

    def saved_shards(self):
        """The previous run's saved shards (`saved.SavedShards`), None for a full run."""
        if not self.is_incremental:
            return None
        files = tuple(self.previous_files or ())
        partitions = {int(p) for p in self.previous["partitions"]} | state_file_partitions(files)
        sizes = tuple(sorted((self.previous.get("decoded_sizes") or {}).items()))
        return SavedShards(self.previous_state, files, tuple(sorted(partitions)), sizes,
                           self.previous.get("semantics") == "modern",
                           tuple(sorted((self.previous.get("decoded_sha256") or {}).items())))

    def next_offsets(self) -> dict[int, int] | None:
        """Offsets partition → the offset the previous run's reading stopped at (its checkpoint): every record
        below it is in the previous snapshot already. None for a full run."""
        if not self.is_incremental:
            return None
        return {int(p): (cp.get("next_offset") or 0) for p, cp in self.previous["partitions"].items()}

    def previous_group_history(self, warehouse) -> pa.Table | None:
        """The previous snapshot's `group_history` an incremental run carries forward; None for a full run."""
        if not self.is_incremental:
            return None
        return warehouse.read_table("group_history", snapshot_id=self.previous_snapshot)

    def with_previous_history(self, previous: pa.Table | None, history: pa.Table, snapshot_id: str) -> pa.Table:
        """The run's `group_history`: the previous snapshot's events (`previous_group_history`), then this run's (of
        its new records: a resumed shard's group events are of the records loaded onto it). Not sorted: the table
        is read by its columns (`offsets_partition`, `record_offset`), never by its row order (the shards' route
        writes it in the order its tasks end), and sorting a long history's JSON columns cost an incremental run
        a tenth of its time."""
        if previous is None:
            return history
        previous = previous.set_column(previous.schema.get_field_index("snapshot_id"), "snapshot_id",
                                       pa.repeat(pa.scalar(snapshot_id, pa.string()), previous.num_rows))
        return pa.concat_tables([previous.cast(history.schema), history])

    def with_previous_history_on_spark(self, spark, warehouse, history, snapshot_id: str):
        """`with_previous_history` of the shards' `group_history` (`io.blobs.BlobRows`, `frames.segment_shards`):
        the previous snapshot's events read by Spark, not into this process."""
        if not self.is_incremental:
            return history
        # imported here, not at module level: pyspark ~0.7 s of import (python -X importtime)
        from pyspark.sql import functions as F

        history = history.frame()
        previous = warehouse.spark_read(spark, "group_history", self.previous_snapshot)
        return previous.withColumn("snapshot_id", F.lit(snapshot_id)).select(*history.columns).unionByName(history)


def _full(reason: str, plan, previous_snapshot: str | None = None) -> IncrementalStart:
    return IncrementalStart(mode="full", reason=reason, decode_plan=plan, previous_snapshot=previous_snapshot,
                            new_bytes=plan.total_bytes)


def is_what_if(req) -> bool:
    """A point-in-time or as-of run: recorded as `what-if`, neither extending nor breaking the incremental chain."""
    return req.as_of is not None or req.until_offset is not None or req.until_time is not None


def start(warehouse, req, conf, plan, snapshot_id: str) -> IncrementalStart:
    """Decide full vs incremental for this run and build the plan of what to decode (see the module docstring)."""
    if not req.incremental:
        return _full("--incremental not given", plan)
    if is_what_if(req):
        return _full("--as-of/--until-offset/--until-time given: a what-if run replays the whole log and stays "
                     "out of the incremental chain", plan)
    if plan.num_tabular:
        return _full("tabular input: incremental runs need segment files (byte positions to resume at)", plan)
    prev_id = warehouse.latest_snapshot_id()  # the latest succeeded scheduled snapshot: what-if runs are skipped
    try:
        prev = read_checkpoint(warehouse, prev_id) if prev_id else None
    except UnsealedCheckpoint as e:  # its fields may have been edited: resuming from them could lose records
        return _full(f"the previous snapshot's checkpoint is not sealed ({e})", plan, prev_id)
    except ValueError as e:  # not JSON, not UTF-8: a damaged file is one full rebuild, not a failed run
        return _full(f"the previous snapshot's checkpoint is damaged ({e})", plan, prev_id)
    except OSError as e:  # a directory or unreadable file in its place (an object store's failure stays the run's)
        return _full(f"the previous snapshot's checkpoint cannot be read ({storage.error_text(e)})", plan, prev_id)
    if prev is not None and not isinstance(prev, dict):
        return _full("the previous snapshot's checkpoint is damaged (not a JSON object)", plan, prev_id)
    if prev_id and prev_id != snapshot_id:
        prev = _publish_stashed(warehouse, prev_id, prev) or prev
    if prev is None or prev.get("format") not in (CHECKPOINT_FORMAT, *OLDER_FORMATS):
        return _full(NO_PREVIOUS, plan, prev_id)
    if prev.get("format") in OLDER_FORMATS:
        return _full("the previous snapshot's state was saved by an older version (decoded rows, not loaded "
                     "shards)", plan, prev_id)
    damage = checkpoint_damage(prev) or _partition_damage(prev, plan)
    if damage:
        return _full(f"the previous snapshot's checkpoint is damaged ({damage})", plan, prev_id)
    if prev_id == snapshot_id:
        return _full(f"the previous snapshot is {snapshot_id} itself (a rerun replaces it)", plan, prev_id)
    if not _of_served_run(warehouse, prev_id, prev):
        return _full(f"the previous snapshot's checkpoint is not of the run that wrote {prev_id} (a later run of "
                     f"that id saved it and did not finish)", plan, prev_id)
    if prev.get("state_format") != SAVED_FORMAT:
        return _full(f"the previous snapshot's state was saved in another format ({prev.get('state_format')}; "
                     f"this version reads {SAVED_FORMAT})", plan, prev_id)
    if prev.get("tabular"):
        return _full("the previous snapshot was built from a tabular dump", plan, prev_id)
    # the directory the checkpoint names (its last component only: the state is always the id's own)
    state = state_dir(warehouse, prev_id) / Path(str(prev.get("decoded_state") or "decoded")).name
    if not state.is_dir():
        return _full(f"the previous snapshot's saved state is missing ({state})", plan, prev_id)
    missing, resized = _missing_files(state, prev.get("decoded_files"), prev.get("decoded_sizes"))
    if missing:
        return _full(f"the previous snapshot's saved state is missing {len(missing)} file(s) ({missing[0]})",
                     plan, prev_id)
    if resized:
        return _full(f"the previous snapshot's saved state has {len(resized)} file(s) of another size than it was "
                     f"written with ({resized[0]}: damaged or replaced)", plan, prev_id)
    if not prev.get("group_history"):
        return _full("the previous snapshot has no group_history (written by an older version)", plan, prev_id)
    if prev.get("until_offset") is not None or prev.get("until_time") is not None:
        return _full("the previous snapshot was cut with --until-offset/--until-time", plan, prev_id)
    if prev.get("semantics") != conf.semantics:
        return _full(f"semantics changed ({prev.get('semantics')} -> {conf.semantics})", plan, prev_id)
    if prev.get("read_policy") != read_policy_of(conf):
        return _full(f"the read policy changed ({_policy_text(prev.get('read_policy'))} -> "
                     f"{_policy_text(read_policy_of(conf))}): the saved shards hold what the earlier one replayed",
                     plan, prev_id)
    if prev.get("num_partitions_setting") != conf.num_partitions:
        return _full(f"num_partitions setting changed ({prev.get('num_partitions_setting')} -> "
                     f"{conf.num_partitions})", plan, prev_id)
    problem, resume = check_extends(prev, plan)
    if problem:
        return _full(problem, plan, prev_id)
    decode_plan, new_bytes = _new_bytes_plan(plan, resume)
    return IncrementalStart(mode="incremental", reason="the input extends the previous snapshot's checkpoint",
                            decode_plan=decode_plan, previous_snapshot=prev_id, previous=prev,
                            previous_state=str(state), previous_files=prev.get("decoded_files"),
                            state_entries=int(prev.get("state_entries") or 0),
                            new_bytes=new_bytes, resume_at=resume)


def _new_bytes_plan(plan, resume: dict[str, int]):
    """`plan` with each segment read from where the previous run stopped in it (`resume`: path -> byte position),
    the segments with nothing new left out; and the new bytes."""
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
    return replace(plan, items=items, total_bytes=new_bytes,
                   num_segments=sum(1 for i in items if i["kind"] == "segment")), new_bytes


_INT, _STR, _OPT_INT, _OPT_STR = (int,), (str,), (int, type(None)), (str, type(None))
_TOP = {"max_timestamp": _OPT_INT, "max_partition": _OPT_INT, "state_entries": _OPT_INT, "started_ms": _OPT_INT,
        "decoded_state": _OPT_STR, "decoded_files": (list, type(None)), "decoded_sizes": (dict, type(None)),
        "decoded_sha256": (dict, type(None)),
        "log_gaps": (dict, type(None)), "load_failures": _OPT_INT, "partitions": (dict,)}
_SEGMENT = {"name": _STR, "base_offset": _INT, "size": _INT, "consumed": _INT, "head_bytes": _INT,
            "head_sha256": _STR, "last_batch_position": _OPT_INT, "last_batch_size": _OPT_INT,
            "last_batch_sha256": _OPT_STR, "last_offset": _OPT_INT}
_GAP = {"first_offset": _OPT_INT, "compacted_below": _OPT_INT, "compacted_until": _OPT_INT}
_TIMES = frozenset({"max_timestamp", "started_ms", "compacted_until"})


def _in_range(key: str, v: int) -> bool:
    """An edited number the run would carry into a long, a time or a partition count (10**30 was an OverflowError
    where it became one, a traceback)."""
    if key in _TIMES:
        return MIN_TIME_MS <= v <= MAX_TIME_MS
    if key == "max_partition":
        return -1 <= v < 1 << 31
    return -(1 << 63) <= v < 1 << 63


def checkpoint_damage(cp: dict) -> str | None:
    """What in a checkpoint of this format is not as `checkpoint.prepare_checkpoint` writes it (a field missing or of
    another type: the file was edited or damaged), None when it is whole. The run reads every field it resumes
    from; a damaged one is a full rebuild, not a traceback."""
    def wrong(obj: dict, spec: dict, where: str) -> str | None:
        for key, types in spec.items():
            v = obj.get(key)
            if not isinstance(v, types) or isinstance(v, bool) or isinstance(v, int) and not _in_range(key, v):
                return f"{where}{key}: {json.dumps(v)[:40]}"
        return None

    why = wrong(cp, _TOP, "")
    if why:
        return why
    if not all(isinstance(f, str) for f in cp.get("decoded_files") or ()) or \
            not all(isinstance(n, int) for n in (cp.get("decoded_sizes") or {}).values()) or \
            not all(isinstance(d, str) for d in (cp.get("decoded_sha256") or {}).values()):
        return "decoded_files / decoded_sizes / decoded_sha256"
    if not all(isinstance(g, dict) and wrong(g, _GAP, "") is None for g in (cp.get("log_gaps") or {}).values()) \
            or not all(k.isdigit() for k in cp.get("log_gaps") or {}):
        return "log_gaps"
    for part, p in cp["partitions"].items():
        if not part.isdigit() or not isinstance(p, dict) or not isinstance(p.get("segments"), list):
            return f"partitions.{part}"
        why = wrong(p, {"next_offset": _OPT_INT, "log_start": _OPT_INT}, f"partitions.{part}.")
        if why:
            return why
        for s in p["segments"]:
            why = wrong(s, _SEGMENT, f"partitions.{part}.segments.") if isinstance(s, dict) else \
                f"partitions.{part}.segments"
            if why:
                return why
    return None


def _partition_damage(cp: dict, plan) -> str | None:
    """A `max_partition` the checkpoint's own partitions or today's input contradict, else None. A resumed run's
    rows are of the partition directories the input still holds (it extends the checkpoint: every file read is
    still there), so no row seen before is of a higher partition than today's; a higher one was edited in, and
    would size the partition count every group is checked against (`abs(hashCode) % count`)."""
    if cp.get("tabular"):  # a dump's rows name partitions of no directory: never resumed (`start` says so)
        return None
    recorded = cp.get("max_partition")
    named = max((int(p) for p in cp["partitions"]), default=-1)
    today = max([plan.max_partition, *(i["offsets_partition"] for i in plan.items
                                       if i["kind"] == "problem" and i["offsets_partition"] is not None)])
    if recorded is not None and not named <= recorded <= max(today, named):
        return (f"max_partition: {recorded}, where its partitions go up to {named} and the input's to {today}")
    return None


def _policy_text(policy) -> str:
    if not isinstance(policy, dict):
        return "not recorded"
    return (f"rebuild.replay_corrupt_batches {str(policy.get('replay_corrupt_batches')).lower()}, "
            f"decode.max_batch_bytes {policy.get('max_batch_bytes')}, "
            f"key types skipped {policy.get('unknown_key_types', 'not recorded')}"
            + (f", fields skipped {policy['unknown_fields']}" if policy.get("unknown_fields") else "")
            + (f", value versions read {policy['value_versions']}" if policy.get("value_versions") else "")
            + (f", repeated static instance ids {policy['repeated_instance_ids']}"
               if policy.get("repeated_instance_ids") else ""))


def _of_served_run(warehouse, snapshot_id: str, checkpoint: dict) -> bool:
    """Whether `checkpoint` was saved by the run whose `runs` row serves `snapshot_id`. A rerun of a served id saves
    its checkpoint before its commits; when it fails (or is killed) after that, the old row still serves the id, and
    resuming that rerun's shards would lose the records it read from the history tables the old snapshot holds."""
    started_ms = checkpoint.get("started_ms")
    if started_ms is None:  # saved before checkpoints named their run
        return True
    row = next((r for r in warehouse.snapshots() if r["snapshot_id"] == snapshot_id), None)
    started = None if row is None else row.get("started_at")
    return started is not None and round(started.timestamp() * 1000) == int(started_ms)


def _publish_stashed(warehouse, snapshot_id: str, checkpoint: dict | None) -> dict | None:
    """The checkpoint a rerun of `snapshot_id` stashed beside its state (`PendingCheckpoint.stash`), published, when
    that rerun's `runs` row serves the id and `checkpoint` (the published one) is not of it: the rerun was killed
    between committing its row and publishing. Publishing it now is what that rerun would have done (this run holds
    the writer lock); the id's other states go with it. None when there is none to publish; then the states of
    reruns killed before their `runs` row (their checkpoint not of the served run) go."""
    if isinstance(checkpoint, dict) and checkpoint_damage(checkpoint) is None \
            and _of_served_run(warehouse, snapshot_id, checkpoint):
        if checkpoint.get("started_ms") is not None and checkpoint.get("decoded_state"):
            remove_other_states(warehouse, snapshot_id, keep=Path(checkpoint["decoded_state"]).name)
        return None
    for name, cp in stashed_checkpoints(warehouse, snapshot_id):
        if isinstance(cp, dict) and cp.get("format") == CHECKPOINT_FORMAT and cp.get("snapshot_id") == snapshot_id \
                and checkpoint_damage(cp) is None and cp.get("started_ms") is not None \
                and _of_served_run(warehouse, snapshot_id, cp):
            write_checkpoint(warehouse, snapshot_id, cp)
            remove_other_states(warehouse, snapshot_id, keep=name)
            return cp
    return None


def _missing_files(state, files: list[str] | None, sizes: dict[str, int] | None) -> tuple[list[str], list[str]]:
    """The files the checkpoint names that its state directory lacks, and those of another size than the
    checkpoint says they were written with (none named: nothing to check)."""
    if not files:
        return [], []
    loc = storage.location(str(state))
    present = {loc.child_of(info).name: info.size for info in loc.listdir()}
    sizes = sizes or {}
    return ([f for f in files if f not in present],
            [f for f in files if f in present and f in sizes and present[f] != sizes[f]])


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
        # the loader reads from the larger of the first base offset and the checkpoint's start (`overlaps`): a start
        # moved into bytes read before leaves records in the saved shards that Kafka's loading now passes over
        then, now = (max(first_base, -1 if x is None else x) for x in (cp.get("log_start"), plan.log_start.get(part)))
        if then != now:
            return (f"{LOG_START_MOVED} (partition {part}: the log start Kafka's loader reads from is {now}, the "
                    f"previous run's was {then})"), {}
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
    loc = storage.location(path)

    def read() -> tuple[bytes, bytes | None]:
        with loc.fs.open_input_file(loc.path) as f:
            head = f.read(int(seg["head_bytes"]))
            if not seg.get("last_batch_sha256"):
                return head, None
            f.seek(int(seg["last_batch_position"]))
            return head, f.read(int(seg["last_batch_size"]))

    try:  # a store that kept failing past its retries fails the run (`io.retry`), as anywhere else
        head, last = storage.retried(loc, "read", read)
    except (OSError, storage.StorageError) as e:
        return f"cannot be read ({storage.error_text(e)})"
    if hashlib.sha256(head).hexdigest() != seg["head_sha256"]:
        return "changed (its first bytes differ: rewritten, compacted, or another cluster's log)"
    if last is not None and hashlib.sha256(last).hexdigest() != seg["last_batch_sha256"]:
        return "changed (its last read batch differs: rewritten or compacted)"
    return None


