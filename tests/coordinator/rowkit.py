"""Tiny builder of decoded rows (DECODED_RECORD_SCHEMA) for state tests: a log written call by call.

Each call appends one batch (or a record to the open batch inside `with log.batch(...)`), assigning offsets the
way a broker does; `gap(n)` skips offsets like compaction. Producer fields follow the writers of spec §1.6.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from schemas.decoded import DECODED_COLUMNS, DECODED_RECORD_SCHEMA

Row = dict[str, Any]
BASE_TS = 1_700_000_000_000


def member(member_id: str, *, topics=("t",), assigned=(("t", (0,)),), session=10_000, rebalance=300_000,
           instance_id=None, client_id="client", client_host="/127.0.0.1", rack=None) -> Row:
    """A GroupMetadataValue member with the consumer-protocol view filled in."""
    return {
        "member_id": member_id, "group_instance_id": instance_id, "client_id": client_id,
        "client_host": client_host, "rebalance_timeout_ms": rebalance, "session_timeout_ms": session,
        "subscription": b"", "assignment": b"", "subscription_version": 0,
        "subscribed_topics": None if topics is None else list(topics), "owned_partitions": None,
        "subscription_generation_id": None, "subscription_rack_id": rack,
        "assigned_partitions": [{"topic": t, "partitions": list(ps)} for t, ps in assigned],
        "assignment_version": 0,
    }


def tps(*pairs) -> list[Row]:
    """[(topic_id, [partitions])] -> TOPIC_ID_PARTITIONS."""
    return [{"topic_id": t, "partitions": list(ps)} for t, ps in pairs]


class Log:
    """Rows of one offsets partition in log order."""

    def __init__(self, partition: int = 0, start: int = 0, ts: int = BASE_TS, source: str = "test") -> None:
        self.partition, self.next_offset, self.ts, self.source = partition, start, ts, source
        self.rows: list[Row] = []
        self._batch: dict | None = None

    # -- batches ---------------------------------------------------------------------------------------------
    @contextmanager
    def batch(self, *, pid: int = -1, epoch: int = -1, txn: bool = False, one_time: bool = False):
        """Records appended inside share one batch (appendedBatchOffset = its first record); `one_time`: and one
        timestamp, as the new coordinator stamps a write's records (`CoordinatorRuntime.append`, 4.0)."""
        self._batch = {"pid": pid, "epoch": epoch, "txn": txn, "rows": [], "one_time": one_time}
        try:
            yield self
        finally:
            b, self._batch = self._batch, None
            if b["rows"]:
                first, last = b["rows"][0]["offset"], b["rows"][-1]["offset"]
                for r in b["rows"]:
                    r["batch_base_offset"], r["batch_first_offset"], r["batch_last_offset"] = first, first, last

    def gap(self, n: int = 1) -> "Log":
        self.next_offset += n
        return self

    def _append(self, kind: str, *, pid=-1, epoch=-1, txn=False, control=False, **fields) -> Row:
        b = self._batch
        if b is None or not b["one_time"] or not b["rows"]:
            self.ts += 1
        row = dict.fromkeys(DECODED_COLUMNS)
        if b is not None and not control:
            pid, epoch, txn = b["pid"], b["epoch"], b["txn"]
        off = self.next_offset
        self.next_offset += 1
        row.update(
            source=self.source, offsets_partition=self.partition, offset=off, batch_base_offset=off,
            batch_first_offset=off, batch_last_offset=off, batch_position=-1, timestamp=self.ts,
            timestamp_type="CreateTime", producer_id=pid, producer_epoch=epoch, is_transactional=txn,
            is_control=control, magic=2, codec="none", record_kind=kind, is_tombstone=False,
        )
        row.update(fields)
        self.rows.append(row)
        if b is not None and not control:
            b["rows"].append(row)
        return row

    # -- offsets (types 0/1) -----------------------------------------------------------------------------------
    def commit(self, group: str, topic: str, partition: int, offset: int, *, pid: int = -1, epoch: int = -1,
               txn: bool | None = None, metadata: str = "", leader_epoch: int = -1, expire: int | None = None,
               commit_ts: int | None = None, topic_id: str | None = None, version: int = 3) -> Row:
        txn = (pid != -1) if txn is None else txn
        return self._append(
            "offset_commit", pid=pid, epoch=epoch, txn=txn, key_type=1, value_version=version, group_id=group,
            topic=topic, partition=partition, committed_offset=offset, leader_epoch=leader_epoch,
            metadata=metadata, commit_timestamp=self.ts + 1 if commit_ts is None else commit_ts,
            expire_timestamp=expire, topic_id=topic_id)

    def offset_tombstone(self, group: str, topic: str, partition: int, *, pid: int = -1, epoch: int = -1,
                         txn: bool | None = None) -> Row:
        txn = (pid != -1) if txn is None else txn
        return self._append("offset_commit", pid=pid, epoch=epoch, txn=txn, key_type=1, is_tombstone=True,
                            group_id=group, topic=topic, partition=partition)

    def marker(self, pid: int, control_type: str = "COMMIT", *, epoch: int = 0, coordinator_epoch: int = 0) -> Row:
        return self._append("control", pid=pid, epoch=epoch, txn=True, control=True, control_type=control_type,
                            coordinator_epoch=coordinator_epoch)

    def control_batch(self, pid: int, types=("COMMIT",), *, epoch: int = 0) -> list[Row]:
        """One control batch holding several control records (the old loader reads only the first)."""
        rows = [self.marker(pid, t, epoch=epoch) for t in types]
        for r in rows:
            r["batch_base_offset"] = r["batch_first_offset"] = rows[0]["offset"]
            r["batch_last_offset"] = rows[-1]["offset"]
        return rows

    # -- classic groups (type 2) -------------------------------------------------------------------------------
    def group(self, group: str, members=(), *, generation: int = 1, protocol_type: str | None = "consumer",
              protocol: str | None = "range", leader: str | None = "__first__", state_ts: int = -1,
              version: int = 3) -> Row:
        members = list(members)
        if leader == "__first__":
            leader = members[0]["member_id"] if members else None
        return self._append(
            "group_metadata", key_type=2, value_version=version, group_id=group, protocol_type=protocol_type,
            generation=generation, protocol=protocol if members else None, leader=leader,
            current_state_timestamp=state_ts, members=members)

    def group_tombstone(self, group: str) -> Row:
        return self._append("group_metadata", key_type=2, is_tombstone=True, group_id=group)

    # -- KIP-848 consumer groups (types 3-8, 16) ---------------------------------------------------------------
    def _cg(self, key_type: int, group: str, tombstone: bool = False, **fields) -> Row:
        return self._append("consumer_group", key_type=key_type, value_version=None if tombstone else 0,
                            is_tombstone=tombstone, group_id=group, layout="3.8+", **fields)

    def cg_epoch(self, group: str, epoch: int) -> Row:
        return self._cg(3, group, group_epoch=epoch, metadata_hash=0)

    def cg_tombstone(self, group: str) -> Row:
        return self._cg(3, group, True)

    def cg_topics(self, group: str, topics) -> Row:
        """type 4: [(topic_id, name, num_partitions)]"""
        return self._cg(4, group, topics_metadata=[
            {"topic_id": i, "topic_name": n, "num_partitions": p} for i, n, p in topics])

    def cg_topics_tombstone(self, group: str) -> Row:
        return self._cg(4, group, True)

    def cg_member(self, group: str, member_id: str, *, topics=("t",), regex=None, assignor="uniform",
                  instance_id=None, rack=None, client_id="c", rebalance=45_000, session=None) -> Row:
        return self._cg(5, group, member_id=member_id, group_instance_id=instance_id, rack_id=rack,
                        client_id=client_id, client_host="/127.0.0.1",
                        subscribed_topics=None if topics is None else list(topics), subscribed_topic_regex=regex,
                        rebalance_timeout_ms=rebalance, session_timeout_ms=session, server_assignor=assignor)

    def cg_member_tombstone(self, group: str, member_id: str) -> Row:
        return self._cg(5, group, True, member_id=member_id)

    def cg_assignment_epoch(self, group: str, epoch: int) -> Row:
        return self._cg(6, group, assignment_epoch=epoch)

    def cg_assignment_epoch_tombstone(self, group: str) -> Row:
        return self._cg(6, group, True)

    def cg_target(self, group: str, member_id: str, partitions) -> Row:
        return self._cg(7, group, member_id=member_id, assigned_partitions=tps(*partitions))

    def cg_target_tombstone(self, group: str, member_id: str) -> Row:
        return self._cg(7, group, True, member_id=member_id)

    def cg_current(self, group: str, member_id: str, epoch: int, partitions=(), *, previous: int | None = None,
                   state: int = 0, revoking=()) -> Row:
        return self._cg(8, group, member_id=member_id, member_epoch=epoch,
                        previous_member_epoch=epoch - 1 if previous is None else previous, member_state=state,
                        assigned_partitions=tps(*partitions), partitions_pending_revocation=tps(*revoking))

    def cg_current_tombstone(self, group: str, member_id: str) -> Row:
        return self._cg(8, group, True, member_id=member_id)

    def cg_regex(self, group: str, regex: str, topics) -> Row:
        return self._cg(16, group, regex=regex, regex_topics=list(topics), regex_version=1, regex_timestamp=self.ts)

    def cg_regex_tombstone(self, group: str, regex: str) -> Row:
        return self._cg(16, group, True, regex=regex)

    # -- junk --------------------------------------------------------------------------------------------------
    def error(self, why: str = "value: truncated", key: bytes = b"\x00\x01", value: bytes = b"\x00") -> Row:
        return self._append("error", error=why, key=key, value=value)

    def unknown(self, key_type: int = 99) -> Row:
        return self._append("unknown", key_type=key_type, key=b"\x00\x63")


def to_table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=DECODED_RECORD_SCHEMA)


def to_frame(spark, rows: list[Row]):
    """Decoded rows as a Spark DataFrame with the decoded schema (via Arrow)."""
    return spark.createDataFrame(to_table(rows))


def to_log(spark, rows: list[Row]):
    """Decoded rows as a run's decoded log on Spark (`frames.decoded_log`), packed by a Spark task."""
    from pipelines.frames.decoded_log import DecodedLog

    return DecodedLog.from_frame(spark, to_frame(spark, rows))


# -- log compaction, as the log cleaner would leave the log ----------------------------------------------------
def record_key(row: Row):
    """The compaction key of a data record (None for control / junk rows, which the cleaner keeps)."""
    kind, kt = row.get("record_kind"), row.get("key_type")
    if kind == "offset_commit":
        return ("offset", row["group_id"], row["topic"], row["partition"])
    if kind == "group_metadata":
        return ("group", row["group_id"])
    if kind == "consumer_group":
        return (kt, row["group_id"], row.get("member_id"), row.get("regex"))
    return None


def compact(rows: list[Row]) -> list[Row]:
    """What the cleaner leaves below the last stable offset (LSO), per offsets partition: the last record per key,
    no aborted transactional data, every control record (kept: `CleanedTransactionMetadata`), tombstones kept
    (within delete.retention.ms). Records from the first open transaction on are never cleaned. Batches that lose
    records keep their remaining ones, so `batch_first_offset` moves to the first survivor (spec §8 #11)."""
    by_part: dict[int, list[Row]] = {}
    for r in rows:
        by_part.setdefault(r["offsets_partition"], []).append(r)
    out: list[Row] = []
    for part_rows in by_part.values():
        part_rows = sorted(part_rows, key=lambda r: r["offset"])
        outcome: dict[int, str | None] = {}
        open_by_pid: dict[int, list[Row]] = {}
        for r in part_rows:
            if r["record_kind"] == "control" and r.get("control_type") in ("COMMIT", "ABORT"):
                for d in open_by_pid.pop(r["producer_id"], []):
                    outcome[d["offset"]] = r["control_type"]
            elif r.get("is_transactional") and not r.get("is_control"):
                open_by_pid.setdefault(r["producer_id"], []).append(r)
        lso = min((d["offset"] for ds in open_by_pid.values() for d in ds), default=float("inf"))
        last: dict = {}
        for r in part_rows:
            if r["offset"] < lso and record_key(r) is not None and outcome.get(r["offset"]) != "ABORT":
                last[record_key(r)] = r["offset"]
        kept = []
        for r in part_rows:
            k = record_key(r)
            if r["offset"] >= lso or k is None:
                kept.append(dict(r))
            elif outcome.get(r["offset"]) != "ABORT" and last.get(k) == r["offset"]:
                kept.append(dict(r))
        first: dict[tuple, int] = {}
        for r in kept:
            first.setdefault((r["batch_base_offset"],), r["offset"])
        for r in kept:
            r["batch_first_offset"] = first[(r["batch_base_offset"],)]
        out.extend(kept)
    return out


def to_segment(rows: list[Row]) -> bytes:
    """The bytes of a segment holding `rows` (group records: key types 2-8 and 16; offset commits of no producer)
    batch by batch, as the broker
    wrote them (`pipelines.decoding.message_writer`, `batch_writer`): a classic member's subscription and assignment
    are encoded from its topics and partitions."""
    from pipelines.decoding import batch_writer as bw
    from pipelines.decoding import message_writer as mw

    out, batch = [], []
    for i, r in enumerate(rows):
        if r["key_type"] == 2:
            key = mw.write_group_metadata_key(r["group_id"])
            value = None if r["is_tombstone"] else mw.write_group_metadata_value(
                r["value_version"], protocol_type=r["protocol_type"], generation=r["generation"],
                protocol=r["protocol"], leader=r["leader"], current_state_timestamp=r["current_state_timestamp"],
                members=[{**m, "subscription": mw.write_consumer_subscription(0, m["subscribed_topics"] or []),
                          "assignment": mw.write_consumer_assignment(0, {a["topic"]: a["partitions"]
                                                                         for a in m["assigned_partitions"]})}
                         for m in r["members"]])
        elif r["record_kind"] == "consumer_group":
            key, value = mw.write_consumer_group_record(r["key_type"], r["group_id"],
                                                        None if r["is_tombstone"] else r,
                                                        member_id=r.get("member_id"), regex=r.get("regex"))
        elif r["record_kind"] == "offset_commit" and r["producer_id"] == -1:
            key = mw.write_offset_commit_key(r["group_id"], r["topic"], r["partition"], r["key_type"])
            value = None if r["is_tombstone"] else mw.write_offset_commit_value(
                r["value_version"], offset=r["committed_offset"], metadata=r["metadata"],
                commit_timestamp=r["commit_timestamp"], leader_epoch=r["leader_epoch"],
                expire_timestamp=-1 if r["expire_timestamp"] is None else r["expire_timestamp"],
                topic_id=r["topic_id"])
        else:
            raise ValueError(f"to_segment writes group records and plain offset commits, not {r['record_kind']}")
        batch.append((key, value, r["timestamp"]))
        if i + 1 == len(rows) or rows[i + 1]["batch_base_offset"] != r["batch_base_offset"]:
            out.append(bw.write_record_batch(batch, r["batch_base_offset"]))
            batch = []
    return b"".join(out)
