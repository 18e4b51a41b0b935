"""The API's response models: the schemas `GET /openapi.json` documents and the schema checks read; the answers
themselves are built as plain JSON by the views (`pipelines/serving/views.py`).
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorOut(BaseModel):
    detail: str


class HealthOut(_Open):
    status: str
    snapshot_id: str | None
    latest_snapshot_id: str | None
    indexing: list[str]
    error: str | None = None  # the last index build's failure (the latest's, when status is `error`)
    damaged_table: str | None = None  # the table whose damage failed the latest snapshot's index


class SnapshotOut(_Open):
    snapshot_id: str
    status: str | None
    started_at: str | None
    finished_at: str | None
    as_of: str | None
    kind: str  # scheduled or what-if (a run with --as-of/--until-*: served by id only)
    validation: dict[str, Any] | None = None  # runs.validation, stored as JSON text, listed as an object
    summary: dict[str, Any] | None = None  # runs.summary: the run's summary (`rebuild --json`) as stored


class SnapshotsOut(BaseModel):
    latest_snapshot_id: str | None
    snapshots: list[SnapshotOut]


class GroupSummaryOut(_Open):
    group_id: str
    group_type: str | None
    protocol_type: str | None
    state: str | None
    generation: int | None
    member_count: int | None
    offset_count: int


class GroupsPageOut(BaseModel):
    snapshot_id: str
    groups: list[GroupSummaryOut]
    next_cursor: str | None


class OffsetOut(BaseModel):
    topic: str
    partition: int
    committed_offset: int | None
    leader_epoch: int | None
    metadata: str | None
    commit_timestamp: str | None
    # the partition's bounds and the lag at the snapshot's as_of (`consumer_lag`; null when unknown)
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    lag: int | None = None
    lag_seconds: float | None = None
    commit_age_seconds: float | None = None


class GroupMetadataOut(_Open):
    group_id: str
    group_type: str | None
    protocol_type: str | None
    state: str | None
    generation: int | None
    protocol: str | None
    leader: str | None
    member_count: int | None
    offset_count: int


class ExpiredOut(BaseModel):
    offsets: list[dict[str, Any]]
    group: dict[str, Any] | None


class GroupLagOut(BaseModel):
    max_lag_seconds: float | None  # the group's largest lag in time
    worst_partition: dict[str, Any] | None  # {topic, partition} holding it
    partitions_timed: int  # partitions with a lag in time


class GroupDetailOut(BaseModel):
    snapshot_id: str
    group: GroupMetadataOut
    members: list[dict[str, Any]]
    offsets: list[dict[str, Any]]  # each as OffsetOut, with the rest of its `loaded_offsets` row
    lag: GroupLagOut
    pending: list[dict[str, Any]]
    expired: ExpiredOut
    removed: dict[str, Any] | None


class TopicGroupOut(GroupSummaryOut):
    offsets: list[dict[str, Any]]


class TopicGroupsOut(BaseModel):
    snapshot_id: str
    topic: str
    groups: list[TopicGroupOut]
    next_cursor: str | None


class CommitOut(_Open):
    topic: str | None
    partition: int | None
    committed_offset: int | None
    commit_timestamp: str | None


class CommitsOut(BaseModel):
    snapshot_id: str
    group_id: str
    commits: list[CommitOut]
    truncated: bool
