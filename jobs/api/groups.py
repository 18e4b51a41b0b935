"""`/groups…`, `/group…?id=`, `/topics/{topic}/groups`, `/status/groups`, `/history/offsets`: what the snapshot
says of its groups.

Point lookups (`/groups/{id}`, `/groups/{id}/offsets`) are kept serialized in the snapshot index's LRU. A route
whose path ends after `{group_id}` comes after every route that continues it: the group id matches any character.
"""
from __future__ import annotations

from typing import Callable, Hashable

from fastapi import APIRouter, Path as PathParam, Query
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from jobs.api.models import CommitsOut, GroupDetailOut, GroupsPageOut, OffsetOut, TopicGroupsOut
from jobs.api.params import RawPathRoute, SnapshotQ
from jobs.api.responses import ERRORS, HISTORY_ERRORS, bytes_response, dumps, json_response
from jobs.api.server import Served
from pipelines.serving import group_status, overview, views
from pipelines.serving.index import SnapshotIndex

router = APIRouter(tags=["groups"], responses=ERRORS, route_class=RawPathRoute)

PartitionQ = Query(None, ge=0, le=2**31 - 1)


async def _point(server: Served, snapshot: str | None, key: Hashable,
                 build: Callable[[SnapshotIndex], object]) -> Response:
    """A point lookup's answer, built once per (snapshot index, key) and then served as kept bytes."""
    idx = server.catalog.ready_index(snapshot)
    if idx is None:  # may have to wait for an index: off the event loop
        idx = await run_in_threadpool(server.catalog.resolve, snapshot)
    # An answer from a built index is a few Arrow slices and a JSON dump (well under a millisecond for a group's
    # offsets): cheaper inline than the thread-pool hop it would otherwise take.
    body = server.cache.answer(idx, key, lambda i: dumps(build(i)))
    return bytes_response(body, idx.snapshot.snapshot_id)


@router.get("/groups", response_model=GroupsPageOut)
def groups(
    server: Served,
    snapshot: str | None = SnapshotQ,
    state: str | None = Query(None, max_length=200, description="comma list of states, e.g. Stable,Empty"),
    type: str | None = Query(None, max_length=200, description="comma list of group types (classic, consumer, …)"),
    protocol_type: str | None = Query(None, max_length=249),
    prefix: str | None = Query(None, max_length=1000, description="group id prefix"),
    topic: str | None = Query(None, max_length=249, description="groups with committed offsets on this topic"),
    limit: int = Query(views.DEFAULT_PAGE, ge=1, le=views.MAX_PAGE),
    cursor: str | None = Query(None, max_length=4000, description="`next_cursor` of the previous page"),
):
    """Live groups in group-id order, `limit` per page; follow `next_cursor` until it is null."""
    idx = server.catalog.resolve(snapshot)
    page = views.list_groups(
        idx, state=state, type=type, protocol_type=protocol_type, prefix=prefix, topic=topic, limit=limit, cursor=cursor
    )
    return json_response(page, idx.snapshot.snapshot_id)


@router.get("/groups/{group_id:group_id}/offsets", response_model=list[OffsetOut])
async def group_offsets(
    server: Served,
    group_id: str = PathParam(..., description="group id"),
    snapshot: str | None = SnapshotQ,
    topic: str | None = Query(None, max_length=249),
    partition: int | None = PartitionQ,
):
    """The group's committed offsets: `{topic, partition, committed_offset, leader_epoch, metadata,
    commit_timestamp, log_start_offset, log_end_offset, lag, lag_seconds, commit_age_seconds}` in topic, partition
    order (the lag at the snapshot's as_of; null when unknown). The snapshot is in the X-Offsetlake-Snapshot
    header (for an id of printable ASCII; `/groups/{id}` names any in its body)."""
    return await _point(server, snapshot, ("offsets", group_id, topic, partition),
                        lambda idx: views.group_offsets(idx, group_id, topic, partition))


@router.get("/groups/{group_id:group_id}/commits", response_model=CommitsOut)
def group_commits(
    server: Served,
    group_id: str = PathParam(..., description="group id"),
    snapshot: str | None = SnapshotQ,
    topic: str | None = Query(None, max_length=249),
    partition: int | None = PartitionQ,
    limit: int = Query(views.DEFAULT_COMMITS, ge=1, le=views.MAX_COMMITS),
):
    """The group's offset-commit history (`offset_commits`) up to the snapshot's as_of, in log order (the commit time
    inside a value may be the client's clock), `limit` the newest."""
    idx = server.catalog.resolve(snapshot)
    body = views.group_commits(server.reader, idx, group_id, topic=topic, partition=partition, limit=limit)
    return json_response(body, idx.snapshot.snapshot_id)


@router.get("/groups/{group_id:group_id}/history")
def group_history(
    server: Served,
    group_id: str = PathParam(..., description="group id"),
    snapshot: str | None = SnapshotQ,
    limit: int = Query(views.DEFAULT_COMMITS, ge=1, le=views.MAX_COMMITS),
):
    """The group's rebalances from the snapshot's log (`group_history`), in log order: `{events: [{record_timestamp,
    offsets_partition, record_offset, event, generation, assignment_epoch, state, member_count, members_joined,
    members_left, observable, ...}], truncated}`: `observable` false for an event inside a batch, where no reader saw
    the group (`changes` judges it so)."""
    idx = server.catalog.resolve(snapshot)
    return json_response(views.group_history(server.reader, idx, group_id, limit=limit), idx.snapshot.snapshot_id)


@router.get("/groups/{group_id:group_id}", response_model=GroupDetailOut)
async def group(server: Served, group_id: str = PathParam(..., description="group id"),
                snapshot: str | None = SnapshotQ):
    """The group: metadata, members, committed offsets, open transactional offsets, what expired at as_of."""
    return await _point(server, snapshot, ("group", group_id), lambda idx: views.group_detail(idx, group_id))


# The same four answers for a group id given as a query parameter. A client normalises the dot segments of a path
# (RFC 3986 5.2.4, the WHATWG URL standard, `%2e` too): `/groups/..` is sent as `/`, `/groups/./history` as
# `/groups/history`, so the path routes never see the group ids `.` and `..`, which Kafka takes (4.0
# GroupCoordinatorService.isGroupIdNotEmpty: any id but an empty one). A query holds any id as it is.
GroupIdQ = Query(..., max_length=10_000, description="group id (any: `.` and `..` too)")


@router.get("/group", response_model=GroupDetailOut)
async def group_by_query(server: Served, id: str = GroupIdQ, snapshot: str | None = SnapshotQ):
    """`/groups/{group_id}` of the group `id`."""
    return await group(server, id, snapshot)


@router.get("/group/offsets", response_model=list[OffsetOut])
async def group_offsets_by_query(server: Served, id: str = GroupIdQ, snapshot: str | None = SnapshotQ,
                                 topic: str | None = Query(None, max_length=249), partition: int | None = PartitionQ):
    """`/groups/{group_id}/offsets` of the group `id`."""
    return await group_offsets(server, id, snapshot, topic, partition)


@router.get("/group/commits", response_model=CommitsOut)
def group_commits_by_query(server: Served, id: str = GroupIdQ, snapshot: str | None = SnapshotQ,
                           topic: str | None = Query(None, max_length=249), partition: int | None = PartitionQ,
                           limit: int = Query(views.DEFAULT_COMMITS, ge=1, le=views.MAX_COMMITS)):
    """`/groups/{group_id}/commits` of the group `id`."""
    return group_commits(server, id, snapshot, topic, partition, limit)


@router.get("/group/history")
def group_history_by_query(server: Served, id: str = GroupIdQ, snapshot: str | None = SnapshotQ,
                           limit: int = Query(views.DEFAULT_COMMITS, ge=1, le=views.MAX_COMMITS)):
    """`/groups/{group_id}/history` of the group `id`."""
    return group_history(server, id, snapshot, limit)


@router.get("/topics/{topic}/groups", response_model=TopicGroupsOut)
def topic_groups(
    server: Served,
    topic: str = PathParam(..., max_length=249),
    snapshot: str | None = SnapshotQ,
    limit: int = Query(views.DEFAULT_PAGE, ge=1, le=views.MAX_PAGE),
    cursor: str | None = Query(None, max_length=4000),
):
    """Groups with committed offsets on the topic (group-id order, paginated), each with those offsets."""
    idx = server.catalog.resolve(snapshot)
    return json_response(views.topic_groups(idx, topic, limit=limit, cursor=cursor), idx.snapshot.snapshot_id)


@router.get("/status/groups", responses=HISTORY_ERRORS)
def group_status_route(
    server: Served,
    group: str = Query(..., max_length=10_000, description="group id"),
    snapshot: str | None = SnapshotQ,
):
    """The group's status over its commit windows (Burrow's rules, see the README): `{group_id, status,
    total_lag, partitions, lag_known_partitions, max_lag, partition_status: [{topic, partition, status, lag,
    window: [{offset, timestamp, lag}]}]}`, the same numbers `/metrics` exports."""
    idx = server.catalog.resolve(snapshot)
    st = server.group_statuses(idx).get(group)
    if st is None:
        if not idx.exists(group):
            raise idx.not_found(group)
        st = group_status.GroupStatus(group, "OK", [])  # a group without committed offsets: nothing to judge
    return json_response({"snapshot_id": idx.snapshot.snapshot_id, **st.as_json()}, idx.snapshot.snapshot_id)


@router.get("/history/offsets")
def offsets_history(
    server: Served,
    group: str = Query(..., max_length=10_000, description="group id"),
    snapshot: str | None = SnapshotQ,
):
    """The group's committed offset per partition in every readable scheduled snapshot up to `snapshot`
    (default: the served one), with the log end offset and lag where known; `regressed` marks a committed
    offset below the previous snapshot's."""
    idx = server.catalog.resolve(snapshot)
    body = overview.offsets_over_snapshots(server.reader, server.catalog.snapshots(), group, idx.snapshot)
    if not body["partitions"] and not idx.exists(group):
        raise idx.not_found(group)
    return json_response(body, idx.snapshot.snapshot_id)
