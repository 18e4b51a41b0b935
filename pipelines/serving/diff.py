"""`offsetlake diff`: what changed between two snapshots, per group and per partition.

A committed offset that went *backwards* between two snapshots is the signature of a reset by mistake (or of a
consumer rewound on purpose); it is listed first. Offsets that vanished are told apart: `expired` when the later
snapshot's `expired_offsets` lists them (retention at its as_of), `disappeared` otherwise (offset tombstone,
group deletion, topic deletion).
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.serving.cells import cell
from pipelines.serving.history import compaction_note, log_gaps
from pipelines.serving.index import SnapshotIndex

_KEY = ["group_id", "topic", "partition"]


def _offsets(idx: SnapshotIndex) -> pa.Table:
    t = idx.offsets.table
    if t is None:
        return pa.table({"group_id": pa.array([], pa.string()), "topic": pa.array([], pa.string()),
                         "partition": pa.array([], pa.int32()), "committed_offset": pa.array([], pa.int64())})
    return t.select(_KEY + ["committed_offset"])


def diff_snapshots(a: SnapshotIndex, b: SnapshotIndex) -> dict:
    """Compare snapshot `a` (before) with `b` (after)."""
    offsets, unchanged = _offset_changes(a, b)
    groups = _group_changes(a, b)
    per_group: dict[str, dict] = {}
    for r in offsets["advanced"]:
        s = per_group.setdefault(r["group_id"], {"group_id": r["group_id"], "partitions": 0, "messages": 0})
        s["partitions"] += 1
        s["messages"] += r["delta"]
    return {
        "from": a.snapshot.snapshot_id,
        "to": b.snapshot.snapshot_id,
        "summary": {
            "advanced": len(offsets["advanced"]),
            "regressed": len(offsets["regressed"]),
            "unchanged": unchanged,
            "appeared": len(offsets["appeared"]),
            "disappeared": len(offsets["disappeared"]),
            "expired": len(offsets["expired"]),
            "groups_created": len(groups["created"]),
            "groups_deleted": len(groups["deleted"]),
            "groups_changed": len(groups["changed"]),
        },
        "groups": groups,
        "offsets": offsets,
        "advanced_by_group": sorted(per_group.values(), key=lambda s: s["group_id"]),
        "notes": _compaction_notes(a, b),
    }


def _offset_rows(t: pa.Table, with_delta: bool) -> list[dict]:
    out = []
    for r in t.sort_by([(k, "ascending") for k in _KEY]).to_pylist():
        d = {"group_id": r["group_id"], "topic": r["topic"], "partition": r["partition"],
             "before": r["before"], "after": r["after"]}
        if with_delta:
            d["delta"] = r["after"] - r["before"]
        out.append(d)
    return out


def _offset_changes(a: SnapshotIndex, b: SnapshotIndex) -> tuple[dict, int]:
    """Every committed offset that moved, appeared or went, by key: regressed (listed first), advanced, appeared,
    disappeared and expired (gone, and in `b`'s `expired_offsets`); and how many are unchanged."""
    ta = _offsets(a).rename_columns(_KEY + ["before"])
    tb = _offsets(b).rename_columns(_KEY + ["after"])
    j = ta.join(tb, keys=_KEY, join_type="full outer")
    before, after = j.column("before"), j.column("after")
    in_a, in_b = pc.is_valid(before), pc.is_valid(after)
    both = pc.and_(in_a, in_b)
    # committed_offset itself is never null in a served offset; a null side means "no row in that snapshot".
    expired_keys = set()
    if b.expired.table is not None:
        e = b.expired.table
        expired_keys = set(zip(e.column("group_id").to_pylist(), e.column("topic").to_pylist(),
                               e.column("partition").to_pylist()))
    gone_rows = _offset_rows(j.filter(pc.and_(in_a, pc.invert(in_b))), False)
    unchanged = pc.sum(pc.and_(both, pc.equal(after, before))).as_py() or 0
    return {
        "regressed": _offset_rows(j.filter(pc.and_(both, pc.less(after, before))), True),
        "advanced": _offset_rows(j.filter(pc.and_(both, pc.greater(after, before))), True),
        "appeared": _offset_rows(j.filter(pc.and_(pc.invert(in_a), in_b)), False),
        "disappeared": [r for r in gone_rows if (r["group_id"], r["topic"], r["partition"]) not in expired_keys],
        "expired": [r for r in gone_rows if (r["group_id"], r["topic"], r["partition"]) in expired_keys],
    }, unchanged


def _group_changes(a: SnapshotIndex, b: SnapshotIndex) -> dict:
    """The groups `b` has and `a` had not, those gone (expired, deleted by a tombstone, or gone otherwise), and those
    whose state or generation changed."""
    ga, gb = set(a.group_ids), set(b.group_ids)
    created = [{"group_id": g, "state": b.groups[g].get("state"), "group_type": b.groups[g].get("group_type")}
               for g in sorted(gb - ga)]
    deleted = []
    for g in sorted(ga - gb):
        if g in b.expired_groups:
            why = "expired"
        elif g in b.removed_groups:
            why = "deleted"
        else:
            why = "gone"
        deleted.append({"group_id": g, "state_before": a.groups[g].get("state"), "reason": why})
    changed = []
    for g in sorted(ga & gb):
        sa, sb = a.groups[g].get("state"), b.groups[g].get("state")
        ea, eb = a.groups[g].get("generation"), b.groups[g].get("generation")
        if sa != sb or ea != eb:
            changed.append({"group_id": g, "state_before": sa, "state_after": sb,
                            "generation_before": ea, "generation_after": eb})
    return {"created": created, "deleted": deleted, "changed": changed}


def _compaction_notes(a: SnapshotIndex, b: SnapshotIndex) -> list[str]:
    """Where the later snapshot's log had been compacted past the end of the earlier one's log: commits between them
    are not all in it (two states compared say nothing of what happened between them anyway, but an unchanged offset
    there may hide a reset and its repair). The earlier state holds its log up to `log_until`, not its as_of: a
    what-if's early --as-of keeps the records after it."""
    since = a.snapshot.log_until
    out = []
    for p, gap in sorted(log_gaps(b.snapshot.run).items()):
        until = gap.get("compacted_until")
        if since is None or until is None or until >= since.timestamp() * 1000:
            out.append(compaction_note(p, gap))
    return out


def _table(headers: list[str], rows: list[list]) -> str:
    cells = [[("-" if v is None else cell(str(v))) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers)] + [line(r) for r in cells]) + "\n"


def render_text(d: dict) -> str:
    s = d["summary"]
    out = [
        f"Snapshot {d['from']} -> {d['to']}\n",
        f"groups:  {s['groups_created']} created, {s['groups_deleted']} deleted, {s['groups_changed']} changed state or generation\n",
        f"offsets: {s['advanced']} advanced, {s['regressed']} regressed, {s['appeared']} appeared, "
        f"{s['disappeared']} disappeared, {s['expired']} expired, {s['unchanged']} unchanged\n",
    ]
    out.extend(f"note: {note}\n" for note in d.get("notes") or ())
    o, g = d["offsets"], d["groups"]
    if o["regressed"]:
        out.append("\nREGRESSED (committed offset went backwards: a reset or a rewind)\n")
        out.append(_table(["GROUP", "TOPIC", "PARTITION", "BEFORE", "AFTER", "DELTA"],
                          [[r["group_id"], r["topic"], r["partition"], r["before"], r["after"], r["delta"]] for r in o["regressed"]]))
    if g["created"]:
        out.append("\nGROUPS CREATED\n")
        out.append(_table(["GROUP", "TYPE", "STATE"], [[r["group_id"], r["group_type"], r["state"]] for r in g["created"]]))
    if g["deleted"]:
        out.append("\nGROUPS DELETED\n")
        out.append(_table(["GROUP", "STATE-BEFORE", "REASON"], [[r["group_id"], r["state_before"], r["reason"]] for r in g["deleted"]]))
    if g["changed"]:
        out.append("\nGROUPS CHANGED\n")
        out.append(_table(["GROUP", "STATE-BEFORE", "STATE-AFTER", "GENERATION-BEFORE", "GENERATION-AFTER"],
                          [[r["group_id"], r["state_before"], r["state_after"], r["generation_before"], r["generation_after"]]
                           for r in g["changed"]]))
    for key, title in (("appeared", "APPEARED"), ("disappeared", "DISAPPEARED"), ("expired", "EXPIRED")):
        if o[key]:
            col = "AFTER" if key == "appeared" else "BEFORE"
            out.append(f"\nOFFSETS {title}\n")
            out.append(_table(["GROUP", "TOPIC", "PARTITION", col],
                              [[r["group_id"], r["topic"], r["partition"], r["after" if key == "appeared" else "before"]] for r in o[key]]))
    if d["advanced_by_group"]:
        out.append("\nADVANCED (per group)\n")
        out.append(_table(["GROUP", "PARTITIONS", "MESSAGES"],
                          [[r["group_id"], r["partitions"], r["messages"]] for r in d["advanced_by_group"]]))
    return "".join(out)
