"""Burrow's window rules (pipelines/serving/group_status.py), each on a commit history built to show it: the history
that makes a rule fire is judged OK once that rule is gone, so every test here fails if its rule is removed."""
from __future__ import annotations

import pytest

from pipelines.serving.group_status import (Commit, GroupStatus, PartitionStatus, _attach_lags, group_status,
                                            partition_status, window)


def commits(offsets, *, every=10.0, start=0.0, lags=None) -> list[Commit]:
    lags = lags or [None] * len(offsets)
    return [Commit(o, start + i * every, lag) for i, (o, lag) in enumerate(zip(offsets, lags))]


def test_no_lag_is_ok_whatever_the_history():
    stalled = commits([500] * 10)
    assert partition_status(stalled, current_lag=0, now=95) == "OK"
    assert partition_status(stalled, current_lag=-3, now=95) == "OK"  # a commit past an older end offset
    assert partition_status([], current_lag=100, now=95) == "OK"  # nothing committed: nothing to judge


def test_stop_when_the_last_commit_is_older_than_the_window():
    """Commits every 10 s from 0 to 90, then silence: at 200 the gap (110 s) is longer than the window (90 s)."""
    advancing = commits(range(100, 1100, 100))
    assert partition_status(advancing, current_lag=50, now=200) == "STOP"
    assert partition_status(advancing, current_lag=50, now=150) == "OK"  # 60 s gap: still committing
    # a stopped consumer stops with a rewind in its window too: STOP is judged first
    assert partition_status(commits([300, 100, 200]), current_lag=50, now=100) == "STOP"


def test_rewind_until_the_offset_before_it_is_reached_again():
    rewound = commits([100, 200, 300, 150, 160, 170])
    assert partition_status(rewound, current_lag=400, now=55) == "REWIND"
    recovered = commits([100, 200, 300, 150, 250, 310])
    assert partition_status(recovered, current_lag=400, now=55) == "OK"
    # without an end offset the rewind is still known: the log holds offset 300, so the consumer is behind it
    assert partition_status(rewound, current_lag=None, now=55) == "REWIND"
    assert partition_status(recovered, current_lag=None, now=55) == "OK"


def test_stall_when_every_commit_repeats_the_same_offset_behind_the_end():
    stuck = commits([500] * 10, every=5.0)
    assert partition_status(stuck, current_lag=100, now=46) == "STALL"
    # rule 1: lag zero once in the window (the consumer was caught up) -> OK
    caught_up = commits([500] * 10, every=5.0, lags=[None] * 4 + [0] + [None] * 5)
    assert partition_status(caught_up, current_lag=100, now=46) == "OK"
    # without an end offset there is no current lag: a consumer idle at the end of an idle topic looks the same
    assert partition_status(stuck, current_lag=None, now=46) == "OK"


def test_warn_when_the_known_lags_never_go_down():
    rising = commits(range(100, 1100, 100), lags=[None, 50, None, None, 60, None, None, None, None, 80])
    assert partition_status(rising, current_lag=80, now=95) == "WARN"
    falling = commits(range(100, 1100, 100), lags=[None, 80, None, None, 60, None, None, None, None, 70])
    assert partition_status(falling, current_lag=70, now=95) == "OK"
    # one known lag says nothing about the trend (Burrow would say WARN; offline that is every lagging consumer)
    once = commits(range(100, 1100, 100), lags=[None] * 9 + [80])
    assert partition_status(once, current_lag=80, now=95) == "OK"


def test_a_group_is_its_worst_partition():
    def part(status):
        return PartitionStatus("t", 0, status, 1)

    assert group_status("g", [part("OK"), part("WARN"), part("STOP")]).status == "STOP"
    assert group_status("g", [part("REWIND"), part("STALL")]).status == "REWIND"
    assert group_status("g", []).status == "OK"
    g = GroupStatus("g", "WARN", [PartitionStatus("a", 0, "OK", 5), PartitionStatus("a", 1, "WARN", 9),
                                  PartitionStatus("b", 0, "OK", None)])
    assert g.total_lag == 14 and g.lag_known_partitions == 2 and (g.max_lag.topic, g.max_lag.partition) == ("a", 1)


def test_window_keeps_the_last_intervals_and_merges_commits_closer_than_min_distance():
    raw = [(o, t) for o, t in zip(range(0, 40), [i * 0.25 for i in range(40)])]  # 4 commits a second for 10 s
    slots = window(raw)
    assert [c.timestamp for c in slots] == [float(s) for s in range(10)]  # one slot per second, its first time
    assert [c.offset for c in slots] == [3 + 4 * i for i in range(10)]  # each slot holds its last commit
    assert [c.offset for c in window([(o, 10.0 * o) for o in range(25)])] == list(range(15, 25))


def test_lag_at_a_commit_comes_from_the_end_offset_observed_while_it_was_the_latest():
    slots = commits([100, 200, 300], every=100.0)  # at 0, 100, 200
    _attach_lags(slots, [(-50.0, 90), (150.0, 260), (400.0, 330)])
    assert [c.lag for c in slots] == [None, 60, 30]  # before the window: nobody's; 150 s: the commit at 100


def test_a_commit_stamped_before_1970_with_no_record_time_stays_out_of_the_window(tmp_path):
    """A commit whose record has no time (magic 0) and whose commit timestamp is -1 or below (a client's clock a 2.8
    broker stored as sent, KafkaApis; a corrupt record; -2**63, which the history holds as year 1) was placed in
    the window in 1969 (or year 1): the window then spanned decades, so a consumer silent for 210 s after a window
    of 80 s was not STOP, and such a commit between two slots moved the earlier one's offset. Its time is unknown
    (as `commit_age_seconds` reads it), and Burrow's storage drops a commit stamped older than its `expire-group`
    horizon: each group is judged on its normal commits alone."""
    from datetime import datetime, timedelta, timezone

    from pipelines.io.snapshots import DeltaWarehouseReader, pick_snapshot, snapshots_from_runs
    from pipelines.serving.group_status import evaluate_groups
    from pipelines.serving.index import load_index
    from pipelines.times import EPOCH, within_time_ms

    from .warehouse_kit import WarehouseKit, commit, group, offset, ts

    def unknown_time(g, topic, committed, stamped: datetime) -> dict:
        return {**commit(g, topic, 0, committed), "commit_timestamp": stamped, "record_timestamp": None,
                "applied_timestamp": None}

    def normal(g, topic) -> list[dict]:
        return [commit(g, topic, 0, 100 + 10 * i, t=1000 + 10 * i) for i in range(1, 10)]  # 110..190, 1010..1090 s

    minus_one = datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
    year_one = EPOCH + timedelta(milliseconds=within_time_ms(-2**63))  # how the engine stores -2**63 (decoded.py)
    assert year_one.year == 1
    history = (normal("normal", "a")
               + [unknown_time("minus-one", "b", 100, minus_one)] + normal("minus-one", "b")
               + [unknown_time("year-one", "c", 100, year_one)] + normal("year-one", "c")[:4]
               + [unknown_time("year-one", "c", 145, year_one)] + normal("year-one", "c")[4:])
    k = WarehouseKit(tmp_path)
    groups = ("normal", "minus-one", "year-one")
    k.snapshot("s", groups=[group(g, members=1) for g in groups],
               offsets=[offset(g, tp, 0, 190, t=1090) for g, tp in zip(groups, "abc")], commits=history,
               log_end_offsets=[{"topic": tp, "partition": 0, "log_end_offset": 300, "observed_at": ts(1300)}
                                for tp in "abc"],
               as_of=ts(1300))
    reader = DeltaWarehouseReader(tmp_path)
    snaps = snapshots_from_runs(reader.runs())
    statuses = evaluate_groups(reader, load_index(reader, pick_snapshot(snaps, "s")), snaps)
    judged = {g: (s.status, [(c.offset, c.timestamp) for c in s.partitions[0].window]) for g, s in statuses.items()}
    assert judged["normal"][0] == "STOP" and len(judged["normal"][1]) == 9
    assert judged["minus-one"] == judged["year-one"] == judged["normal"], judged


#: a log of offsets partition 0 (`timeless_log`), every record a second apart from T0 unless it has no time
_CUT_S = 10  # `rebuild --until-time`: after every record with a time but the last (at 50 s)


def timeless_log(root) -> dict[str, str]:
    """A log with records of no time (magic 0 messages, as a pre-0.10 broker wrote them) among magic 2 batches:
    `tombstone`'s offsets 100, 200, 300, then an offset tombstone with no time (a magic 0 message has none, and a
    tombstone no value to carry a commit time), then 50, 60, 70; `stamped`'s 100 and 200, then 150 in a magic 0
    message whose value says it was committed at 100 s, then 300 at 50 s. Group name -> id."""
    from pipelines.decoding import batch_writer as bw
    from pipelines.decoding import message_writer as mw
    from tests.badinputs import T0, TOPIC, batch, commit, group_in, write_segment

    tomb, stamped = group_in(0, "timeless-tombstone"), group_in(0, "timeless-stamped")
    value_of_150 = mw.write_offset_commit_value(1, offset=150, metadata="", commit_timestamp=T0 + 100_000,
                                                expire_timestamp=T0 + 200_000)
    records = [batch([commit(tomb, 0, 100, T0 + 1000)], 0), batch([commit(tomb, 0, 200, T0 + 2000)], 1),
               batch([commit(tomb, 0, 300, T0 + 3000)], 2),
               bw.write_record_batch([(mw.write_offset_commit_key(tomb, TOPIC, 0), None, -1)], 3, magic=0),
               batch([commit(tomb, 0, 50, T0 + 4000)], 4), batch([commit(tomb, 0, 60, T0 + 5000)], 5),
               batch([commit(tomb, 0, 70, T0 + 6000)], 6),
               batch([commit(stamped, 0, 100, T0 + 1000)], 7), batch([commit(stamped, 0, 200, T0 + 2000)], 8),
               bw.write_record_batch([(mw.write_offset_commit_key(stamped, TOPIC, 0), value_of_150, -1)], 9, magic=0),
               batch([commit(stamped, 0, 300, T0 + 50_000)], 10)]
    write_segment(root / "__consumer_offsets-0", 0, b"".join(records))
    return {"tombstone": tomb, "stamped": stamped}


def timeless_warehouse(root, no_spark, settings) -> tuple[dict[str, str], int]:
    """`timeless_log` rebuilt in full (snapshot `full`), then cut at `_CUT_S` (`cut`); (groups, the cut in ms)."""
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests.badinputs import T0

    groups = timeless_log(root / "data")
    cut = T0 + _CUT_S * 1000
    for sid, until in (("full", None), ("cut", str(cut))):
        res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(root / "data"),), warehouse=str(root / "wh"),
                                                              snapshot_id=sid, until_time=until))
        assert res.status == "succeeded", res
    return groups, cut


@pytest.fixture(scope="module")
def timeless(tmp_path_factory, no_spark, settings):
    root = tmp_path_factory.mktemp("timeless")
    groups, cut = timeless_warehouse(root, no_spark, settings)
    return root / "wh", groups, cut


def _statuses(wh, snapshot_id: str):
    from pipelines.io.snapshots import DeltaWarehouseReader, pick_snapshot, snapshots_from_runs
    from pipelines.serving.group_status import evaluate_groups
    from pipelines.serving.index import load_index

    reader = DeltaWarehouseReader(wh)
    snaps = snapshots_from_runs(reader.runs())
    return evaluate_groups(reader, load_index(reader, pick_snapshot(snaps, snapshot_id)), snaps)


def test_an_offset_tombstone_with_no_time_deletes_at_its_position(timeless):
    """An offset tombstone whose record has no time (magic 0) deleted the partition's offset in the engine
    (`applied_offset`), and every `rebuild --until-time` holds it; the group status left it out of the history with
    the commits whose time is unknown, so the commits before it stayed in the window and the first commit after it,
    below them, was a REWIND: a false alarm. A deletion counts at its position, time or none, and the commits after
    it start anew."""
    wh, groups, _ = timeless
    st = _statuses(wh, "full")[groups["tombstone"]]
    assert [c.offset for c in st.partitions[0].window] == [50, 60, 70]
    assert st.status == "OK"


def test_a_commit_with_no_record_time_is_in_the_window_of_every_cut(timeless):
    """A commit in a magic 0 message has no record time, so `rebuild --until-time` holds it at any cut, here 150
    after 200 (a rewind), whatever commit time its value gives (100 s, past the 10 s cut). The group status of the cut
    snapshot counted it out by that commit time: it judged a window without it, OK, where the engine holds 150. The
    window now ends at the offset the engine holds, and the rewind is one."""
    from pipelines.io.snapshots import DeltaWarehouseReader

    wh, groups, _ = timeless
    g = groups["stamped"]
    held = {o["group_id"]: o["committed_offset"]
            for o in DeltaWarehouseReader(wh).snapshot_table("loaded_offsets", "cut").to_pylist()}
    assert held[g] == 150  # the engine's own cut
    st = _statuses(wh, "cut")[g]
    assert [c.offset for c in st.partitions[0].window] == [100, 200, 150]
    assert st.status == "REWIND"
    full = _statuses(wh, "full")[g]  # past the cut 300 follows, and the rewind is recovered
    assert full.partitions[0].window[-1].offset == 300 and full.status == "OK"


def test_a_cut_inside_a_batch_holds_none_of_it_in_every_view(tmp_path, no_spark, settings):
    """`rebuild --until-time` between two records of one batch (4.0's append linger gathers writes of several
    groups, each record stamped at its write; a reader sees the batch whole at its end) holds none of the batch: g's
    offset in the cut snapshot is 7, not the 2 its record in the batch committed. The warehouse's history holds the
    whole log (the full run's), so the views of the cut snapshot must find the batch's later record (h's) there:
    the group status' window and the group's commits stop at 7, as the state does."""
    from pipelines.io.snapshots import DeltaWarehouseReader, pick_snapshot, snapshots_from_runs
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from pipelines.serving.index import load_index
    from pipelines.serving.views import group_commits
    from tests.badinputs import T0, batch, commit, group_in, write_segment

    g, h, x = group_in(0, "cut-g"), group_in(0, "cut-h"), group_in(0, "cut-x")
    write_segment(tmp_path / "data" / "__consumer_offsets-0", 0, b"".join([
        batch([commit(g, 0, 7, T0 + 1000)], 0),
        batch([commit(g, 0, 2, T0 + 2000), commit(h, 0, 5, T0 + 2004)], 1),
        batch([commit(x, 0, 9, T0 + 3000)], 3)]))
    wh = tmp_path / "wh"
    for sid, until in (("full", None), ("cut", str(T0 + 2000))):
        res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / "data"),), warehouse=str(wh),
                                                              snapshot_id=sid, until_time=until))
        assert res.status == "succeeded", res
    reader = DeltaWarehouseReader(wh)
    held = {o["group_id"]: o["committed_offset"] for o in reader.snapshot_table("loaded_offsets", "cut").to_pylist()}
    assert held == {g: 7}
    assert [c.offset for c in _statuses(wh, "cut")[g].partitions[0].window] == [7]
    idx = load_index(reader, pick_snapshot(snapshots_from_runs(reader.runs()), "cut"))
    assert [c["committed_offset"] for c in group_commits(reader, idx, g)["commits"]] == [7]
