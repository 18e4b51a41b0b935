"""Rows built to break Delta file statistics, and the predicates that probe them.

Strings longer than Delta's 32-character statistics prefix that share that prefix (and differ right after it by a
character below, at and above the ASCII DEL / U+FFFF / U+10FFFF tie-breakers), CJK and emoji ids (a surrogate pair
straddling the 32nd UTF-16 unit), timestamps with sub-millisecond parts, nulls, booleans and numbers at the edges.
"""
from __future__ import annotations

import bisect
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipelines.io.delta import type_name
from schemas.tables import TABLES

UTC = dt.timezone.utc
PROBED = ("loaded_offsets", "loaded_groups")  # the tables filled with these rows
T0 = dt.datetime(2024, 5, 17, 8, 30, 0, tzinfo=UTC)
P32 = "alerts-etl-consumer-group-prod-e"  # exactly 32 characters
assert len(P32) == 32

GROUP_IDS = [
    "a", "alerts", "alerts-etl-7", "alerts-etl-76", "alerts-etl-760", P32[:31], P32,
    P32 + "u-west-1-orders", P32 + "u-west-2-orders", P32 + "a", P32 + "~~~", P32 + "\x7f", P32 + "\x7f\x7fb",
    P32 + "ü-north", P32 + "\uffff" + "q", P32 + "\U0010ffff" + "a", P32 + "\U0010fffe" + "a", P32 + "\U00100000",
    P32 + "\U0010ffff" * 3 + "z",
    "b" * 31 + "😀", "b" * 31 + "😀" + "tail", "b" * 31 + "x" + "😀",
    "消费者组" * 8, "消费者组" * 8 + "乙", "消费者组" * 10,
    "🚀" * 16, "🚀" * 17, "🚀" * 33 + "x",
    "zz-last-" + "z" * 40,
]
STATES = ["Empty", "Stable", "PreparingRebalance", "Dead", "CompletingRebalance"]
TOPICS = ["orders", "orders-eu-west-1-very-long-topic-name-v2", "orders-eu-west-1-very-long-topic-name-v3", "支付"]
SUBMS = [0, 1, 999, 1000, 123456, 999999, 500500]  # microsecond parts: exact ms, just above, just below


def _ts(k: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=k * 7, microseconds=SUBMS[k % len(SUBMS)])


def offsets_rows(sid: int, groups: list[str]) -> list[dict]:
    """loaded_offsets rows of snapshot number `sid` (record_offset unique across snapshots)."""
    rows = []
    for gi, g in enumerate(groups):
        for j, topic in enumerate(TOPICS[: 1 + (gi + sid) % len(TOPICS)]):
            k = len(rows)
            rows.append({
                "group_id": g, "topic": topic, "partition": (gi * 3 + j) % 7,
                "offsets_partition": None if k % 9 == 4 else (gi % 50),
                "committed_offset": [0, 1, 2**31, 2**40 + k, -1][k % 5] + sid,
                "leader_epoch": None if k % 4 == 1 else [-1, 0, 2**31 - 1, 5][k % 4],
                "metadata": None if k % 3 == 0 else ("m" * (20 + k % 30) + str(k)),
                "commit_timestamp": _ts(k + 11 * sid),
                "expire_timestamp": None if k % 2 else _ts(k + 100),
                "record_offset": 100_000 * sid + k,
                "has_group_metadata": [True, False, None][k % 3],
                "topic_id": None if k % 5 == 2 else f"{g[:8]}-topic-id-{k:04d}",
                "producer_id": [-1, 7, 2**62][k % 3],
            })
    return rows


def groups_rows(sid: int, groups: list[str]) -> list[dict]:
    rows = []
    for gi, g in enumerate(groups):
        k = gi
        rows.append({
            "group_id": g, "offsets_partition": gi % 50, "group_type": ["classic", "consumer"][gi % 2],
            "protocol_type": None if gi % 4 == 3 else "consumer",
            "generation": gi * (sid + 1), "protocol": None if gi % 5 == 0 else "range",
            "leader": None if gi % 6 == 5 else f"consumer-{g}-{gi}-0f5e1a2b-3c4d-4e5f-8a9b-{gi:012d}",
            "state": STATES[(gi + sid) % len(STATES)],
            "current_state_timestamp": None if gi % 7 == 6 else _ts(gi + 3 * sid),
            "member_count": gi % 4, "record_offset": 100_000 * sid + k,
            "assignment_epoch": None if gi % 2 == 0 else gi,
            "subscribed_topics": None if gi % 3 == 0 else TOPICS[: 1 + gi % 3],
            "is_simple": [True, False, None][gi % 3], "expected_offsets_partition": gi % 50,
            "unresolved_topic_ids": None if gi % 2 else 0,
        })
    return rows


# Which groups each snapshot holds: overlapping, not identical.
SNAPSHOT_GROUPS = {
    "s1": GROUP_IDS,
    "s2": GROUP_IDS[::2] + [P32 + "u-west-3-orders", "消费者组" * 8 + "丙"],
    "s3": GROUP_IDS[5:20],
}


def table_rows(table: str) -> dict[str, list[dict]]:
    """Rows per snapshot id (without the snapshot_id column)."""
    make = {"loaded_offsets": offsets_rows, "loaded_groups": groups_rows}[table]
    return {s: make(i + 1, g) for i, (s, g) in enumerate(SNAPSHOT_GROUPS.items())}


def arrow_table(table: str, tuples: list[tuple]) -> pa.Table:
    """Rows in contract order as the Arrow table the in-process write path hands the warehouse."""
    names = TABLES[table].names
    return pa.Table.from_pylist([dict(zip(names, t)) for t in tuples], schema=TABLES[table])


def as_tuples(table: str, rows: list[dict], snapshot_id: str) -> list[tuple]:
    return [tuple(snapshot_id if f.name == "snapshot_id" else r[f.name] for f in TABLES[table]) for r in rows]


# ---------------------------------------------------------------- predicates
SCALAR = ("string", "integer", "long", "boolean", "timestamp")


def _probes(kind: str, values: list, bounds=None) -> list[tuple[str, Any]]:
    """(op, operand) pairs around the values a column holds. `bounds` (an integer or string column's file minima and
    maxima, as the table's statistics give them), when given, narrows the probes of that column: a file is kept or
    skipped by where the operand lies against its bounds, so operands between the same two bounds take the same
    decisions. An integer column is probed at each bound and either side of it; a string column (whose bounds may be
    truncated, held by no row) at the held values either side of each bound, and at the bound when a row holds it;
    both at every fourth value they hold. Without `bounds`, every value is probed."""
    vals = sorted(set(values))
    out: list[tuple[str, Any]] = [("is_null", None), ("not_null", None)]
    if kind == "boolean":
        return out + [("=", True), ("=", False), ("in", (True,))]
    if kind == "timestamp":
        probes = set()
        for v in vals[:: max(1, len(vals) // 8)] + vals[-2:]:
            ms = v.replace(microsecond=v.microsecond // 1000 * 1000)
            probes |= {v, v + dt.timedelta(microseconds=1), v - dt.timedelta(microseconds=1), ms,
                       ms + dt.timedelta(milliseconds=1)}
        vals = sorted(probes)
    elif kind in ("integer", "long"):
        lo, hi = (-2**31, 2**31 - 1) if kind == "integer" else (-2**63, 2**63 - 1)
        ends = {max(lo, vals[0] - 1), min(hi, vals[-1] + 1)}
        if bounds is not None:
            vals = set(vals[::4]) | {vals[-1]} | {b + d for b in bounds for d in (-1, 0, 1) if lo <= b + d <= hi}
        vals = sorted(set(vals) | ends)
    elif kind == "string" and bounds is not None:
        # a string statistic may be a truncated prefix, held by no row: the values held either side of it
        near = {v for b in bounds for i in [bisect.bisect_left(vals, b)] for v in vals[max(0, i - 1):i + 2]}
        vals = sorted(set(vals[::4]) | {vals[-1]} | near)
    for v in vals:
        out += [("=", v), (">=", v), ("<=", v)]
    out += [(">", vals[-1]), ("<", vals[0]), (">", vals[len(vals) // 2]), ("<", vals[len(vals) // 2])]
    if len(vals) > 1:
        out.append(("in", tuple(vals[1::5][:4])))
    if kind == "string":
        prefixes = {v[:n] for v in vals for n in (1, 6, 13, 31, 32, 33) if len(v) > n}
        out += [("prefix", p) for p in sorted(prefixes)]
    return out


def predicates(table: str, rows: list[dict], bounds: dict[str, set] | None = None) -> list[tuple[str, str, Any]]:
    """The probes of every scalar column; `bounds` (column -> its files' minima and maxima, `file_bounds`) narrows
    an integer or string column's to its files' bounds and a sample of its values (`_probes`)."""
    preds = []
    for f in TABLES[table]:
        kind = type_name(f.type)
        if kind not in SCALAR or f.name == "snapshot_id":
            continue
        values = [r[f.name] for r in rows if r[f.name] is not None]
        col_bounds = None if bounds is None or kind not in ("integer", "long", "string") else bounds.get(f.name, set())
        preds += [(f.name, op, v) for op, v in _probes(kind, values, col_bounds)]
    return preds


def holds(row: dict, pred: tuple[str, str, Any]) -> bool:
    """The predicate in plain Python (SQL semantics: a comparison with null is not true)."""
    col, op, v = pred
    x = row[col]
    if op == "is_null":
        return x is None
    if x is None:
        return False
    return {
        "not_null": lambda: True,
        "=": lambda: x == v, ">=": lambda: x >= v, "<=": lambda: x <= v, ">": lambda: x > v, "<": lambda: x < v,
        "in": lambda: x in v, "prefix": lambda: x.startswith(v),
    }[op]()


def sql_literal(v) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, dt.datetime):
        return f"TIMESTAMPTZ '{v.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"
    return "'" + str(v).replace("'", "''") + "'"


def sql_condition(pred, qualifier: str = "") -> str:
    col, op, v = pred
    c = f'{qualifier}"{col}"'
    if op == "is_null":
        return f"{c} IS NULL"
    if op == "not_null":
        return f"{c} IS NOT NULL"
    if op == "in":
        return f"{c} IN ({', '.join(sql_literal(x) for x in v)})"
    if op == "prefix":  # LIKE is what users write; DuckDB turns it into a range it pushes down
        if "%" in v or "_" in v:
            return f"starts_with({c}, {sql_literal(v)})"
        return f"{c} LIKE {sql_literal(v + '%')}"
    return f"{c} {op} {sql_literal(v)}"


def active_stats(table_path) -> dict[str, dict]:
    """path -> stats of the table's active files, replayed from the JSON commits of its log."""
    out: dict[str, dict] = {}
    for commit in sorted(Path(table_path, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                out[action["add"]["path"]] = json.loads(action["add"]["stats"])
            elif "remove" in action:
                out.pop(action["remove"]["path"], None)
    return out


def file_bounds(table_path) -> dict[str, set]:
    """Column -> every minimum and maximum the statistics of the table's active files give it."""
    out: dict[str, set] = {}
    for stats in active_stats(table_path).values():
        for key in ("minValues", "maxValues"):
            for col, v in stats.get(key, {}).items():
                out.setdefault(col, set()).add(v)
    return out
