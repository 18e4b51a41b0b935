"""`offsetlake changes` (and `GET /changes`) on snapshots the real pipeline rebuilt from real Kafka 4.0 logs
(brokerdata, `--semantics modern`), over windows read off each scenario's `timeline.tsv`: what the timeline says
happened in a window (a deletion and its offsets, the broker's expiry tombstones, members joining, groups emptied)
is what `changes` reports, with the member ids the clients were given. Plus a generated log (`offsetlake sample`)
with a consumer's committed offset rewound, reported with the member assigned that partition.

Every expectation comes from timeline.tsv or from the snapshot the sample gave; nothing is hard-coded per scenario
beyond the names the timelines use.
"""
from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobs.cli import main

pytestmark = [pytest.mark.integration]

SCENARIOS = ("deletes", "expiry", "kip848", "classic-basic", "transactions", "compacted")
SECOND = dt.timedelta(seconds=1)


def _utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def timeline(brokerdata: Path, scenario: str) -> list[tuple[dt.datetime, str]]:
    rows = []
    for line in (brokerdata / scenario / "timeline.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        _, utc, event = line.split("\t", 2)
        rows.append((_utc(utc), event))
    return rows


def member_ids(events, group: str) -> set[str]:
    """The member ids the scenario's clients of `group` were given (`… assigned +[…] memberid=X`)."""
    found = set()
    for _, e in events:
        m = re.match(rf"\[{re.escape(group)} worker\] \S+: assigned .* memberid=(\S+)", e)
        if m:
            found.add(m.group(1))
    return found


@pytest.fixture(scope="module")
def warehouses(brokerdata, no_spark, settings, tmp_path_factory) -> dict[str, Path]:
    """Each scenario rebuilt once by the real pipeline (modern semantics, as the broker ran)."""
    from pipelines.rebuild import RebuildRequest, run_rebuild

    out = {}
    for s in SCENARIOS:
        wh = tmp_path_factory.mktemp("changes-" + s)
        res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(brokerdata / s / "data"),), warehouse=str(wh),
                                                          snapshot_id=s, semantics="modern"))
        assert res.status == "succeeded", res
        out[s] = wh
    return out


def changes(wh: Path, start, end, *args: str) -> list[dict]:
    def t(v):
        return v if isinstance(v, str) else v.isoformat()

    r = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--from", t(start), "--to", t(end), "--json",
                                  *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    items = json.loads(r.output)
    keys = [(c["time"] or "", c["offsets_partition"] or -1, c.get("applied_offset", c["record_offset"]) or -1)
            for c in items]  # a change with no time first
    assert keys == sorted(keys), "oldest first"
    return items


def of(items, kind: str, group: str | None = None) -> list[dict]:
    return [c for c in items if c["kind"] == kind and (group is None or c["group_id"] == group)]


def whole(events) -> tuple[dt.datetime, dt.datetime]:
    return events[0][0] - 60 * SECOND, events[-1][0] + 60 * SECOND


@pytest.mark.shared
def test_deletes(warehouses, brokerdata):
    """Each `delete_consumer_groups(...) -> ok` is a group_deleted of that group just before the call returned, with
    a tombstone for every offset the group held; failed deletes delete nothing; the re-created group is created
    again; deleting topic dl-gone tombstones every group's offsets on it, naming the member then assigned."""
    wh, events = warehouses["deletes"], timeline(brokerdata, "deletes")
    everything = changes(wh, *whole(events))
    deleted_ok, failed = [], []
    for t, e in events:
        m = re.match(r"AdminClient\.delete_consumer_groups\(\['(.*)'\]\) -> (\S+)", e)
        if m:
            (deleted_ok if m.group(2) == "ok" else failed).append((t, m.group(1)))
    assert deleted_ok and failed
    for t, gid in deleted_ok:
        window = changes(wh, t - 2 * SECOND, t)
        gone = of(window, "group_deleted", gid)
        assert len(gone) == 1, (gid, window)
        assert t - 2 * SECOND <= _utc(gone[0]["time"]) <= t
        tombstones = of(window, "offset_tombstone", gid)
        assert tombstones and all(c["record_offset"] < gone[0]["record_offset"] for c in tombstones)
        assert {c["offsets_partition"] for c in tombstones} == {gone[0]["offsets_partition"]}
    for _, gid in failed:
        assert not of(everything, "group_deleted", gid) and not of(everything, "offset_tombstone", gid)

    recreated = [gid for t, gid in deleted_ok if any(f"[{gid} worker] n1: subscribe" in e for _, e in events)]
    assert recreated
    for gid in recreated:
        t_del = next(t for t, g in deleted_ok if g == gid)
        t_again = next(t for t, e in events if f"[{gid} worker] n1: subscribe" in e)
        again = [c for c in of(everything, "group_created", gid) if _utc(c["time"]) > t_del]
        assert len(again) == 1 and _utc(again[0]["time"]) <= t_again + 5 * SECOND

    t_topic = next(t for t, e in events if e.startswith("AdminClient.delete_topics(['dl-gone']) -> ok"))
    before = next(e for t, e in events if e.startswith("offsets before delete_topics:"))
    window = changes(wh, t_topic - 2 * SECOND, t_topic + 2 * SECOND)
    reported = {(c["group_id"], c["partition"]) for c in of(window, "offset_tombstone") if c["topic"] == "dl-gone"}
    for gid, offsets in re.findall(r"(\S+)=(\{[^}]*\})", before):
        for tp in json.loads(offsets):
            if tp.startswith("dl-gone["):
                assert (gid, int(tp[len("dl-gone["):-1])) in reported, (gid, tp, reported)
    # the group still alive: each dl-gone partition names the member that was last assigned it
    alive = "dl-topic-del-alive"
    holder = {}
    for t, e in events:
        m = re.match(rf"\[{alive} worker\] \S+: assigned \+\[(.*)\] memberid=(\S+)", e)
        if m and t < t_topic:
            for p in re.findall(r"dl-gone\[(\d+)\]", m.group(1)):
                holder[int(p)] = m.group(2)
    alive_tombstones = [c for c in of(window, "offset_tombstone", alive) if c["topic"] == "dl-gone"]
    assert {c["partition"] for c in alive_tombstones} == set(holder)
    for c in alive_tombstones:
        assert c["member"]["member_id"] == holder[c["partition"]], c
        assert c["member"]["client_id"] and c["member"]["client_host"]


@pytest.mark.shared
def test_expiry_tombstones(warehouses, brokerdata):
    """The scenario watches each group's offsets: every partition that vanished between two watches is an
    offset_tombstone in between (the broker's own expiry), and a group that stopped being listed is deleted
    then; the group that committed just before the stop has nothing expired."""
    wh, events = warehouses["expiry"], timeline(brokerdata, "expiry")
    watches: dict[str, list[tuple[dt.datetime, str | None, set]]] = {}
    for t, e in events:
        m = re.match(r"watch (\S+): state=(\S+)(?: LISTED)? offsets=(\{.*\})$", e)
        if m:
            watches.setdefault(m.group(1), []).append((t, m.group(2), set(json.loads(m.group(3)))))
    assert len(watches) >= 5
    checked = 0
    for gid, seen in watches.items():
        for (t1, _, before), (t2, state2, after) in zip(seen, seen[1:]):
            window = changes(wh, t1, t2, "--group", gid)
            gone = {f"{c['topic']}[{c['partition']}]" for c in of(window, "offset_tombstone")}
            assert gone == before - after, (gid, t1, t2, window)
            checked += len(gone)
            if state2 == "NOT":
                assert len(of(window, "group_deleted")) == 1, (gid, window)
    assert checked >= 8
    fresh = next(t for t, e in events if e.startswith("ex-fresh"))
    from pipelines.io.snapshots import DeltaWarehouseReader

    # the client logs its commit after the broker wrote it: the log (and the snapshot's as-of) may end before
    end = DeltaWarehouseReader(str(wh)).snapshot("expiry").as_of.replace(tzinfo=dt.timezone.utc)
    assert not of(changes(wh, min(fresh, end), fresh + 60 * SECOND), "offset_tombstone")


@pytest.mark.shared
def test_expired_offsets_carry_their_groups_generation(warehouses, brokerdata, no_spark, settings):
    """Cut just before the broker's first expiry tombstone, with the broker's own retention: each offset the
    snapshot's expiry removes is reported at the generation (classic) or group epoch (KIP-848) its group's history
    holds at the cut, as every other change of the group is; a simple group's is 0 (Kafka 4.0 makes it a
    ClassicGroup of generation 0: OffsetMetadataManager.replay, getOrMaybeCreateClassicGroup)."""
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.rebuild import RebuildRequest, run_rebuild

    wh, events = warehouses["expiry"], timeline(brokerdata, "expiry")
    first = min(_utc(c["time"]) for c in of(changes(wh, *whole(events)), "offset_tombstone"))
    cut = first - dt.timedelta(milliseconds=1)
    props = dict(line.split("=", 1) for line in (brokerdata / "expiry" / "broker.properties").read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    res = run_rebuild(no_spark, settings, RebuildRequest(
        inputs=(str(brokerdata / "expiry" / "data"),), warehouse=str(wh), snapshot_id="expiry-cut",
        semantics="modern", until_time=cut.isoformat(), retention_minutes=int(props["offsets.retention.minutes"])))
    assert res.status == "succeeded", res
    expired = of(changes(wh, cut - 60 * SECOND, cut, "--snapshot", "expiry-cut"), "offset_expired")
    history = DeltaWarehouseReader(str(wh)).snapshot_table(
        "group_history", DeltaWarehouseReader(str(wh)).snapshot("expiry-cut"),
        columns=["group_id", "offsets_partition", "record_offset", "generation"]).to_pylist()
    at_cut = {}
    for r in sorted(history, key=lambda r: (r["offsets_partition"], r["record_offset"])):
        at_cut[r["group_id"]] = r["generation"]
    assert {c["group_id"] for c in expired} & set(at_cut), expired  # groups with group records among them
    for c in expired:
        assert c["generation"] == at_cut.get(c["group_id"], 0), c


@pytest.mark.shared
@pytest.mark.parametrize("scenario", ["kip848", "classic-basic"])
def test_rebalances_name_the_members(warehouses, brokerdata, scenario):
    """With a storm threshold of one rebalance a minute, every group's rebalances name every member id its clients
    were given; groups whose clients all closed are emptied, naming members that left."""
    wh, events = warehouses[scenario], timeline(brokerdata, scenario)
    items = changes(wh, *whole(events), "--storm-threshold", "1")
    groups = {m.group(1) for _, e in events for m in [re.match(r"\[(\S+) worker\]", e)] if m}
    named = 0
    for gid in groups:
        expected = member_ids(events, gid)
        if not expected:
            continue
        storms = of(items, "rebalance_storm", gid)
        joined = {m for c in storms for m in c["members_joined"]}
        assert expected <= joined, (gid, expected - joined)
        assert all(c["rebalances"] > 1 and c["generation"] > c["generation_from"] for c in storms)
        named += len(expected)
        for c in of(items, "group_emptied", gid):
            assert c["members_left"] and set(c["members_left"]) <= expected
    assert named >= 5
    # the default threshold (10 a minute) sees no storm in a scenario this calm
    assert not of(changes(wh, *whole(events)), "rebalance_storm")
    if scenario == "kip848":
        t = next(t for t, e in events if e == "AdminClient.delete_consumer_groups(['k-deleted']) -> ok")
        gone = of(changes(wh, t - 2 * SECOND, t), "group_deleted")
        assert [c["group_id"] for c in gone] == ["k-deleted"] and gone[0]["group_type"] == "consumer"


@pytest.mark.shared
def test_transactions_count_by_outcome(warehouses, brokerdata):
    """Aborted and still-open transactional offsets never took effect: no change reports them, from either side."""
    wh, events = warehouses["transactions"], timeline(brokerdata, "transactions")
    items = changes(wh, *whole(events))
    never = set()
    for _, e in events:
        m = re.match(r"\[tx-\w+ worker\] == step \d+: tx-prod-\d aborts \{(.*)\}", e)
        if m:
            never |= {int(v) for v in re.findall(r"\d+:(\d+)", m.group(1))}
        m = re.match(r".*send_offsets_to_transaction\((tx-hang): .*\); transaction left OPEN", e)
        if m:
            never |= {int(v) for v in re.findall(r"@(\d+)", e)}
    assert never >= {20, 33}
    shown = {c.get(k) for c in items if c["kind"].startswith("offset_") for k in ("committed_offset", "previous_offset")}
    assert not (shown & never), (shown & never, items)
    # a transactional offset a plain commit overtook before its COMMIT never took effect: nothing went back from it
    for c in of(items, "offset_regressed"):
        assert c["previous_offset"] not in never, c


@pytest.mark.shared
def test_a_compacted_log_says_where_commits_are_missing(warehouses, brokerdata):
    """The broker's log cleaner compacted this log: over a window reaching into the compacted part, `changes` says
    which offsets partitions miss commits and from which offset on their log is whole, as kafka-dump-log shows it;
    a window after it says nothing of it."""
    from tests.frames.test_tally import dump_log_gaps

    wh, events = warehouses["compacted"], timeline(brokerdata, "compacted")
    want = {int(d.stem.rsplit("-", 1)[1]): g for d in sorted((brokerdata / "compacted" / "dump_log").glob("*.txt"))
            if (g := dump_log_gaps(d)) is not None}
    assert want
    items = changes(wh, *whole(events))
    got = {c["offsets_partition"]: c for c in of(items, "log_compacted")}
    assert {p: c["compacted_below"] for p, c in got.items()} == {p: g["compacted_below"] for p, g in want.items()}
    for p, c in got.items():
        assert f"compacted before offset {want[p]['compacted_below']}" in c["note"]
    text = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--from", whole(events)[0].isoformat(),
                                     "--to", whole(events)[1].isoformat()]).output
    assert "intermediate commits are not in the log" in text
    last = max(g["compacted_until"] for g in want.values())
    from pipelines.io.snapshots import DeltaWarehouseReader

    # from the first millisecond after it up to the snapshot's as-of (a window after that is refused)
    as_of = DeltaWarehouseReader(str(wh)).snapshot("compacted").as_of.replace(tzinfo=dt.timezone.utc)
    start = dt.datetime.fromtimestamp(last // 1000, dt.timezone.utc) + dt.timedelta(milliseconds=last % 1000 + 1)
    assert start <= as_of
    assert not of(changes(wh, start, whole(events)[1]), "log_compacted")


def _reset_segment(partition_dir: Path, group: str, topic: str, partition: int, offset: int, ts_ms: int) -> None:
    """Append one OffsetCommit record (key v1, value v3), as a consumer's reset would write it, in a new segment."""
    from pipelines.decoding.log_end_offsets import segment_log_end_offset
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.message_writer import write_offset_commit_key, write_offset_commit_value

    base = segment_log_end_offset(partition_dir)
    key = write_offset_commit_key(group, topic, partition)
    value = write_offset_commit_value(3, offset=offset, commit_timestamp=ts_ms)
    (partition_dir / f"{base:020d}.log").write_bytes(write_record_batch([(key, value, ts_ms)], base))


def test_sample_reset_backwards_names_the_member(no_spark, settings, tmp_path):
    """A generated log, then a commit that rewinds a Stable group's partition: `changes` over the minute after the
    log's end reports that one regression, from the committed offset to the new one, with the member the group's
    last generation assigned that partition (as the snapshot's `group_members` says), and nothing else."""
    from pipelines.coordinator.partitioner import partition_for
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from simulator import generate_sample

    dump, wh = tmp_path / "dump", tmp_path / "wh"
    generate_sample(dump, records=6000, groups=30, partitions=4, seed=11, segment_bytes=64 * 1024)
    res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(dump),), warehouse=str(wh), snapshot_id="before"))
    assert res.status == "succeeded", res
    reader = DeltaWarehouseReader(str(wh))
    members = reader.snapshot_table("group_members", "before").to_pylist()
    groups = {g["group_id"]: g for g in reader.snapshot_table("loaded_groups", "before").to_pylist()}
    offsets = {(o["group_id"], o["topic"], o["partition"]): o["committed_offset"]
               for o in reader.snapshot_table("loaded_offsets", "before").to_pylist()}
    pick = next((m, tp) for m in members if groups[m["group_id"]]["group_type"] == "classic"
                and groups[m["group_id"]]["state"] == "Stable"
                for tp in (m["assigned_partitions"] or []) if (m["group_id"], tp["topic"], tp["partition"]) in offsets
                and offsets[(m["group_id"], tp["topic"], tp["partition"])] > 100)
    m, tp = pick
    gid = m["group_id"]
    was = offsets[(gid, tp["topic"], tp["partition"])]
    as_of = reader.snapshot("before").as_of
    at = as_of + dt.timedelta(seconds=30)
    n = len(list(dump.glob("__consumer_offsets-*")))
    _reset_segment(dump / f"__consumer_offsets-{partition_for(gid, n)}", gid, tp["topic"], tp["partition"], was - 100,
                   int(at.timestamp() * 1000))
    res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(dump),), warehouse=str(wh), snapshot_id="after"))
    assert res.status == "succeeded", res

    items = changes(wh, as_of + SECOND, at + 60 * SECOND, "--snapshot", "after")
    assert [c["kind"] for c in items] == ["offset_regressed"], items
    c = items[0]
    assert (c["group_id"], c["topic"], c["partition"]) == (gid, tp["topic"], tp["partition"])
    assert (c["previous_offset"], c["committed_offset"], c["delta"]) == (was, was - 100, -100)
    assert _utc(c["time"]) == at.replace(microsecond=at.microsecond // 1000 * 1000)
    assert c["member"] == {k: m[k] for k in ("member_id", "group_instance_id", "client_id", "client_host")}
    assert c["generation"] == groups[gid]["generation"]
    # the same change as text, one line; and the API answers the same list
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--snapshot", "after", "--from",
                                  str(int((as_of + SECOND).timestamp() * 1000)), "--to", (at + 60 * SECOND).isoformat()])
    assert r.exit_code == 0 and len(r.output.splitlines()) == 1
    assert "offset_regressed" in r.output and m["member_id"] in r.output and f"{was} -> {was - 100}" in r.output

    from fastapi.testclient import TestClient

    from jobs.api import create_app

    with TestClient(create_app(reader)) as client:
        body = client.get("/changes", params={"from": (as_of + SECOND).isoformat(), "to": (at + 60 * SECOND).isoformat(),
                                              "snapshot": "after", "group": gid}).json()
        assert body["changes"] == items and body["snapshot_id"] == "after"
        assert client.get("/changes", params={"from": "yesterday", "to": "1"}).status_code == 400
        assert client.get("/changes", params={"from": "1795294330000", "to": "1795294320000"}).status_code == 400


@pytest.mark.parametrize("args, message", [
    (["--from", "noon", "--to", "1795294320000"], "--from: 'noon' is not an ISO-8601 time"),
    (["--from", "1795294320000", "--to", "1"], "--to: '1' has too few digits for epoch milliseconds"),
    (["--from", "2026-11-21T14:10:00Z", "--to", "2026-11-21T14:00:00Z"], "the window ends (2026-11-21T14:00:00"),
    (["--from", "1795294320000", "--to", "1795294330000", "--group-regex", "("], "--group-regex '('"),
    (["--from", "1795294320000", "--to", "1795294330000", "--group", "a", "--group-regex", "a"], "not both"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(tmp_path), *args])
    assert r.exit_code == 2 and message in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_a_window_after_the_snapshot_s_as_of_is_refused(story):
    """A window past the snapshot's as-of (a stale nightly, an incident after it) answered nothing, exit 0: "nothing
    changed", when the snapshot cannot know. Now one line naming both times, exit 2 (the API: a 400)."""
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    r = CliRunner().invoke(main, ["changes", "--warehouse", str(story), "--from", "2026-01-01T00:00:40.001Z",
                                  "--to", "2026-01-02"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert r.stderr.startswith("error: --from 2026-01-01T00:00:40.001Z is after snapshot s2's as-of "
                               "2026-01-01T00:00:40.000Z: its history ends there"), r.stderr
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(story), "--from", "2026-01-01T00:00:40Z",
                                  "--to", "2026-01-02"])
    assert r.exit_code != 2 or "is after snapshot" not in r.stderr, r.output
    with TestClient(create_app(DeltaWarehouseReader(story), refresh_interval=0)) as client:
        r = client.get("/changes", params={"from": "2026-01-01T00:00:41Z", "to": "2026-01-02"})
        assert r.status_code == 400 and r.json()["detail"].startswith("from 2026-01-01T00:00:41.000Z is after"), r.text


def test_an_older_snapshot_s_views_are_its_own_run_s_history(no_spark, settings, tmp_path):
    """`offset_commits` is one table for every run. Snapshot `first` read broker 1's offsets partition as copied at
    T0+2 s (g rewound from 200 to 150) and broker 2's as copied at T0+8 s (h rewound from 300 to 100), so its log
    ends at T0+8 s; `second` read broker 1's copied later, holding g's rewind to 50 at T0+5 s, inside first's
    window. Every view of first reads the history at the version first's run pinned (`runs.table_versions`), as
    its restore plan does: `changes`, `GET /changes`, `restore-plan --damaged-since`, the group's commits and its
    status windows show first's offset of g (150, as describe does), never the rewind first did not read."""
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests import badinputs as bi

    g, h, k = bi.group_in(1, "g"), bi.group_in(2, "h"), bi.group_in(1, "k")
    g_log = [bi.batch([bi.commit(gid, 0, o, bi.T0 + t)], i)
             for i, (gid, o, t) in enumerate(((g, 200, 1000), (g, 150, 2000), (g, 50, 5000), (k, 7, 6000)))]
    bi.write_segment(tmp_path / "broker-1-early" / "__consumer_offsets-1", 0, b"".join(g_log[:2]))
    bi.write_segment(tmp_path / "broker-1-late" / "__consumer_offsets-1", 0, b"".join(g_log))
    h_log = [bi.batch([bi.commit(h, 0, o, bi.T0 + t)], i) for i, (o, t) in enumerate(((300, 3000), (100, 8000)))]
    bi.write_segment(tmp_path / "broker-2" / "__consumer_offsets-2", 0, b"".join(h_log))
    wh = tmp_path / "wh"
    for sid, broker_1 in (("first", "broker-1-early"), ("second", "broker-1-late")):
        res = run_rebuild(no_spark, settings, RebuildRequest(
            inputs=(str(tmp_path / broker_1), str(tmp_path / "broker-2")), warehouse=str(wh), snapshot_id=sid,
            num_partitions=50))
        assert res.status == "succeeded", res

    def regressed(snapshot: str) -> list[tuple]:
        return [(c["kind"], c["group_id"], c["previous_offset"], c["committed_offset"])
                for c in changes(wh, str(bi.T0), str(bi.T0 + 8000), "--snapshot", snapshot)]

    assert regressed("second") == [("offset_regressed", g, 200, 150), ("offset_regressed", g, 150, 50),
                                   ("offset_regressed", h, 300, 100)]
    assert regressed("first") == [("offset_regressed", g, 200, 150), ("offset_regressed", h, 300, 100)]
    for selection in (["--group", k], ["--group-regex", "^k-"]):  # k committed in second's log alone
        r = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--snapshot", "first", "--from",
                                      str(bi.T0), "--to", str(bi.T0 + 8000), *selection])
        assert r.exit_code == 2 and "snapshot 'first'" in r.output, r.output
    out = tmp_path / "plan"
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(wh), "--snapshot", "first", "--as-of",
                                  str(bi.T0 + 3000), "--damaged-since", str(bi.T0 + 3000), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "index.json").read_text()) == {f"{h}.csv": h}  # g's one damage was at T0+2 s
    assert (out / f"{h}.csv").read_text() == f"{bi.TOPIC},0,300\n"
    r = CliRunner().invoke(main, ["sql", "--warehouse", str(wh), "--snapshot", "first", "--format", "csv",
                                  f"SELECT committed_offset FROM offset_commits WHERE group_id = '{g}' "
                                  "ORDER BY record_offset"])
    assert r.exit_code == 0, r.output
    assert r.output.split() == ["committed_offset", "200", "150"]

    with TestClient(create_app(DeltaWarehouseReader(str(wh)))) as client:
        def get(route: str, **params) -> dict:
            r = client.get(route, params={"snapshot": "first", **params})
            assert r.status_code == 200, r.text
            return r.json()

        body = get("/changes", **{"from": str(bi.T0 + 3000), "to": str(bi.T0 + 8000)})
        assert [(c["kind"], c["group_id"]) for c in body["changes"]] == [("offset_regressed", h)]
        assert [o["committed_offset"] for o in get(f"/groups/{g}/offsets")] == [150]
        assert [c["committed_offset"] for c in get(f"/groups/{g}/commits")["commits"]] == [200, 150]
        status = get("/status/groups", group=g)
        assert [w["offset"] for w in status["partition_status"][0]["window"]] == [200, 150]


@pytest.fixture(scope="module")
def timeless(tmp_path_factory, no_spark, settings):
    """`test_group_status.timeless_log`: records of no time (magic 0) among timed ones, rebuilt in full (`full`) and
    cut by `--until-time` (`cut`)."""
    from tests.serving.test_group_status import timeless_warehouse

    root = tmp_path_factory.mktemp("timeless")
    groups, cut = timeless_warehouse(root, no_spark, settings)
    return root / "wh", groups, cut


def test_an_offset_tombstone_with_no_time_is_a_change(timeless):
    """An offset tombstone with no time (magic 0: no record time, and no value to give a commit time) that deleted
    300 took effect in the engine, at its position, and every `rebuild --until-time` holds it: `changes` left it out
    of every window. It is in each window whose end holds the offset it deleted, with no time."""
    from tests.badinputs import T0

    wh, groups, _ = timeless
    g = groups["tombstone"]
    items = changes(wh, str(T0), str(T0 + 60_000), "--snapshot", "full", "--group", g)
    assert [(c["kind"], c["time"], c["previous_offset"], c["record_offset"]) for c in items] == \
        [("offset_tombstone", None, 300, 3)], items  # and 50 after it starts anew: no regression


def test_a_what_if_cut_lists_the_commits_the_engine_holds(timeless):
    """`changes` of a snapshot cut by `--until-time` at 10 s counted a commit out by the commit time its value gives
    (100 s) where its record has none (magic 0), though the engine's cut holds it: 150 after 200 was no change, and
    the engine's offset then is 150. It is the regression the engine's state shows, at the time its value gives."""
    from pipelines.io.snapshots import DeltaWarehouseReader
    from tests.badinputs import T0

    wh, groups, cut = timeless
    g = groups["stamped"]
    held = {o["group_id"]: o["committed_offset"]
            for o in DeltaWarehouseReader(wh).snapshot_table("loaded_offsets", "cut").to_pylist()}
    items = changes(wh, str(T0), str(cut), "--snapshot", "cut", "--group", g)
    assert [(c["kind"], c["previous_offset"], c["committed_offset"]) for c in items] == \
        [("offset_regressed", 200, held[g])], items
    assert items[0]["time"] == "2026-11-01T00:01:40.000Z"  # T0 + 100 s: the value's commit time


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_window_that_ends_inside_a_batch_sees_none_of_it(semantics, tmp_path):
    """A batch of several writes (Kafka 4.0's append linger: CoordinatorRuntime.maybeFlushCurrentBatch, each record
    stamped at its write) was seen whole at its end or not at all (CoordinatorReadEvent.run reads at the last
    committed offset), and `rebuild --until-time` cuts so (`decoded.batch_times`). g's regression, in a batch with h's
    later commit (h's group and g's share the batch, not the selection), is no change of a window that ends at g's
    record: the engine's state there still holds g's earlier offset. At the batch's end it is."""
    from tests.coordinator.rowkit import Log
    from tests.serving.test_restore_plan import _cut_replay, _engine_warehouse

    log = Log()
    log.commit("g", "t", 0, 7)
    with log.batch():
        inside = log.commit("g", "t", 0, 2)["timestamp"]
        end = log.commit("h", "t", 0, 5)["timestamp"]
    wh = _engine_warehouse(tmp_path / "wh", log, semantics)
    start = dt.datetime.fromtimestamp(log.rows[0]["timestamp"] / 1000, dt.timezone.utc)

    def at(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)

    assert inside < end and _cut_replay(log.rows, semantics, inside)["g"] == {("t", 0, 7)}
    assert not of(changes(wh, start, at(inside), "--group", "g"), "offset_regressed")
    assert not of(changes(wh, start, at(inside)), "offset_regressed")
    assert _cut_replay(log.rows, semantics, end)["g"] == {("t", 0, 2)}
    assert [(c["previous_offset"], c["committed_offset"])
            for c in of(changes(wh, start, at(end), "--group", "g"), "offset_regressed")] == [(7, 2)]


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_group_change_inside_a_batch_is_in_the_window_that_starts_before_the_batch_ends(semantics, tmp_path):
    """g's deletion, in a batch with h's later commit, was seen at the batch's end (the engine's `batch_timestamp`,
    as `rebuild --until-time` cuts): a window that ends inside the batch does not list it, and the window that
    starts inside it does, at its own record's time. Placed by that time alone it was in neither window."""
    from tests.coordinator.rowkit import Log
    from tests.serving.test_restore_plan import _engine_warehouse

    log = Log()
    log.group("g", [])
    log.commit("g", "t", 0, 7)
    log.ts += 1000
    with log.batch():
        gone = log.group_tombstone("g")["timestamp"]
        log.ts += 4  # the linger's later write
        end = log.commit("h", "t", 0, 5)["timestamp"]
    windows = _meeting_at(_engine_warehouse(tmp_path / "wh", log, semantics), log, gone, end)
    assert [[c["time"] for c in of(w, "group_deleted")] for w in windows] == [[], [_at(gone).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")]]


def _at(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def _meeting_at(wh: Path, log, split: int, end: int) -> list[list[dict]]:
    """g's changes in two windows that meet inside a batch: [the log's first record, `split`] and
    [`split` + 1 ms, `end`]."""
    first = _at(log.rows[0]["timestamp"])
    assert end > split + 1
    return [changes(wh, first, _at(split), "--group", "g"), changes(wh, _at(split + 1), _at(end), "--group", "g")]


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_change_inside_a_batch_is_in_the_window_that_starts_before_the_batch_ends(semantics, tmp_path):
    """Two windows that meet inside a batch, [first record, g's record] and [g's record + 1 ms, the batch's end]: g's
    regression, seen at the batch's end (as `rebuild --until-time` cuts), is in the second, not lost between the
    two because its own record's time comes before that window starts."""
    from tests.coordinator.rowkit import Log
    from tests.serving.test_restore_plan import _engine_warehouse

    log = Log()
    log.commit("g", "t", 0, 7)
    with log.batch():
        inside = log.commit("g", "t", 0, 2)["timestamp"]
        log.ts += 4  # the linger's later write
        end = log.commit("h", "t", 0, 5)["timestamp"]
    windows = _meeting_at(_engine_warehouse(tmp_path / "wh", log, semantics), log, inside, end)
    assert [[(c["previous_offset"], c["committed_offset"]) for c in of(w, "offset_regressed")] for w in windows] == \
        [[], [(7, 2)]]
