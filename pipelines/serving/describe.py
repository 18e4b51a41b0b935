"""`offsetlake describe`: a group laid out the way `kafka-consumer-groups.sh --describe` prints it
(ConsumerGroupCommand.java, Kafka 3.9/4.0: `printOffsets`, `printMembers`, `printStates`,
`shouldPrintMemberState`; spec/offsets-topic.md §7.3).

Rendering returns a list of (stream, text) chunks so the CLI can interleave stdout and stderr in Kafka's order.
The coordinator (broker host:port) is not in the offsets topic, so COORDINATOR (ID) prints `-`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.io.snapshots import iso
from pipelines.serving.cells import cell
from pipelines.serving.index import REBALANCING_STATES, SnapshotIndex, assignment_strategy, consumer_lag
from pipelines.times import iso_duration

MISSING = "-"
OUT, ERR = "out", "err"


@dataclass
class Rendered:
    chunks: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # groups that do not exist (Kafka's "does not exist")

    def out(self, text: str) -> None:
        self.chunks.append((OUT, text))

    def err(self, text: str) -> None:
        self.chunks.append((ERR, text))

    def text(self, stream: str) -> str:
        return "".join(t for s, t in self.chunks if s == stream)


def _state_check(r: Rendered, gid: str, state: str | None, num_rows: int, exists: bool) -> bool:
    """shouldPrintMemberState: messages for Dead/missing, Empty and rebalancing groups; True if rows follow."""
    if not exists or state == "Dead":
        r.err(f"\nError: Consumer group '{cell(gid)}' does not exist.\n")
        r.missing.append(gid)
        return False
    if state == "Empty":
        r.err(f"\nConsumer group '{cell(gid)}' has no active members.\n")
    elif state in REBALANCING_STATES:
        r.err(f"\nWarning: Consumer group '{cell(gid)}' is rebalancing.\n")
    return num_rows > 0


def _assigned(member: dict) -> list[tuple[str, int]]:
    return sorted({(a["topic"], a["partition"]) for a in (member.get("assigned_partitions") or [])})


def offset_rows(idx: SnapshotIndex, gid: str, end_offsets: dict | None) -> list[dict]:
    """collectGroupsOffsets: members with more partitions first, each member's partitions by topic then
    partition, then committed-but-unassigned partitions with `-` consumer/host/client. Each row also has the lag in
    time the snapshot computed (`consumer_lag.lag_seconds`, at its as_of; None when unknown)."""
    committed = {(o["topic"], o["partition"]): o for o in idx.group_offsets(gid)}
    timed = idx.group_lag(gid)
    members = [m for m in idx.group_members(gid) if m.get("assigned_partitions")]
    members.sort(key=lambda m: -len(_assigned(m)))  # stable: ties keep member order
    rows, seen = [], set()

    def row(tp, consumer, host, client):
        o = committed.get(tp)
        off = o["committed_offset"] if o else None
        leo = (end_offsets if end_offsets is not None else idx.end_offsets).get(tp)
        lag = consumer_lag(leo, off)
        return {
            "topic": tp[0],
            "partition": tp[1],
            "leader_epoch": o.get("leader_epoch") if o else None,
            "offset": off,
            "log_end_offset": leo,
            "lag": lag,
            "consumer_id": consumer,
            "host": host,
            "client_id": client,
            "lag_seconds": _lag_seconds(timed.get(tp) or {}, off, leo) if end_offsets is not None
            else (timed.get(tp) or {}).get("lag_seconds") if o else None,
        }

    for m in members:
        for tp in _assigned(m):
            seen.add(tp)
            rows.append(row(tp, m.get("member_id") or MISSING, m.get("client_host") or MISSING, m.get("client_id") or MISSING))
    for tp in sorted(tp for tp in committed if tp not in seen):
        rows.append(row(tp, MISSING, MISSING, MISSING))
    return rows


def _lag_seconds(timed: dict, committed: int | None, leo: int | None) -> float | None:
    """The snapshot's lag in time against end offsets a file gives: caught up (0) at or past the file's end; unknown
    where the snapshot called the group caught up to an end short of the file's, as the records between are not in
    the snapshot's segments (else LAG-TIME said PT0S beside a LAG of records behind)."""
    seconds = timed.get("lag_seconds")
    if committed is None or committed == -1 or leo is None:
        return seconds
    if committed >= leo:
        return 0.0
    measured_to = timed.get("log_end_offset")
    return None if seconds == 0 and (measured_to is None or leo > measured_to) else seconds


def _s(v) -> str:
    return MISSING if v is None else str(v)


def lag_time(seconds: float | None) -> str:
    """LAG-TIME: the lag in seconds as an ISO-8601 duration to the millisecond (`PT59M30.354S`, `PT0S` caught up),
    `-` when unknown."""
    return MISSING if seconds is None else iso_duration(nanoseconds=round(seconds * 1000) * 1_000_000)


def render_offsets(r: Rendered, idx: SnapshotIndex, gid: str, end_offsets: dict | None, verbose: bool) -> None:
    g = idx.group(gid)
    rows = offset_rows(idx, gid, end_offsets) if idx.exists(gid) else []
    if not _state_check(r, gid, g.get("state") if g else None, len(rows), idx.exists(gid)):
        return
    tps = [(x["topic"], x["partition"]) for x in rows]
    gid = cell(gid)
    rows = [{k: cell(v) for k, v in x.items()} for x in rows]
    wg = max([15, len(gid)])
    wt = max([15] + [len(x["topic"]) for x in rows])
    wc = max([15] + [len(x["consumer_id"]) for x in rows])
    wh = max([15] + [len(x["host"]) for x in rows])
    wcl = max([15] + [len(x["client_id"]) for x in rows])
    # Kafka's columns as it lays them out, then LAG-TIME last: scripts cutting the first columns read them as ever
    if verbose:
        fmt = f"\n{{:<{wg}}} {{:<{wt}}} {{:<10}} {{:<15}} {{:<15}} {{:<15}} {{:<15}} {{:<{wc}}} {{:<{wh}}} {{:<{wcl}}} {{}}"
        head = ("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID", "LAG-TIME")
    else:
        fmt = f"\n{{:<{wg}}} {{:<{wt}}} {{:<10}} {{:<15}} {{:<15}} {{:<15}} {{:<{wc}}} {{:<{wh}}} {{:<{wcl}}} {{}}"
        head = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID", "LAG-TIME")
    parts = [fmt.format(*head)]
    for x in rows:
        vals = [gid, x["topic"], str(x["partition"])]
        if verbose:
            vals.append(_s(x["leader_epoch"]))
        vals += [_s(x["offset"]), _s(x["log_end_offset"]), _s(x["lag"]), x["consumer_id"], x["host"], x["client_id"],
                 lag_time(x["lag_seconds"])]
        parts.append(fmt.format(*vals))
    parts.append("\n")
    r.out("".join(parts))
    if end_offsets is None and idx.snapshot.kind != "scheduled":
        r.err(_end_offsets_note(idx, tps))


def _end_offsets_note(idx: SnapshotIndex, tps: list[tuple[str, int]]) -> str:
    """A what-if snapshot's LAG is its committed offsets at a past moment against end offsets: the ends at that
    moment (a rebuild since ends_at: from the segments' record timestamps, `observed_at` its as_of), or ones the log
    dirs held at another time. Which ones, and when they were observed (stderr, below the table)."""
    as_of = iso(idx.snapshot.as_of) if idx.snapshot.as_of is not None else MISSING
    sources = idx.end_offset_sources(tps)
    if not sources:
        return (f"\nLOG-END-OFFSET unknown: the input of what-if snapshot {idx.snapshot.snapshot_id} left no end "
                "offsets known at its as_of.\n")
    if all(s["observed_at"] == as_of for s in sources):
        return (f"\nLOG-END-OFFSET and CURRENT-OFFSET both as of {as_of} (what-if snapshot "
                f"{idx.snapshot.snapshot_id}): the ends then, from the segments' record timestamps.\n")
    used = "; ".join(f"{s['source']} observed at {s['observed_at'] or MISSING} ({s['partitions']} partition"
                     f"{'' if s['partitions'] == 1 else 's'})" for s in sources)
    return (f"\nLOG-END-OFFSET from {used}; CURRENT-OFFSET as of {as_of} (what-if snapshot "
            f"{idx.snapshot.snapshot_id}): LAG counts what was written between the two.\n")


def _assignment_string(tps: list[tuple[str, int]]) -> str:
    """getAssignmentString (4.0+): `topicA:0,1;topicB:2`, topics and partitions sorted."""
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return ";".join(sorted(f"{t}:" + ",".join(str(p) for p in sorted(ps)) for t, ps in by_topic.items()))


#: The group types with a group epoch, a target assignment epoch and member epochs: the new coordinator's (KIP-848
#: consumer, KIP-932 share and KIP-1071 streams groups), which their describe calls report
EPOCH_GROUP_TYPES = frozenset({"consumer", "share", "streams"})


def render_members(r: Rendered, idx: SnapshotIndex, gid: str, verbose: bool) -> None:
    g = idx.group(gid)
    exists = idx.exists(gid)
    members = idx.group_members(gid) if exists else []
    has_epochs = (g or {}).get("group_type") in EPOCH_GROUP_TYPES
    rows = []
    for m in members:
        cur = _assigned(m)
        tgt = sorted({(a["topic"], a["partition"]) for a in (m.get("target_partitions") or [])})
        rows.append({
            "consumer_id": cell(m.get("member_id") or ""),
            "instance": cell(m.get("group_instance_id") or ""),
            "host": cell(m.get("client_host") or ""),
            "client_id": cell(m.get("client_id") or ""),
            "n": len(cur),
            "cur_epoch": _s(m.get("member_epoch")) if has_epochs else MISSING,
            "cur": cell(_assignment_string(cur)) if cur else MISSING,
            "tgt_epoch": _s(g.get("assignment_epoch")) if has_epochs else MISSING,
            "tgt": cell(_assignment_string(tgt)) if (tgt and has_epochs) else MISSING,
        })
    wg, wc, wi, wh, wcl, wca, wta = 15, 15, 17, 15, 15, 20, 20
    with_instance = False
    if _state_check(r, gid, g.get("state") if g else None, len(rows), exists):
        for x in rows:
            wg = max(wg, len(cell(gid)))
            wc, wi = max(wc, len(x["consumer_id"])), max(wi, len(x["instance"]))
            wh, wcl = max(wh, len(x["host"])), max(wcl, len(x["client_id"]))
            wca, wta = max(wca, len(x["cur"])), max(wta, len(x["tgt"]))
            with_instance = with_instance or x["instance"] != ""
    elif not exists or (g and g.get("state") == "Dead"):
        return
    gid = cell(gid)
    if with_instance:
        fmt = f"{{:<{wg}}} {{:<{wc}}} {{:<{wi}}} {{:<{wh}}} {{:<{wcl}}} {{:<15}} "
        head = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    else:
        fmt = f"{{:<{wg}}} {{:<{wc}}} {{:<{wh}}} {{:<{wcl}}} {{:<15}} "
        head = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    vfmt = f"{{:<15}} {{:<{wca}}} {{:<15}} {{:<{wta}}}"
    parts = ["\n" + fmt.format(*head)]
    if verbose:
        parts.append(vfmt.format("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"))
    parts.append("\n")
    for x in rows:
        vals = [gid, x["consumer_id"]] + ([x["instance"]] if with_instance else []) + [x["host"], x["client_id"], str(x["n"])]
        parts.append(fmt.format(*vals))
        if verbose:
            parts.append(vfmt.format(x["cur_epoch"], x["cur"], x["tgt_epoch"], x["tgt"]))
        parts.append("\n")
    r.out("".join(parts))


def render_state(r: Rendered, idx: SnapshotIndex, gid: str, verbose: bool) -> None:
    g = idx.group(gid)
    if not _state_check(r, gid, g.get("state") if g else None, 1, idx.exists(gid)):
        return
    coordinator = MISSING  # host:port  (id) of the partition leader: not in the offsets topic
    wco, wg = max(25, len(coordinator)), max(15, len(cell(gid)))
    strategy = assignment_strategy(g) or MISSING
    n_members = len(idx.group_members(gid)) or (g.get("member_count") or 0)
    has_epochs = g.get("group_type") in EPOCH_GROUP_TYPES
    if verbose:
        fmt = f"\n{{:<{wg}}} {{:<{wco}}} {{:<20}} {{:<20}} {{:<15}} {{:<25}} {{}}"
        head = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS")
        vals = (gid, coordinator, strategy, g.get("state"),
                _s(g.get("generation")) if has_epochs else MISSING,
                _s(g.get("assignment_epoch")) if has_epochs else MISSING, n_members)
    else:
        fmt = f"\n{{:<{wg}}} {{:<{wco}}} {{:<20}} {{:<20}} {{}}"
        head = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
        vals = (gid, coordinator, strategy, g.get("state"), n_members)
    r.out(fmt.format(*head) + fmt.format(*[cell(str(v)) for v in vals]) + "\n")


def consumer_group_ids(idx: SnapshotIndex) -> list[str]:
    """The groups `--all-groups` lists (ListGroupsOptions.forConsumerGroups): consumer groups and classic groups
    with protocol type `consumer` or none (simple consumers), in group-id order."""
    out = []
    for gid in idx.group_ids:
        g = idx.groups[gid]
        if g.get("group_type") == "consumer" or (g.get("group_type") in (None, "classic") and g.get("protocol_type") in (None, "", "consumer")):
            out.append(gid)
    return out


def describe(
    idx: SnapshotIndex,
    group_ids: list[str],
    *,
    mode: str = "offsets",
    end_offsets: dict | None = None,
    verbose: bool = False,
) -> Rendered:
    """Render `--describe [--offsets | --members | --state]` for each group, in group-id order (Kafka's TreeMap)."""
    r = Rendered()
    for gid in sorted(group_ids):
        if mode == "members":
            render_members(r, idx, gid, verbose)
        elif mode == "state":
            render_state(r, idx, gid, verbose)
        else:
            render_offsets(r, idx, gid, end_offsets, verbose)
    return r


HISTORY_COLUMNS = ("record_timestamp", "offsets_partition", "record_offset", "group_type", "event", "generation",
                   "assignment_epoch", "state", "leader", "member_count", "members_joined", "members_left", "group_id",
                   "batch_last_offset")
#: after the STATE of an event no reader could have seen the group at (`history.observable`)
UNOBSERVED = "*"


def render_history(r: Rendered, gid: str, events: list[dict]) -> None:
    """`describe --history`: the group's rebalances from the log, oldest first (`group_history`): every new
    generation or epoch, each member joining or leaving, deletions. Not a kafka-consumer-groups view. An event no
    reader could have seen the group at (`observable` False: not its last in its batch) has its STATE marked
    `UNOBSERVED`: every record is listed for an audit of the log, and the marks tell the story `changes` tells."""
    gid_shown = cell(gid)
    if not events:
        r.err(f"\nNo group events for group {gid_shown} in the log of this snapshot.\n")
        r.missing.append(gid)
        return
    events = sorted(events, key=lambda e: (e["offsets_partition"], e["record_offset"]))
    head = ("TIME", "OFFSET", "EVENT", "GENERATION", "STATE", "#MEMBERS", "JOINED", "LEFT")
    rows = []
    for e in events:
        ts = e.get("record_timestamp")
        when = ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" if ts is not None else MISSING
        gen = _s(e.get("generation"))
        if e.get("group_type") in EPOCH_GROUP_TYPES and e.get("assignment_epoch") is not None:
            gen = f"{gen}/{e['assignment_epoch']}"
        seen = e.get("observable", True)
        rows.append((when, f"{e['offsets_partition']}:{e['record_offset']}", e["event"], gen,
                     _s(e.get("state")) + ("" if seen else UNOBSERVED), str(e.get("member_count") or 0),
                     cell(",".join(e.get("members_joined") or [])) or MISSING,
                     cell(",".join(e.get("members_left") or [])) or MISSING))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head[:-1])]
    fmt = " ".join(f"{{:<{w}}}" for w in widths) + " {}"
    legend = "" if all(e.get("observable", True) for e in events) else (
        f"; STATE{UNOBSERVED}: a state inside a batch, never seen: the coordinator answers at a batch's end")
    lines = [f"\nGROUP {gid_shown} (generation: classic generation, or consumer group epoch/assignment epoch{legend})",
             fmt.format(*head)] + [fmt.format(*row) for row in rows]
    r.out("\n".join(lines) + "\n")
