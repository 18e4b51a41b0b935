"""Every check fails on a table broken in exactly its way, and only that check; the clean snapshot passes them all.

Each breaker mutates one input, then validates every suite that reads that input (`SuiteSpec.inputs`), so a
cascade into another table's suite would show up as an extra failure.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from .validation_rows import AS_OF_MS, N, UTC, clean_rows, p, tp
from pipelines.validation.suites import KEYS, build_suites


SKEW_MINUTES = 60  # conf/base validation.timestamp_skew_minutes (the ci env keeps it)
SPECS = build_suites(as_of_ms=AS_OF_MS, num_partitions=N, timestamp_skew_minutes=SKEW_MINUTES)
ALL_IDS = {s.check_id(c) for s in SPECS for c in s.checks}
DERIVED = {s.name for s in SPECS if s.derived}
UPPER = datetime.fromtimestamp(AS_OF_MS / 1000, tz=UTC) + timedelta(minutes=SKEW_MINUTES)


class Breaker:
    """Break `table` in `rows` with `mutate`; `check_id` must then be the only failed check."""

    def __init__(self, check_id: str, variant: str, table: str, mutate: Callable[[dict], None]):
        self.check_id, self.variant, self.table, self.mutate = check_id, variant, table, mutate

    @property
    def test_id(self) -> str:
        return f"{self.check_id}[{self.variant}]"


def _set(table: str, column: str, value) -> Callable[[dict], None]:
    def mutate(rows):
        rows[table][0][column] = value

    return mutate


def _generic(suite, check) -> list[Breaker]:
    cid, t = suite.check_id(check), suite.table
    if check.kind == "not_null":
        return [Breaker(cid, "null", t, _set(t, check.column, None))]
    if check.kind == "unique":
        return [Breaker(cid, "duplicate key", t, lambda rows: rows[t].append(copy.deepcopy(rows[t][0])))]
    if check.kind == "at_least":
        return [Breaker(cid, f"{check.minimum - 1}", t, _set(t, check.column, check.minimum - 1))]
    if check.kind in ("ts_range", "ts_min"):
        out = [Breaker(cid, "2009", t, _set(t, check.column, datetime(2009, 6, 1, tzinfo=UTC)))]
        if check.kind == "ts_range":
            out.append(Breaker(cid, "future", t, _set(t, check.column, UPPER + timedelta(minutes=5))))
        return out
    if check.kind == "partition":
        def misplace(rows):
            rows[t][0]["offsets_partition"] = (rows[t][0]["offsets_partition"] + N // 2) % N

        return [Breaker(cid, "misplaced group", t, misplace),
                Breaker(cid, "null offsets_partition", t, _set(t, "offsets_partition", None))]
    return []


def _assigned_unsubscribed(rows):
    m = copy.deepcopy(rows["group_members"][1])  # g-classic, a classic consumer group
    m.update(member_id="m3", subscribed_topics=["orders"], assigned_partitions=[tp("orders", 1), tp("payments", 0)])
    rows["group_members"].append(m)


def _kip848_assigned_unsubscribed(rows):
    m = copy.deepcopy(rows["group_members"][3])  # g-kip848, Stable, subscribes by name
    m.update(member_id="k9", subscribed_topics=["orders"], assigned_partitions=[tp("payments", 2)])
    rows["group_members"].append(m)


def _member_of_ghost(rows):
    m = copy.deepcopy(rows["group_members"][0])
    m.update(group_id="g-ghost", offsets_partition=p("g-ghost"))
    rows["group_members"].append(m)


def _removed_and_loaded(rows):
    g = copy.deepcopy(rows["removed_groups"][0])
    g.update(group_id="g-connect", offsets_partition=p("g-connect"))
    rows["removed_groups"].append(g)


def _empty_offset_not_served(rows):
    o = copy.deepcopy(rows["empty_group_offsets"][0])
    o.update(group_id="simple-2", offsets_partition=p("simple-2"), partition=1)
    rows["empty_group_offsets"].append(o)


def _marker_after_pending(rows):
    pend = rows["pending_offsets"][0]
    rows["markers"].append({"offsets_partition": pend["offsets_partition"], "producer_id": pend["producer_id"],
                            "offset": pend["record_offset"] + 30, "control_type": "COMMIT"})


def _accounting_off_by_one(rows):
    rows["accounting"]["partitions"]["0"]["records_in"] = 11


RELATIONS = [
    Breaker("group_members.assigned_within_subscription", "classic member assigned unsubscribed topic",
            "group_members", _assigned_unsubscribed),
    Breaker("group_members.assigned_within_subscription", "stable consumer member assigned unsubscribed topic",
            "group_members", _kip848_assigned_unsubscribed),
    Breaker("group_members.member_of_loaded_group", "member of unknown group", "group_members", _member_of_ghost),
    Breaker("removed_groups.disjoint_from_loaded_groups", "removed and loaded", "removed_groups",
            _removed_and_loaded),
    Breaker("empty_group_offsets.subset_of_loaded_offsets", "empty-group offset not in loaded_offsets",
            "empty_group_offsets", _empty_offset_not_served),
    Breaker("pending_offsets.after_last_marker", "pending before its producer's marker", "markers",
            _marker_after_pending),
    Breaker("accounting.records_accounted", "records_in off by one", "accounting", _accounting_off_by_one),
]

BREAKERS = [b for s in SPECS for c in s.checks for b in _generic(s, c)] + RELATIONS


def _suites_reading(table: str) -> list[str]:
    return [s.name for s in SPECS if table in s.inputs]


def test_every_check_has_a_breaker():
    assert {b.check_id for b in BREAKERS} == ALL_IDS


def test_clean_snapshot_passes_every_check(validate, rows):
    result = validate(rows)
    assert [e.id for e in result.failed] == []
    assert result.success and not result.should_fail_run
    assert {e.id for e in result.expectations} == ALL_IDS
    assert result.skipped == ()
    assert all(e.unexpected_count == 0 for e in result.expectations)
    rows_by_suite = {s.name: s.rows for s in result.suites}
    assert rows_by_suite["loaded_offsets"] == len(clean_rows()["loaded_offsets"])
    summary = result.summary()
    assert summary["evaluated"] == len(ALL_IDS) and summary["failed"] == 0 and summary["success"] is True
    doc = json.loads(result.to_json())
    assert doc["success"] is True and len(doc["suites"]) == len(SPECS)


def comparable(result) -> dict:
    """A result's JSON without timings, examples in a stable order: what must not depend on the GX engine."""
    doc = result.to_dict()
    doc.pop("seconds")
    for s in doc["suites"]:
        s.pop("seconds")
        s.pop("engine")
        for e in s["expectations"]:
            e["examples"] = sorted(json.dumps(x, sort_keys=True) for x in e["examples"])
    return doc


def _on_spark(breaker: Breaker) -> bool:
    """Whether the breaker also runs with validation on Spark: every breaker of a table whose suites validate on
    Spark, and the first of each other table. A suite with a relational check validates on pandas whatever the
    engine, so on Spark its breakers differ from pandas only in how the tables come in (Spark frames, collected
    to Arrow), which one breaker per table shows."""
    if not all(s in DERIVED for s in _suites_reading(breaker.table)):
        return True
    return next(b for b in BREAKERS if b.table == breaker.table) is breaker


# every check's breakers, on pandas and over suspects: too many for `make test-fast`; those run on Spark too: `spark`
@pytest.mark.slow
@pytest.mark.parametrize("breaker", [pytest.param(b, marks=pytest.mark.spark) if _on_spark(b) else b for b in BREAKERS],
                         ids=lambda b: b.test_id)
def test_broken_table_fails_exactly_its_check(validator, rows, breaker):
    """On pandas and over the shards' suspects, and on Spark (`_on_spark`), with the same outcome to the last
    example."""
    breaker.mutate(rows)
    engines = ("pandas", "spark", "suspects") if _on_spark(breaker) else ("pandas", "suspects")
    results = {e: validator(rows, e, suites=_suites_reading(breaker.table)) for e in engines}
    for result in results.values():
        assert [e.id for e in result.failed] == [breaker.check_id]
        failed = result.outcome(breaker.check_id)
        assert failed.unexpected_count and failed.unexpected_count >= 1
        assert failed.examples, "a failure must show the offending rows"
        assert result.should_fail_run  # ci settings: policy fail
    assert {s.engine for s in results["pandas"].suites} == {"pandas"}
    if "spark" in results:
        # a suite with a relational check relates state tables, over Arrow: on pandas whatever the setting
        assert {s.name: s.engine for s in results["spark"].suites} == {
            s.name: "pandas" if s.name in DERIVED else "spark" for s in results["spark"].suites}
    assert all(comparable(r) == comparable(results["pandas"]) for r in results.values())


def test_engine_is_chosen_by_the_tables_row_count(spark, rows):
    """validation.pandas_max_rows: a table with more rows validates on Spark; known counts are used as given."""
    from pipelines.config import load_settings
    from pipelines.validation.runner import run_validation

    from .validation_rows import AS_OF_MS, N, build_inputs

    assert len(rows["quarantine"]) < len(rows["offset_commits"])
    limited = load_settings(env="ci", overrides={"validation": {"pandas_max_rows": len(rows["quarantine"])}})
    inputs = build_inputs(spark, rows)
    engines = lambda tables=inputs["tables"], **kw: {s.name: s.engine for s in run_validation(  # noqa: E731
        spark, tables, as_of_ms=AS_OF_MS, num_partitions=N, settings=limited,
        suites=["quarantine", "offset_commits", "loaded_groups"], **kw).suites}
    # loaded_groups has relational checks: pandas always
    assert engines() == {"quarantine": "pandas", "offset_commits": "spark", "loaded_groups": "pandas"}
    assert engines(row_counts={"quarantine": 10**9, "offset_commits": 1}) == {
        "quarantine": "spark", "offset_commits": "pandas", "loaded_groups": "pandas"}
    # a table given as Arrow is in this process already: pandas whatever its size
    as_arrow = {**inputs["tables"], "offset_commits": inputs["tables"]["offset_commits"].toArrow()}
    assert engines(as_arrow)["offset_commits"] == "pandas"


def test_unexpected_examples_name_the_offending_row(validate, rows):
    _assigned_unsubscribed(rows)
    result = validate(rows, suites=["group_members"])
    e = result.outcome("group_members.assigned_within_subscription")
    assert e.unexpected_count == 1
    assert [(x["group_id"], x["member_id"]) for x in e.examples] == [("g-classic", "m3")]

    rows = clean_rows()
    rows["loaded_offsets"].append(copy.deepcopy(rows["loaded_offsets"][0]))
    result = validate(rows, suites=["loaded_offsets"])
    e = result.outcome("loaded_offsets.key_unique")
    assert e.unexpected_count == 2
    assert {(x["group_id"], x["topic"], x["partition"]) for x in e.examples} == {("g-classic", "orders", 0)}


def test_a_null_topic_or_subscription_entry_is_unknown_unless_another_topic_is_outside(validate, rows):
    """Three-valued like SQL: a null assigned topic, or a subscription holding a null, that matches nothing makes
    the member's check unknown (no finding); a topic outside the subscription is a finding whatever else the
    member holds."""
    def member(member_id, subscribed, assigned):
        m = copy.deepcopy(rows["group_members"][1])  # g-classic, a classic consumer group
        m.update(member_id=member_id, subscribed_topics=subscribed, assigned_partitions=assigned)
        return m

    rows["group_members"] += [member("m7", ["orders", None], [tp("payments", 3)]),
                              member("m8", ["orders"], [tp(None, 3), tp("orders", 4)])]
    assert validate(rows, suites=["group_members"]).success
    rows["group_members"].append(member("m9", ["orders"], [tp(None, 5), tp("payments", 6)]))
    e = validate(rows, suites=["group_members"]).outcome("group_members.assigned_within_subscription")
    assert e.unexpected_count == 1 and [x["member_id"] for x in e.examples] == ["m9"]


def test_committed_offset_minus_one_is_valid_minus_two_is_not(validate, rows):
    rows["loaded_offsets"][0]["committed_offset"] = -1
    rows["loaded_offsets"][2]["committed_offset"] = -2
    result = validate(rows, suites=["loaded_offsets"])
    e = result.outcome("loaded_offsets.committed_offset_at_least_minus_1")
    assert e.unexpected_count == 1 and e.examples[0]["committed_offset"] == -2


def test_timestamp_beyond_pandas_range_is_a_finding_not_a_crash(validate, rows):
    """Year 3000 is outside pandas' nanosecond timestamps: the pandas engine falls back to datetimes."""
    rows["loaded_offsets"][0]["commit_timestamp"] = datetime(3000, 1, 1, tzinfo=UTC)
    rows["loaded_offsets"][1]["expire_timestamp"] = datetime(3000, 1, 1, tzinfo=UTC)  # explicit expiry: may be late
    result = validate(rows, suites=["loaded_offsets"])
    assert [e.id for e in result.failed] == ["loaded_offsets.commit_timestamp_plausible"]
    assert result.failed[0].examples[0]["commit_timestamp"].year == 3000


def test_timestamp_within_skew_passes(validate, rows):
    rows["loaded_offsets"][0]["commit_timestamp"] = UPPER - timedelta(minutes=1)  # a broker clock 59 min ahead
    assert validate(rows, suites=["loaded_offsets"]).success


def test_modern_semantics_ignores_non_ending_control_records(validate, rows, settings):
    from pipelines.config import load_settings

    pend = rows["pending_offsets"][0]
    rows["markers"].append({"offsets_partition": pend["offsets_partition"], "producer_id": pend["producer_id"],
                            "offset": pend["record_offset"] + 1, "control_type": "UNKNOWN(7)"})
    # the old loader drops a producer's pending offsets on any control batch (spec §5.1 step 1)
    legacy = validate(rows, suites=["pending_offsets"])
    assert [e.id for e in legacy.failed] == ["pending_offsets.after_last_marker"]
    # the new coordinator only ends a transaction on COMMIT/ABORT (spec §5.5 #5)
    modern = load_settings(env="ci", overrides={"rebuild": {"semantics": "modern"}})
    assert validate(rows, suites=["pending_offsets"], settings_=modern).success


def test_missing_inputs_are_listed_not_silently_passed(validate, rows):
    result = validate(rows, suites=["pending_offsets", "accounting"], with_markers=False, with_accounting=False)
    assert ("pending_offsets.after_last_marker", "input not given: markers") in result.skipped
    assert ("accounting", "not given") in result.skipped
    assert [s.name for s in result.suites] == ["pending_offsets"]
    assert "pending_offsets.after_last_marker" not in {e.id for e in result.expectations}


def test_keys_match_the_contract():
    from schemas.tables import columns

    for table, keys in KEYS.items():
        if table != "accounting":
            assert set(keys) <= set(columns(table)), table


def test_a_run_as_of_the_end_of_year_9999_checks_against_that_end():
    # `--as-of 9999-12-31T23:30:00Z`, or a log whose newest record is past year 9999: as_of + skew is past the last
    # instant a time can be, and building the suites raised OverflowError (the run's stack trace)
    last = datetime.max.replace(tzinfo=UTC)
    for minutes_before in (30, 0):
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        as_of = (last - timedelta(minutes=minutes_before) - epoch) // timedelta(milliseconds=1)
        specs = build_suites(as_of_ms=as_of, num_partitions=N, timestamp_skew_minutes=SKEW_MINUTES)
        assert {s.check_id(c) for s in specs for c in s.checks} == ALL_IDS
        assert {c.minimum[1] for s in specs for c in s.checks if c.kind == "ts_range"} == {last}
