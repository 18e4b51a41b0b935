"""What a run read, saved for the next `--incremental` run: how far each segment file was framed, its first bytes'
and last entry's hashes, the partition's next offset, and the rows the engine kept (`coordinator.retained`)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa

from pipelines.io.checkpoint import remove_orphaned_state, write_state_rows

CHECKPOINT_FORMAT = 1
HEAD_BYTES = 64 * 1024


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
def save_checkpoint(spark, warehouse, snapshot_id: str, replayed, plan, inc, *, conf, req,
                    max_timestamp: int | None, max_partition: int) -> dict:
    """Write this run's state (the replayed rows, Parquet) and checkpoint (JSON) — see the module docstring.

    ``plan`` is the run's whole input plan (not only what was decoded). The Parquet is written to a temporary
    directory and renamed into place; the JSON, written last and atomically, is what makes the state usable."""
    from dataclasses import replace

    from pipelines.frames.decode import collect_items
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
    scan_plan = replace(plan, items=scan_items, num_segments=len(scan_items), num_tabular=0,
                        total_bytes=sum(i["size"] - i["start_position"] for i in scan_items))
    scanned = {r["path"]: r for r in collect_items(spark, scan_plan, _scan_items, SCAN_DDL)}
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
        semantics=conf.semantics, num_partitions_setting=conf.num_partitions,
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
