"""What a run read, saved for the next `--incremental` run: how far each segment file was framed, its first bytes'
and last entry's hashes (from the reader's own count, `frames.decode.segment_scan`), the partition's next offset,
and each loaded shard (`coordinator.saved`), written a file per offsets partition by the driver or by the tasks that
loaded the shards (`io.checkpoint.StateStage`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pipelines.coordinator.options import (ReplayOptions, limited_value_versions, unknown_group_fields,
                                          unknown_group_key_types)
from pipelines.coordinator.saved import FORMAT as SAVED_FORMAT
from pipelines.coordinator.saved import entries_of
from pipelines.io.checkpoint import (STATE_DIR, SavedState, remove_orphaned_state, remove_other_states,
                                     stash_checkpoint, write_checkpoint, write_state)

if TYPE_CHECKING:  # the field's type only
    from pipelines.io.warehouse import Warehouse

CHECKPOINT_FORMAT = 2
OLDER_FORMATS = (1,)  # 1: the state was decoded rows to replay again


# ================================================================================================================
# saving the checkpoint of a run
# ================================================================================================================
@dataclass
class PendingCheckpoint:
    """A run's state, written, and its checkpoint, not yet: `publish` writes the JSON that makes the state usable
    (the id's other states then go), `discard` deletes the state unless published. A rerun of a served id publishes
    only once its `runs` row is committed: until then the served run's checkpoint and state are the base of the next
    `--incremental` run, and a rerun that fails (or is killed) between the two leaves them as they were."""

    warehouse: Warehouse | str | os.PathLike  # what `io.checkpoint` takes: a Warehouse, a path or a URI
    snapshot_id: str
    checkpoint: dict
    saved: SavedState

    def publish(self) -> dict:
        write_checkpoint(self.warehouse, self.snapshot_id, self.checkpoint)
        self.saved.kept = True
        remove_other_states(self.warehouse, self.snapshot_id, keep=self.saved.stage.name)
        return self.checkpoint

    def discard(self) -> None:
        self.saved.discard()

    def stash(self) -> None:
        """The checkpoint kept beside its state until `publish`: a rerun killed after its `runs` row committed
        would otherwise leave its state unnamed, and the next --incremental run a full one (`plan.start` publishes
        it then)."""
        stash_checkpoint(self.saved.stage, self.checkpoint)

    def committed(self) -> None:
        """Its run's `runs` row is committed: the state is the served run's, named by the stashed checkpoint, and
        stays even if `publish` does not happen (`discard` keeps it)."""
        self.saved.kept = True


def prepare_checkpoint(warehouse, snapshot_id: str, saved, plan, inc, *, conf, req, scans: dict[str, dict],
                       started_ms: int | None = None, max_timestamp: int | None, max_partition: int,
                       log_gaps: dict | None = None, load_failures: int | None = None) -> PendingCheckpoint:
    """This run's state written, and its checkpoint (JSON) composed, to `publish`.

    ``saved``: the shards to keep (offsets partition -> `coordinator.saved.SavedShard` bytes, written here) or a
    `SavedState` the tasks wrote. ``plan`` is the run's
    whole input plan (not only what was decoded); ``scans`` (path -> `segment_scan`) says how far the reader's count
    framed every file this run decoded; ``load_failures``, how many group records of the log the snapshot holds its
    coordinator's load fails on (`IncrementalStart.earlier_load_failures`); ``started_ms``, the run's start as its
    `runs` row will say it, ties the checkpoint to that row (`plan.start`). The JSON, written last and atomically
    (`PendingCheckpoint.publish`), names the state's directory and files: it is what makes the state usable."""
    if not isinstance(saved, SavedState):
        saved = write_state(warehouse, snapshot_id, saved, sum(entries_of(b) for b in saved.values()))

    # Files decoded from a resume point were framed from there only; files with nothing new keep their previous
    # entry (the input was checked to extend it).
    prev_files: dict[str, dict] = {}
    if inc.is_incremental:
        for part, cp in inc.previous["partitions"].items():
            for s in cp["segments"]:
                prev_files[f"{part}/{s['name']}"] = s
    partitions: dict[str, dict] = {}
    for item in plan.items:
        if item["kind"] != "segment":
            continue
        r = scans.get(item["path"])
        if r is None:
            old = prev_files.get(f"{item['offsets_partition']}/{Path(item['path']).name}")
            if old is None or item["path"] not in inc.resume_at:
                continue  # unreadable now: not in the checkpoint, so the next run cannot resume it
            r = {**old, "size": item["size"]}
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
        p = partitions.setdefault(part, {"segments": [], "next_offset": None,
                                         "log_start": plan.log_start.get(int(item["offsets_partition"]))})
        p["segments"].append(seg)
        if seg["last_offset"] is not None:
            p["next_offset"] = max(p["next_offset"] or 0, int(seg["last_offset"]) + 1)
    # files read before but with nothing new are carried over above: every partition of the previous checkpoint
    # is in this one.
    for p in partitions.values():
        p["segments"].sort(key=lambda s: s["base_offset"])
        for seg in p["segments"][:-1]:
            # Kafka never appends to a rolled segment: what this run could not frame in one (a torn entry) stays
            # unframeable, reported once by the run that read it, so the next run does not read it again
            seg["consumed"] = seg["size"]
    checkpoint = dict(
        format=CHECKPOINT_FORMAT, snapshot_id=snapshot_id, started_ms=started_ms, mode=inc.mode,
        previous_snapshot=inc.previous_snapshot,
        semantics=conf.semantics, num_partitions_setting=conf.num_partitions, read_policy=read_policy_of(conf),
        until_offset=req.until_offset, until_time=req.until_time, tabular=bool(plan.num_tabular),
        max_timestamp=max_timestamp, max_partition=max_partition, group_history=True,
        log_gaps={str(p): g for p, g in (log_gaps or {}).items()}, load_failures=load_failures,
        decoded_state=f"{STATE_DIR}/{snapshot_id}/{saved.stage.name}", decoded_files=sorted(saved.files),
        decoded_sizes=saved.sizes, decoded_sha256=saved.digests, state_entries=saved.entries, state_format=SAVED_FORMAT,
        partitions=partitions,
    )
    return PendingCheckpoint(warehouse, snapshot_id, checkpoint, saved)


def read_policy_of(conf) -> dict:
    """What of the run's settings decides which records are replayed (`decoding.policy.ReadPolicy`, and the share /
    streams key types and the value versions the emulated coordinator skips: `--kafka-version`): a resumed shard
    holds what its runs replayed under theirs."""
    policy = {"replay_corrupt_batches": bool(conf.read_policy.replay_corrupt_batches),
              "max_batch_bytes": int(conf.read_policy.max_batch_bytes),
              "unknown_key_types": sorted(unknown_group_key_types(conf.semantics, conf.kafka_version))}
    unknown_fields = unknown_group_fields(conf.semantics, conf.kafka_version)
    if unknown_fields:  # named only where there are some: the policies of runs before they were are the same
        policy["unknown_fields"] = sorted(unknown_fields)
    value_versions = limited_value_versions(conf.semantics, conf.kafka_version)
    if value_versions:  # likewise: key type -> the highest value version read
        policy["value_versions"] = {str(t): v for t, v in value_versions}
    if not ReplayOptions(semantics=conf.semantics, kafka_version=conf.kafka_version).unique_static_members:
        # likewise: before 3.0 `GroupMetadata.add` took a static member's instance id listed twice (2.8's `add` has
        # no `staticMembers` check, 3.0's throws: core/.../GroupMetadata.scala), so such a value loads, not fails
        policy["repeated_instance_ids"] = "loaded"
    return policy


def clean_state(warehouse, emit: Callable[[str], None] | None = None) -> list[str]:
    """Remove `_state/<id>` and `_checkpoints/<id>.json` of snapshots that no longer exist (after `retain`), and of
    runs that did not succeed: no --incremental run resumes them (`plan.start` takes the latest succeeded one), and a
    state is sized by the coordinator's."""
    removed = remove_orphaned_state(warehouse, (r["snapshot_id"] for r in warehouse.snapshots()
                                                if r["status"] == "succeeded"))
    if removed and emit:
        emit(f"          removed the incremental state of {len(removed)} deleted snapshot(s)")
    return removed
