"""What a rebuild is asked (`RebuildRequest`: the CLI's flags) and its settings resolved once from `conf/` and the
request (`RunSettings`: the request wins)."""
from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from pipelines.config import Settings, not_whole
from pipelines.coordinator.options import (DEFAULT_KAFKA_VERSIONS, DEFAULT_SEMANTICS, SEMANTICS,
                                          default_retention_minutes, parse_kafka_version)
from pipelines.decoding.policy import ReadPolicy
from pipelines.rebuild.failures import UsageError


@dataclass(frozen=True)
class RebuildRequest:
    inputs: tuple[str, ...]
    warehouse: str
    snapshot_id: str | None = None
    as_of: str | None = None  # ISO-8601 (UTC if no zone) or "now"; None = newest record timestamp (at the cut)
    retention_minutes: int | None = None
    no_expiry: bool = False
    semantics: str | None = None
    until_time: str | None = None
    until_offset: int | None = None
    incremental: bool = False
    strict: bool = False
    num_partitions: int | None = None
    kafka_version: str | None = None
    replay_corrupt_batches: bool = False
    other_cluster: bool = False  # write a snapshot of another cluster's dump, not adding to the history


@dataclass(frozen=True)
class RunSettings:
    """A run's settings, resolved once from `conf/` and the request (the request wins). The thresholds that
    choose where shards execute are read by `rebuild.executor` only."""

    semantics: str
    retention_minutes: int
    expiry: bool
    kafka_version: str
    num_partitions: int | None  # the offsets topic's partition count setting; None: from the input
    strict: bool
    local_replay_max_rows: int
    resume_tasks_min_rows: int  # an incremental run resumed from the driver's decoding, this big, uses the cores
    in_process_max_bytes: int  # inputs up to this size are decoded and counted in the driver
    load_buffer_bytes: int  # a shard task decodes and loads its segments this many bytes at a time
    split_bytes: int  # an offsets partition of more segment bytes is decoded in ranges of this size (0: never)
    read_policy: ReadPolicy
    keep_snapshots: int | None = None  # the snapshots a warehouse keeps (None: every one)


def resolve_settings(settings: Settings, req: RebuildRequest) -> RunSettings:
    r = settings.section("rebuild")
    semantics = req.semantics or r.get("semantics", DEFAULT_SEMANTICS)
    if semantics not in SEMANTICS:
        raise UsageError(f"--semantics must be legacy or modern, not {semantics!r}")
    try:
        policy = ReadPolicy(
            replay_corrupt_batches=req.replay_corrupt_batches or bool(r.get("replay_corrupt_batches", False)),
            max_batch_bytes=settings.section("decode").get("max_batch_bytes", ReadPolicy().max_batch_bytes))
    except ValueError as e:
        raise UsageError(str(e)) from None
    given = req.kafka_version is not None  # an empty one given is refused, not read as the default
    kafka_version = str(req.kafka_version if given else r.get("kafka_version") or DEFAULT_KAFKA_VERSIONS[semantics])
    try:
        major, minor, _ = parse_kafka_version(kafka_version)
    except ValueError as e:
        raise UsageError(f"{'--kafka-version' if given else 'rebuild.kafka_version'}: {e}") from None
    if req.retention_minutes is not None:
        retention = req.retention_minutes
        if retention < 1:
            raise UsageError("--retention-minutes must be at least 1")
        what = "--retention-minutes"
    elif r.get("retention_minutes") is None:  # unset: the emulated broker's default
        retention = default_retention_minutes(major, minor)
        what = "rebuild.retention_minutes"
    else:
        retention = _non_negative_int(r.get("retention_minutes"), "rebuild.retention_minutes", least=1)
        what = "rebuild.retention_minutes"
    if retention > RETENTION_MINUTES_MAX:
        # Kafka's `offsets.retention.minutes` is an INT: a run of more is no broker's state, and its runs row (a
        # long) failed to be written once the snapshot was built
        raise UsageError(f"{what} must be at most {RETENTION_MINUTES_MAX} (offsets.retention.minutes is an int), "
                         f"not {retention}")
    decode = settings.section("decode")
    return RunSettings(
        semantics=semantics,
        retention_minutes=retention,
        expiry=not req.no_expiry and bool(r.get("expiry", True)),
        kafka_version=kafka_version,
        num_partitions=req.num_partitions or _non_negative_int(r.get("num_offsets_partitions"),
                                                               "rebuild.num_offsets_partitions") or None,
        strict=req.strict or bool(r.get("strict", False)),
        local_replay_max_rows=_non_negative_int(r.get("local_replay_max_rows", 0), "rebuild.local_replay_max_rows"),
        resume_tasks_min_rows=_non_negative_int(r.get("resume_tasks_min_rows", 0), "rebuild.resume_tasks_min_rows"),
        in_process_max_bytes=_non_negative_int(decode.get("in_process_max_bytes", 0), "decode.in_process_max_bytes"),
        load_buffer_bytes=_load_buffer_bytes(decode.get("load_buffer_bytes")),
        split_bytes=_non_negative_int(decode.get("split_bytes"), "decode.split_bytes"),
        read_policy=policy,
        # read before the run, not once its snapshot is committed: a typo failed every run's retirement after it
        keep_snapshots=_non_negative_int(settings.section("warehouse").get("keep_snapshots"),
                                         "warehouse.keep_snapshots") or None,
    )


RETENTION_MINUTES_MAX = (1 << 31) - 1


def _non_negative_int(value, what: str, least: int = 0) -> int:
    if not_whole(value):
        raise UsageError(f"{what} must be a whole number, not {value!r}")
    try:
        n = int(value or 0)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be a whole number, not {value!r}") from None
    if n < least:
        raise UsageError(f"{what} must be {least} or more, not {n}")
    return n


def _load_buffer_bytes(value) -> int:
    # imported here, not at module level: deltalake ~0.2 s, numpy ~0.1-0.3 s, pyarrow ~0.45 s, pyarrow.fs ~0.05 s,
    # pyarrow.parquet ~0.05 s of import (python -X importtime)
    from pipelines.frames.segment_shards import LOAD_BUFFER_BYTES

    return LOAD_BUFFER_BYTES if value is None else _non_negative_int(value, "decode.load_buffer_bytes", least=1)


def new_snapshot_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
