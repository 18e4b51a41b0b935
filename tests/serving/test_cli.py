"""describe / lookup / diff / reset-plan / sql through click's CliRunner on a built warehouse."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from jobs.cli import main

from .conftest import damaged_copy


@pytest.fixture()
def run(story):
    def _run(*args, input=None):
        runner = CliRunner()
        return runner.invoke(main, [args[0], "--warehouse", str(story), *args[1:]], input=input, catch_exceptions=False)

    return _run


HEADER = ("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             "
          "CONSUMER-ID     HOST            CLIENT-ID       LAG-TIME")


def test_describe_offsets_layout_like_kafka_consumer_groups(run):
    r = run("describe", "payments", "--snapshot", "s1")
    assert r.exit_code == 0, r.output
    assert r.stdout == "\n".join([
        "",
        HEADER,
        # members with more partitions first, then committed-but-unassigned partitions
        # Kafka's columns as its tool lays them out; LAG-TIME last ("-": this warehouse has no lag in time)
        "payments        orders          0          1200            -               -               c-1             /10.0.0.1       pay-1           -",
        "payments        orders          1          900             -               -               c-1             /10.0.0.1       pay-1           -",
        "payments        refunds         0          40              -               -               c-2             /10.0.0.2       pay-2           -",
        "payments        audit           0          7               -               -               -               -               -               -",
        "",
    ])
    assert r.stderr == ""


def test_describe_end_offsets_give_lag(run, tmp_path):
    f = tmp_path / "leo.csv"
    f.write_text("topic,partition,end_offset\norders,0,1250\norders,1,900\n")
    r = run("describe", "payments", "--snapshot", "s1", "--end-offsets", str(f))
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[2].split()[3:6] == ["1200", "1250", "50"]
    assert lines[3].split()[3:6] == ["900", "900", "0"]
    assert lines[4].split()[3:6] == ["40", "-", "-"]


def test_describe_shows_lag_from_the_snapshots_end_offsets(run, tmp_path):
    """s2 holds the dump's high watermarks: LOG-END-OFFSET and LAG without --end-offsets; a file given wins."""
    r = run("describe", "payments", "--snapshot", "s2")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert [ln.split()[1:6] for ln in lines[2:5]] == [["orders", "0", "17", "1300", "1283"],
                                                       ["orders", "1", "950", "950", "0"],
                                                       ["refunds", "0", "40", "-", "-"]]
    f = tmp_path / "get-offsets.txt"
    f.write_text("orders:0:17\nrefunds:0:45\n")  # kafka-get-offsets output
    lines = run("describe", "payments", "--snapshot", "s2", "--end-offsets", str(f)).stdout.splitlines()
    assert [ln.split()[3:6] for ln in lines[2:5]] == [["17", "17", "0"], ["950", "-", "-"], ["40", "45", "5"]]


def test_describe_bad_end_offsets_is_usage_error(run, tmp_path):
    f = tmp_path / "leo.csv"
    f.write_text("orders,zero,1\n")
    r = run("describe", "payments", "--end-offsets", str(f))
    assert r.exit_code == 2
    assert "must be integers" in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize("content, why", [(b"a:b:c\n", "line 1: partition and offset must be integers"),
                                          (b"orders:0:\xff\xfe\n", "line 1: not UTF-8 text")])
def test_an_end_offsets_file_describe_cannot_read_is_one_line_naming_it(run, tmp_path, content, why):
    """A lone `a:b:c` line was taken for a header (LOG-END-OFFSET `-`, exit 0); bytes that are not UTF-8 were
    Python's decode error, naming no file."""
    f = tmp_path / "leo.txt"
    f.write_bytes(content)
    r = run("describe", "payments", "--snapshot", "s1", "--end-offsets", str(f))
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert r.stderr.startswith(f"error: {f}: {why}") and r.stderr.count("\n") == 1, r.stderr


def test_describe_verbose_has_leader_epoch(run):
    r = run("describe", "payments", "--snapshot", "s1", "--verbose")
    lines = r.stdout.splitlines()
    assert lines[1].split()[:5] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET"]
    assert lines[2].split()[3:5] == ["3", "1200"]
    assert lines[5].split()[3:5] == ["-", "7"]


def test_describe_empty_group_says_no_active_members(run):
    r = run("describe", "batch", "--snapshot", "s1")
    assert r.exit_code == 0
    assert r.stderr == "\nConsumer group 'batch' has no active members.\n"
    assert r.stdout.splitlines()[2].split() == ["batch", "orders", "0", "100", "-", "-", "-", "-", "-", "-"]


def test_describe_missing_group_is_one_line_with_the_nearest_group_ids(run):
    r = run("describe", "nope")
    assert r.exit_code == 2
    assert r.stderr == "error: group 'nope' does not exist in snapshot 's2'\n"  # nothing close to it
    assert r.stdout == ""
    r = run("describe", "paymnts", "--snapshot", "s1")
    assert (r.exit_code, r.stderr) == (2, "error: group 'paymnts' does not exist in snapshot 's1' (did you mean "
                                          "'payments'?)\n")
    r = run("describe", "batch", "--snapshot", "s2")  # expired in s2: the reason, and no suggestion of itself
    assert r.exit_code == 2 and r.stderr.startswith("error: group 'batch' does not exist in snapshot 's2' (expired")
    assert len(r.stderr.splitlines()) == 1 and "did you mean 'batch'" not in r.stderr
    r = run("describe", "paymnts", "--history", "--snapshot", "s1")
    assert (r.exit_code, r.stderr) == (2, "error: group 'paymnts' does not exist in snapshot 's1' (did you mean "
                                          "'payments'?)\n")


def test_describe_members_and_state(run):
    r = run("describe", "payments", "--members", "--snapshot", "s1")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[1] == ("GROUP           CONSUMER-ID     GROUP-INSTANCE-ID HOST            CLIENT-ID       #PARTITIONS     ")
    assert lines[2].split() == ["payments", "c-1", "/10.0.0.1", "pay-1", "2"]
    assert lines[3].split() == ["payments", "c-2", "pay-static-2", "/10.0.0.2", "pay-2", "1"]
    r = run("describe", "payments", "--state", "--snapshot", "s1")
    assert r.stdout == (
        "\nGROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                #MEMBERS"
        "\npayments        -                         range                Stable               2\n"
    )


def test_describe_all_groups_in_group_order(run):
    r = run("describe", "--all-groups", "--state", "--snapshot", "s1")
    assert r.exit_code == 0
    groups = [l.split()[0] for l in r.stdout.splitlines() if l and not l.startswith("GROUP")]
    assert groups == ["batch", "payments", "simple", "txn"]


def test_describe_usage_errors(run):
    assert run("describe").exit_code == 2
    r = run("describe", "g", "--snapshot", "nope")
    assert r.exit_code == 2 and "does not exist" in r.stderr
    r = run("describe", "g", "--snapshot", "s3")
    assert r.exit_code == 2 and "not readable" in r.stderr
    r = CliRunner().invoke(main, ["describe", "--warehouse", "/nonexistent/wh", "g"])
    assert r.exit_code == 2 and "not a directory" in r.stderr and "Traceback" not in r.output


def test_lookup_by_group_topic_partition(run):
    r = run("lookup", "--group", "payments", "--snapshot", "s1")
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert d["snapshot_id"] == "s1" and d["group"]["state"] == "Stable"
    assert [(o["topic"], o["partition"], o["committed_offset"]) for o in d["offsets"]] == [
        ("audit", 0, 7), ("orders", 0, 1200), ("orders", 1, 900), ("refunds", 0, 40)]
    d = json.loads(run("lookup", "--topic", "orders", "--partition", "0").stdout)  # latest: s2
    assert d["snapshot_id"] == "s2"
    assert {(o["group_id"], o["committed_offset"]) for o in d["offsets"]} == {("payments", 17), ("fresh", 5)}
    r = run("lookup", "--group", "paymens")
    assert (r.exit_code, r.stderr) == (2, "error: group 'paymens' does not exist in snapshot 's2' (did you mean "
                                          "'payments'?)\n")
    assert run("lookup").exit_code == 2
    assert run("lookup", "--group", "payments", "--partition", "0").exit_code == 2


@pytest.mark.parametrize("args, code, line", [
    (("--topic", "ordrs"), 2, "error: topic 'ordrs' does not exist in snapshot 's2': no offset was committed on it "
                              "and the dump's log dirs hold none of its partitions (did you mean 'orders'?)"),
    (("--group", "payments", "--topic", "order"), 2, "error: topic 'order' does not exist in snapshot 's2': no offset "
     "was committed on it and the dump's log dirs hold none of its partitions (did you mean 'orders'?)"),
    (("--group", "fresh", "--topic", "refunds"), 1,
     "error: group 'fresh' has no committed offset on topic 'refunds' in snapshot 's2' (its topics: 'orders')"),
    (("--group", "payments", "--topic", "orders", "--partition", "7"), 1, "error: group 'payments' has no committed "
     "offset on partition 7 of topic 'orders' in snapshot 's2' (its partitions of 'orders': 0-1)"),
    (("--topic", "orders", "--partition", "7"), 1, "error: no group has a committed offset on partition 7 of topic "
                                                  "'orders' in snapshot 's2' (committed on partitions 0-2)"),
    (("--topic", "audit"), 1, "error: no group has a committed offset on topic 'audit' in snapshot 's2'"),  # expired
])
def test_lookup_of_a_topic_or_partition_without_offsets_says_so(run, args, code, line):
    """`lookup --group payments --topic ordrs` printed the group with no offsets and exit 0, and `lookup --topic
    ordrs` an empty list (exit 1), without a word: a typo read as "nothing committed there". A topic the snapshot
    knows nothing of is now a usage error with its nearest topics, as a group is; one it knows, where none of the
    offsets asked for is committed, keeps its answer on stdout, says why on stderr and exits 1 (an empty answer)."""
    r = run("lookup", *args)
    assert (r.exit_code, r.stderr) == (code, line + "\n"), r.output
    if code == 1:
        assert json.loads(r.stdout)["offsets"] == []
    else:
        assert r.stdout == ""


def test_diff_finds_the_rewound_group(run):
    r = run("diff", "s1", "s2", "--json")
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert d["offsets"]["regressed"] == [
        {"group_id": "payments", "topic": "orders", "partition": 0, "before": 1200, "after": 17, "delta": -1183}]
    assert d["offsets"]["advanced"] == [
        {"group_id": "payments", "topic": "orders", "partition": 1, "before": 900, "after": 950, "delta": 50}]
    assert {(r["group_id"], r["topic"]) for r in d["offsets"]["expired"]} == {("payments", "audit"), ("batch", "orders")}
    assert [(r["group_id"], r["topic"]) for r in d["offsets"]["disappeared"]] == [("simple", "orders")]
    assert [(r["group_id"], r["topic"]) for r in d["offsets"]["appeared"]] == [("fresh", "orders")]
    assert d["groups"]["created"] == [{"group_id": "fresh", "state": "Stable", "group_type": "classic"}]
    assert {g["group_id"]: g["reason"] for g in d["groups"]["deleted"]} == {"batch": "expired", "simple": "deleted"}
    assert [g["group_id"] for g in d["groups"]["changed"]] == ["payments"]
    assert d["summary"]["unchanged"] == 2
    text = run("diff", "s1", "s2")
    assert "REGRESSED" in text.stdout and "payments  orders  0          1200    17     -1183" in text.stdout
    assert run("diff", "s1", "s2", "--fail-on-regression").exit_code == 1
    assert run("diff", "s2", "s2", "--fail-on-regression").exit_code == 0
    assert run("diff", "s1", "missing").exit_code == 2


def _parse_reset_plan(text: str) -> dict:
    """ConsumerGroupCommand.parseResetPlan (single group): split lines, split on ',', trim, int/long."""
    out = {}
    for line in text.split("\n"):
        if line == "":
            continue
        topic, partition, off = (x.strip() for x in line.split(","))
        out[(topic, int(partition))] = int(off)
    return out


def test_reset_plan_is_kafkas_from_file_csv(run):
    r = run("reset-plan", "--group", "payments", "--snapshot", "s1")
    assert r.exit_code == 0
    assert r.stdout == "audit,0,7\norders,0,1200\norders,1,900\nrefunds,0,40\n"
    assert _parse_reset_plan(r.stdout) == {("audit", 0): 7, ("orders", 0): 1200, ("orders", 1): 900, ("refunds", 0): 40}
    assert "inactive" in r.stderr and "--reset-offsets --from-file" in r.stderr
    r = run("reset-plan", "--group", "nope")
    assert r.exit_code == 2 and r.stderr == "error: group 'nope' does not exist in snapshot 's2'\n"
    r = run("reset-plan", "--group", "simple", "--snapshot", "s1")
    assert r.stdout == "orders,0,300\n"


def test_sql_views_restricted_to_snapshot(run):
    r = run("sql", "SELECT group_id, committed_offset FROM loaded_offsets WHERE topic='orders' AND partition=0 ORDER BY 1",
            "--format", "json")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == [{"group_id": "fresh", "committed_offset": 5}, {"group_id": "payments", "committed_offset": 17}]
    r = run("sql", "SELECT count(*) AS n FROM loaded_offsets", "--snapshot", "s1", "--format", "csv")
    assert r.stdout == "n\n6\n"
    r = run("sql", "SELECT count(DISTINCT snapshot_id) AS n FROM runs", "--format", "csv")  # runs: whole table
    assert r.stdout == "n\n3\n"
    r = run("sql", "SELECT count(*) AS n FROM offset_commits", "--format", "csv")
    assert r.stdout == "n\n4\n"
    r = run("sql", "SELECT snapshot_id, status FROM runs ORDER BY finished_at")
    assert r.exit_code == 0 and "| s1          | succeeded |" in r.stdout and "(3 rows)" in r.stdout


def test_sql_prints_intervals_as_iso_durations_and_json_columns_as_json(run):
    """The story's runs each took one minute (started_at = finished_at - 1 min); `validation` is JSON text `{}`,
    `record_type_counts` a map, `inputs` a list."""
    q = ("SELECT snapshot_id, finished_at - started_at AS took, validation, status = 'succeeded' AS ok, "
         "record_type_counts, inputs FROM runs ORDER BY snapshot_id")
    r = run("sql", q, "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [
        {"snapshot_id": s, "took": "PT1M", "validation": {}, "ok": ok, "record_type_counts": {"offset_commit": 10},
         "inputs": ["dump/"]} for s, ok in (("s1", True), ("s2", True), ("s3", False))]
    r = run("sql", q, "--format", "csv")
    assert r.stdout.splitlines()[1] == 's1,PT1M,{},true,"{""offset_commit"": 10}","[""dump/""]"'
    r = run("sql", q)
    assert r.stdout.splitlines()[3] == ('| s1          | PT1M | {}         | true  | {"offset_commit": 10} | ["dump/"] |')
    # a JSON column can be taken apart in SQL; a string column that looks like JSON stays a string
    r = run("sql", "SELECT validation->>'$.failed' IS NULL AS f, '{\"a\": 1}' AS s, '{\"a\": 1}'::JSON AS j "
                   "FROM runs LIMIT 1", "--format", "json")
    assert json.loads(r.stdout) == [{"f": True, "s": '{"a": 1}', "j": {"a": 1}}]


def test_sql_errors_and_no_file_access(run):
    r = run("sql", "SELEC 1")
    assert r.exit_code == 2 and "syntax error" in r.stderr
    r = run("sql", "SELECT * FROM read_csv('/etc/passwd')")
    assert r.exit_code == 2 and "disabled" in r.stderr
    r = run("sql", "SET enable_external_access = true")
    assert r.exit_code == 2
    for empty in ("", " ", ";", "/* nothing */"):  # no statement at all: was a stack trace
        r = run("sql", empty)
        assert r.exit_code == 2 and r.stderr == f"error: no SQL statement in {empty!r}\n", r.output


@pytest.mark.parametrize("views", [["--members", "--state"], ["--state", "--offsets"], ["--offsets", "--history"],
                                   ["--history", "--members"]], ids=" ".join)
def test_describe_takes_one_view(run, views):
    """`describe G --members --state` printed the view named last alone, as if the other had not been asked for;
    kafka-consumer-groups --describe takes at most one of --members, --offsets, --state (ConsumerGroupCommandOptions,
    4.0)."""
    r = run("describe", "payments", *views)
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert r.stderr.startswith("error: give at most one of --members, --state, --offsets, --history, not "), r.stderr
    assert all(v in r.stderr.split(", not ")[1] for v in views) and r.stderr.count("\n") == 1
    alone = run("describe", "payments", views[0])
    assert alone.exit_code in (0, 1) and alone.output and "error:" not in alone.output  # each alone answers
    assert run("describe", "payments").stdout == run("describe", "payments", "--offsets").stdout


def test_lookup_partition_past_an_int_is_refused(run):
    """A partition is an int32 (OffsetCommitKey.json, 4.0): `--partition 2147483648` answered an empty list
    (exit 1) as if the topic had no such partition, where the API refuses it (`/groups/{id}/offsets?partition=`,
    400)."""
    r = run("lookup", "--topic", "orders", "--partition", str(2**31))
    assert r.exit_code == 2 and "2147483648 is not in the range 0<=x<=2147483647" in r.stderr, r.output
    r = run("lookup", "--topic", "orders", "--partition", str(2**31 - 1))
    assert r.exit_code == 1 and json.loads(r.stdout)["offsets"] == []


def test_sql_prints_instants_past_pythons_years_as_duckdb_holds_them(run):
    """A timestamp or date outside Python's years 1-9999 was a traceback (exit 1) in every format: DuckDB's
    infinities, `to_timestamp(1e12)`, a date BC; and `'infinity'::TIMESTAMP_NS` printed as a day of 2262."""
    q = ("SELECT 'infinity'::TIMESTAMP AS a, '-infinity'::TIMESTAMPTZ AS b, '-infinity'::DATE AS c, "
         "'infinity'::TIMESTAMP_NS AS d, to_timestamp(1e12) AS e, '0001-01-01'::TIMESTAMP - INTERVAL 1 DAY AS f, "
         "'5877642-06-25 (BC)'::DATE AS g, '294247-01-10 04:00:54.775806'::TIMESTAMP AS h, "
         "'2026-01-01 00:00:00.5'::TIMESTAMP_MS AS i, DATE '2026-01-02' AS j")
    want = ["infinity", "-infinity", "-infinity", "infinity", "+33658-09-27T01:46:40Z", "0000-12-31T00:00:00Z",
            "-5877641-06-25", "+294247-01-10T04:00:54.775806Z", "2026-01-01T00:00:00.500000Z", "2026-01-02"]
    r = run("sql", q, "--format", "json")
    assert r.exit_code == 0, r.output
    assert list(json.loads(r.stdout)[0].values()) == want
    r = run("sql", q, "--format", "csv")
    assert r.exit_code == 0 and r.stdout.splitlines()[1] == ",".join(want), r.output
    r = run("sql", q)
    assert r.exit_code == 0 and [c.strip() for c in r.stdout.splitlines()[3].split("|")[1:-1]] == want
    # one nested in a list: one line, and how to read it
    r = run("sql", "SELECT [to_timestamp(1e12)] AS x")
    assert r.exit_code == 2 and r.stderr.startswith("error: column 'x' holds a value Python cannot hold"), r.output


def test_sql_json_is_json_for_nan_and_infinity(run):
    """`--format json` printed NaN and Infinity, which no JSON parser reads (the table and CSV print nan, inf)."""
    r = run("sql", "SELECT 'nan'::DOUBLE AS n, '-inf'::FLOAT AS i, ['inf'::DOUBLE] AS l, 1.5::DOUBLE AS x",
            "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}")) == [
        {"n": "nan", "i": "-inf", "l": ["inf"], "x": 1.5}]
    r = run("sql", "SELECT 'nan'::DOUBLE AS n, '-inf'::FLOAT AS i", "--format", "csv")
    assert r.stdout == "n,i\nnan,-inf\n"


def test_sql_prints_an_empty_map_as_an_object(run):
    """A map prints as a JSON object, but an empty one printed as `[]` (Arrow gives a map as its list of pairs), at
    the top or nested: a run's record_type_counts of an empty input was a list beside every other run's object."""
    q = ("SELECT MAP {} AS m, MAP {'a': 1} AS n, [MAP {}] AS l, {'s': MAP {}} AS st, MAP {1: MAP {}} AS y, "
         "NULL::MAP(VARCHAR, INT) AS z")
    r = run("sql", q, "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"m": {}, "n": {"a": 1}, "l": [{}], "st": {"s": {}}, "y": {"1": {}}, "z": None}]
    r = run("sql", q, "--format", "csv")
    assert r.stdout.splitlines()[1] == '{},"{""a"": 1}",[{}],"{""s"": {}}","{""1"": {}}",'


def test_sql_json_refuses_two_columns_of_one_name(run):
    """A JSON object holds a name once: `SELECT * FROM loaded_offsets JOIN loaded_groups USING (group_id)` printed
    one `record_offset` per row, the group's, where the table and CSV print both."""
    q = "SELECT * FROM loaded_offsets o JOIN loaded_groups g USING (group_id) WHERE group_id = 'payments'"
    r = run("sql", q, "--format", "json")
    assert r.exit_code == 2 and r.stderr.startswith("error: the result has 2 columns named 'snapshot_id'"), r.output
    assert "2 columns named 'record_offset'" in r.stderr and r.stdout == ""
    r = run("sql", q, "--format", "csv")
    assert r.exit_code == 0 and r.stdout.splitlines()[0].split(",").count("record_offset") == 2
    r = run("sql", "SELECT o.record_offset, g.record_offset AS group_record_offset " + q[8:], "--format", "json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == 3


def test_sql_of_several_statements_is_refused(run):
    """DuckDB runs every statement and answers the last: `SELECT count(*) FROM loaded_groups; SELECT count(*) FROM
    loaded_offsets` printed one count, the offsets', under a query that names the groups first."""
    r = run("sql", "SELECT count(*) FROM loaded_groups; SELECT count(*) FROM loaded_offsets")
    assert r.exit_code == 2 and r.stderr == "error: the query holds 2 SQL statements: run one at a time\n", r.output
    r = run("sql", "--format", "csv", "SELECT 'a;b' AS x; -- a trailing ; and comment")
    assert r.exit_code == 0 and r.stdout == "x\na;b\n", r.output


def test_sql_prints_a_result_fetched_in_batches_as_a_whole_one(run):
    """sql fetches and prints a batch of rows at a time: a result of several batches prints as it printed whole,
    CSV as Python's csv writes its rows, JSON as json.dumps writes the list, the table with each column as wide as
    its widest value over all its rows."""
    from pipelines.serving.sql import BATCH_ROWS

    n = 2 * BATCH_ROWS + 5
    q = f"SELECT range AS n, repeat('x', (range % 7)::INT) AS s, [range] AS l FROM range({n}) ORDER BY range"
    rows = [(i, "x" * (i % 7), [i]) for i in range(n)]
    r = run("sql", q, "--format", "csv")
    assert r.exit_code == 0 and r.stdout == "n,s,l\n" + "".join(f"{i},{s},[{i}]\n" for i, s, _ in rows), r.output
    r = run("sql", q, "--format", "json")
    assert r.exit_code == 0 and r.stdout == json.dumps([dict(zip("nsl", v)) for v in rows]) + "\n", r.output
    r = run("sql", q)
    lines = r.stdout.splitlines()
    assert lines[:3] == ["+------+--------+--------+", "| n    | s      | l      |", "+------+--------+--------+"]
    assert lines[3:-2] == [f"| {i:<4} | {s:<6} | {f'[{i}]':<6} |" for i, s, _ in rows]
    assert lines[-2:] == [lines[0], f"({n} rows)"]


def test_sql_table_past_the_rows_it_holds_widens_a_column_below_a_separator(run):
    """A table past HELD_ROWS rows is printed as it is fetched: its columns as wide as among the rows held back,
    and a wider value later widens its column from its row on, under a separator at the new widths."""
    from pipelines.serving.sql import HELD_ROWS

    wide = HELD_ROWS + 3000  # the first row with a value wider than any held back
    q = f"SELECT range AS n, CASE WHEN range < {wide} THEN 'a' ELSE 'bbb' END AS s FROM range({wide + 10})"
    r = run("sql", q)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    w = len(str(wide))
    narrow, widened = "+-" + "-" * w + "-+---+", "+-" + "-" * w + "-+-----+"
    assert lines[:3] == [narrow, f"| {'n':<{w}} | s |", narrow]
    assert lines[3 + wide - 1:3 + wide + 2] == [f"| {wide - 1:<{w}} | a |", widened, f"| {wide:<{w}} | bbb |"]
    assert lines[-2:] == [widened, f"({wide + 10} rows)"]
    assert [ln for ln in lines if ln.startswith("+")] == [narrow, narrow, widened, widened]


@pytest.mark.parametrize("args", [
    ["changes", "--from", "0001-01-01T00:00:00+01:00", "--to", "2100-01-01"],
    ["changes", "--from", "2000-01-01", "--to", "9999-12-31T23:59:59-01:00"],
    ["restore-plan", "--as-of", "9999-12-31T23:59:59-01:00", "--group", "payments"],
    ["restore-plan", "--as-of", "2100-01-01", "--damaged-since", "0001-01-01T00:00:00+01:00"],
], ids=lambda a: " ".join(a[:3]))
def test_a_time_whose_zone_takes_it_past_year_1_or_9999_is_one_line(run, tmp_path, args):
    """A date at either end with a zone is an instant no datetime holds (year 0 or 10000 in UTC): it was a
    stack trace from whichever reader met it first."""
    if args[0] == "restore-plan":
        args = [*args, "--out", str(tmp_path / "plan")]
    r = run(*args)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "is outside years 1 to 9999 in UTC" in r.stderr


def test_a_far_time_is_said_and_compared_to_the_millisecond(run, tmp_path):
    """Past year 2106 a float of seconds cannot hold the millisecond: `--from 5138-11-16T09:46:39.999Z` was read
    and shown as .998 (and `--to 9999-12-31T23:59:59.999Z` left out a record at that very time, where a crafted
    timestamp is clamped)."""
    r = run("changes", "--from", "5138-11-16T09:46:39.999Z", "--to", "2100-01-01")
    assert "before it starts (5138-11-16T09:46:39.999Z)" in r.stderr, r.stderr
    from pipelines.serving.restore_plan import RestorePlan, plan_files

    plan = RestorePlan("s1", "legacy", 99999999999999, [], "every group")
    assert json.loads(plan_files(plan)["index.json"]) == {}
    assert "committed offsets at 5138-11-16T09:46:39.999Z" in plan_files(plan)["README.txt"]
    assert plan.to_json()["as_of"] == "5138-11-16T09:46:39.999Z"


QUICK = [
    ["describe", "payments", "--snapshot", "s1"],
    ["describe", "payments", "--members", "--verbose"],
    ["describe", "--all-groups", "--state"],
    ["lookup", "--group", "payments", "--snapshot", "s1"],
    ["lookup", "--topic", "orders"],
    ["lookup", "--topic", "orders", "--partition", "0"],
    ["diff", "s1", "s2", "--json"],
    ["reset-plan", "--group", "payments", "--snapshot", "s1"],
    ["describe", "nope"],
]


@pytest.mark.parametrize("args", QUICK, ids=lambda a: " ".join(a))
def test_program_prints_what_the_command_prints(story, args):
    """`python -m jobs.cli` (the console script's path) keeps pandas and numpy out of the quick commands for
    start-up time; the answer must be the very text the command gives in a process that has them."""
    import subprocess
    import sys
    from pathlib import Path

    full = [args[0], "--warehouse", str(story), *args[1:]]
    want = CliRunner().invoke(main, full, catch_exceptions=False)
    probe = ("import sys, runpy; sys.argv = ['offsetlake'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('jobs.cli', run_name='__main__')\n"
             "finally:\n    sys.stderr.write('\\nLOADED ' + ' '.join(m for m in ('pandas', 'numpy') if m in sys.modules))\n")
    got = subprocess.run([sys.executable, "-c", probe, *full], cwd=Path(__file__).resolve().parents[2],
                         capture_output=True, text=True, timeout=120)
    err, _, loaded = got.stderr.rpartition("\nLOADED ")
    assert (got.returncode, got.stdout, err) == (want.exit_code, want.stdout, want.stderr)
    assert loaded.strip() == ""  # neither was imported


def test_long_in_filters_read_the_same_rows(story):
    """A long `in` list is a semi-join on a registered table instead of literals: same rows either way."""
    from pipelines.io import snapshots as lk

    reader = lk.DeltaWarehouseReader(story)
    snap = lk.resolve_snapshot(reader, "s1")
    all_ids = sorted(set(reader.snapshot_table("loaded_offsets", "s1").column("group_id").to_pylist()))
    assert all_ids[::2]
    wanted = all_ids[::2] + [f"absent-{i}" for i in range(lk.INLINE_IN_MAX + 5)]  # long enough for the semi-join
    got = reader.snapshot_table("loaded_offsets", snap.snapshot_id, filters=[("group_id", "in", wanted)])
    assert sorted(set(got.column("group_id").to_pylist())) == all_ids[::2]
    rest = reader.snapshot_table("loaded_offsets", snap.snapshot_id, filters=[("group_id", "not in", wanted)])
    assert got.num_rows + rest.num_rows == reader.snapshot_table("loaded_offsets", "s1").num_rows
    assert set(rest.column("group_id").to_pylist()).isdisjoint(wanted)


def test_diff_says_where_the_later_log_was_compacted_since_the_earlier_snapshot(tmp_path):
    """The later snapshot's log lacked offsets (its run's `log_gaps`) up to a time after the earlier snapshot:
    commits between them may be missing from it, and `diff` says so; compacted only before, it says nothing."""
    from datetime import timedelta

    from tests.serving.warehouse_kit import T0, WarehouseKit, group, offset

    kit = WarehouseKit(tmp_path / "wh")
    gaps = lambda until: json.dumps({"log_gaps": {"3": {"first_offset": 0, "compacted_below": 120,  # noqa: E731
                                                        "compacted_until": int(until.timestamp() * 1000)}}})
    kit.snapshot("a", groups=[group("g")], offsets=[offset("g", "t", 0, 5)], as_of=T0)
    kit.snapshot("b", groups=[group("g")], offsets=[offset("g", "t", 0, 5)], as_of=T0 + timedelta(hours=2),
                 summary=gaps(T0 + timedelta(hours=1)))
    kit.snapshot("c", groups=[group("g")], offsets=[offset("g", "t", 0, 5)], as_of=T0 + timedelta(hours=3),
                 summary=gaps(T0 - timedelta(hours=1)))
    runner = CliRunner()
    said = runner.invoke(main, ["diff", "--warehouse", str(tmp_path / "wh"), "a", "b"]).stdout
    assert "note: offsets partition 3 was compacted before offset 120: intermediate commits are not in the log" \
        in said
    assert json.loads(runner.invoke(main, ["diff", "--warehouse", str(tmp_path / "wh"), "a", "b", "--json"])
                      .stdout)["notes"]
    assert "compacted" not in runner.invoke(main, ["diff", "--warehouse", str(tmp_path / "wh"), "a", "c"]).stdout
    # a what-if whose early --as-of (T0 - 2 h) is only its expiry's clock: its state holds its log up to T0 + 90 min,
    # after b's compaction point, so nothing between the two states is missing from b's log
    kit.snapshot("w", groups=[group("g")], offsets=[offset("g", "t", 0, 5)], as_of=T0 - timedelta(hours=2),
                 summary=json.dumps({"log_until": (T0 + timedelta(minutes=90)).isoformat()}))
    assert "compacted" not in runner.invoke(main, ["diff", "--warehouse", str(tmp_path / "wh"), "w", "b"]).stdout


_DAMAGED = [
    (["changes", "--from", "1970-01-01T00:00:00Z", "--to", "2100-01-01T00:00:00Z"], ["offset_commits"]),
    (["restore-plan", "--as-of", "2026-01-01T00:00:30Z", "--group", "payments"], ["offset_commits"]),
    (["describe", "payments", "--snapshot", "s1"], ["loaded_offsets", "loaded_groups", "group_members"]),
    (["lookup", "--group", "payments"], ["loaded_offsets"]),
    (["diff", "s1", "s2"], ["loaded_offsets"]),
    (["reset-plan", "--group", "payments", "--snapshot", "s1"], ["loaded_offsets"]),
    (["sql", "SELECT count(*) FROM loaded_offsets"], ["loaded_offsets"]),
]


@pytest.mark.parametrize("args,tables", _DAMAGED, ids=[args[0] for args, _ in _DAMAGED])
def test_a_damaged_table_file_is_one_line_naming_the_file(story, tmp_path, args, tables):
    """A table file that is not Parquet any more: the command says it cannot read it and names it, on one line,
    exit 2, never a stack trace (`sql` as DuckDB says it)."""
    wh = damaged_copy(story, tmp_path / "wh", tables)
    if args[0] == "restore-plan":
        args = [*args, "--out", str(tmp_path / "plan")]
    r = CliRunner().invoke(main, [args[0], "--warehouse", str(wh), *args[1:]], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.count("\n") == 1 and ".parquet" in r.stderr, r.stderr
    said = "error: Invalid Input Error:" if args[0] == "sql" else "error: cannot read the warehouse"
    assert r.stderr.startswith(said), r.stderr


@pytest.mark.parametrize("args,tables", _DAMAGED, ids=[args[0] for args, _ in _DAMAGED])
def test_a_deleted_table_file_is_one_line_saying_it_is_missing(story, tmp_path, args, tables):
    """A Parquet file the table's Delta log lists, deleted (by hand, a vacuum): one line naming the table and the
    file, exit 2; restore-plan blamed its --out for it."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    for table in tables:
        for f in (wh / table).rglob("*.parquet"):
            f.unlink()
    if args[0] == "restore-plan":
        args = [*args, "--out", str(tmp_path / "plan")]
    r = CliRunner().invoke(main, [args[0], "--warehouse", str(wh), *args[1:]], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.count("\n") == 1 and ".parquet" in r.stderr, r.stderr
    if args[0] != "sql":  # DuckDB's own words
        assert r.stderr.startswith(f"error: cannot read the warehouse's {tables[0]} table: a file its Delta log "
                                   "lists is missing: "), r.stderr
        assert "\\x1b" not in r.stderr  # delta-rs' colours


@pytest.mark.parametrize("args", [["describe", "payments"], ["lookup", "--group", "payments"], ["repair-stats"]],
                         ids=lambda a: a[0])
def test_a_delta_log_file_name_delta_rs_cannot_parse_is_one_plain_line(story, tmp_path, args):
    """A file in a table's `_delta_log` whose name ends in a newline (copied by a broken script): delta-rs refuses
    the table with an OSError whose text is coloured (`\x1b[31m`) and whose nested causes are arrows on lines of
    their own; the line printed them as escapes (`\x1b[31m↳\x1b[0m`). It is now words: the table's path and why."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    (wh / "loaded_offsets" / "_delta_log" / "00000000000000000009.json\n").write_text("{}")
    r = CliRunner().invoke(main, [args[0], "--warehouse", str(wh), *args[1:]], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert "loaded_offsets/_delta_log/00000000000000000009.json" in r.stderr, r.stderr
    assert "\\x1b" not in r.stderr and "↳" not in r.stderr, r.stderr


def test_a_table_the_api_cannot_index_is_its_json_500_naming_the_table(story, tmp_path):
    """A snapshot whose index cannot be built for a damaged table (here a Delta log delta-rs cannot list): the API
    answered a bare `Internal Server Error` (its catalog raised a RuntimeError of the failure) and logged a
    traceback per request. It is now the JSON 500 naming the table, as a damaged history's is."""
    import shutil

    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    (wh / "loaded_offsets" / "_delta_log" / "00000000000000000009.json\n").write_text("{}")
    with TestClient(create_app(DeltaWarehouseReader(wh), refresh_interval=0), raise_server_exceptions=False) as client:
        r = client.get("/groups/payments")
    assert r.status_code == 500, r.text
    detail = r.json()["detail"]
    assert "cannot read the warehouse's loaded_offsets table" in detail and "\x1b" not in detail, detail



def test_a_table_repaired_in_place_is_indexed_again_with_no_request(story, tmp_path, caplog):
    """A server that could index no snapshot (a Delta log file delta-rs cannot list) built the index again only for
    a request, and a load balancer sends none to a server whose `/health` is a 503: repaired in place (no run
    adds a snapshot), it said `error` for as long as it ran. The refresher now builds the latest again (every
    `retry_interval`; 0 here) while nothing is served, saying a failure it already said once only once."""
    import logging
    import shutil
    import time

    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    bad = wh / "loaded_offsets" / "_delta_log" / "00000000000000000009.json\n"
    bad.write_text("{}")
    app = create_app(DeltaWarehouseReader(wh), refresh_interval=0.05)
    app.state.catalog.retry_interval = 0.0
    with caplog.at_level(logging.DEBUG, logger="pipelines.serving.catalog"), TestClient(app) as client:
        def health_until(status):
            deadline = time.monotonic() + 60
            while (r := client.get("/health")).json()["status"] != status and time.monotonic() < deadline:
                time.sleep(0.05)
            return r

        r = health_until("error")
        assert r.status_code == 503 and r.json()["damaged_table"] == "loaded_offsets", r.text
        deadline = time.monotonic() + 60
        while caplog.text.count("indexing snapshot") < 3 and time.monotonic() < deadline:  # the refresher retries
            time.sleep(0.05)
        assert caplog.text.count("indexing snapshot") >= 3, caplog.text
        failed = [x for x in caplog.records if x.levelno >= logging.ERROR]
        bad.unlink()
        r = health_until("ok")
    assert r.status_code == 200 and r.json()["snapshot_id"] == "s2" and "error" not in r.json(), r.text
    assert len(failed) == 1 and "loaded_offsets" in failed[0].getMessage() and not failed[0].exc_info, caplog.text

def _truncate_last_commit(table):
    last = max((table / "_delta_log").glob("*.json"))
    last.write_bytes(last.read_bytes()[:100])


def _delete_last_commit(table):
    max((table / "_delta_log").glob("*.json")).unlink()


def _delete_table(table):
    import shutil

    shutil.rmtree(table)


def _empty_last_commit(table):
    max((table / "_delta_log").glob("*.json")).write_bytes(b"")


def _braces_last_commit(table):
    max((table / "_delta_log").glob("*.json")).write_bytes(b"{}\n{}\n")


def _bare_commit_info_last_commit(table):
    max((table / "_delta_log").glob("*.json")).write_bytes(b'{"commitInfo":{}}\n')


def _strip_last_commit(table):
    """Its commitInfo alone: the adds and removes gone."""
    last = max((table / "_delta_log").glob("*.json"))
    last.write_text("".join(line for line in last.read_text().splitlines(True) if '"commitInfo"' in line))


def _add_path(path: str):
    def damage(table):
        """The last commit's adds pointing at `path` (outside the table), their files moved there."""
        import json
        import shutil

        last = max((table / "_delta_log").glob("*.json"))
        lines = []
        for line in last.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                target = table.parent.parent / "outside" / "x.parquet"
                target.parent.mkdir(exist_ok=True)
                shutil.copy(table / action["add"]["path"], target)
                action["add"]["path"] = path.format(part=action["add"]["path"].split("/")[0], file=target)
            lines.append(json.dumps(action))
        last.write_text("\n".join(lines) + "\n")
    return damage


_ADD_OUTSIDE = [_add_path("{part}/../../../outside/x.parquet"), _add_path("{file}"), _add_path("file://{file}")]


@pytest.mark.parametrize("damage", _ADD_OUTSIDE, ids=["dotdot", "absolute", "url"])
@pytest.mark.parametrize("args", [["lookup", "--group", "payments"], ["sql", "SELECT * FROM loaded_offsets"]],
                         ids=lambda a: a[0])
def test_an_add_outside_the_table_is_one_line_naming_the_table(rebuilt, tmp_path, damage, args):
    """A commit whose add points outside the table (`..`, an absolute path, a URL): sql read the snapshot's
    partition as empty, 0 rows and exit 0; it is damage, one line naming the table and the path."""
    _assert_one_line_naming(rebuilt, tmp_path, "loaded_offsets", damage, args)


@pytest.mark.parametrize("version", [1 << 62, -5], ids=["past_the_log", "negative"])
@pytest.mark.parametrize("args", [["lookup", "--group", "payments"], ["sql", "SELECT * FROM loaded_offsets"]],
                         ids=lambda a: a[0])
def test_a_pinned_version_the_log_lacks_is_one_line(rebuilt, tmp_path, version, args):
    """A runs row pinning a table at a version its Delta log never reached (edited): delta-rs looked for it commit
    by commit, so a read at 2**62 hung (10**8 took 8 s), and a negative one was an OverflowError traceback; it is
    one line naming the table and both versions, exit 2."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def damage(table):
        for f in (table.parent / "runs").rglob("*.parquet"):
            runs = pq.read_table(f)
            at = runs.schema.get_field_index("table_versions")
            pinned = [[(k, version if k == table.name else v) for k, v in r] if r else r
                      for r in runs.column(at).to_pylist()]
            pq.write_table(runs.set_column(at, runs.schema.field(at), pa.array(pinned, runs.schema.field(at).type)), f)

    _assert_one_line_naming(rebuilt, tmp_path, "loaded_offsets", damage, args)


REBUILT_AS_OF = "2026-11-01T00:00:00.001Z"  # `rebuilt`'s newest record: a restore plan's latest time


@pytest.fixture(scope="module")
def rebuilt(no_spark, settings, tmp_path_factory):
    """A warehouse as `rebuild` writes it (each runs row pinning its tables' versions): `payments` committed on
    orders-0, snapshots s1 and s2."""
    from pipelines.coordinator.partitioner import partition_for
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests import badinputs as bi

    root = tmp_path_factory.mktemp("rebuilt")
    g = "payments"
    bi.write_segment(root / "in" / f"__consumer_offsets-{partition_for(g, 50)}", 0,
                     bi.batch([bi.group_record(g, bi.T0)], 0) + bi.batch([bi.commit(g, 0, 7, bi.T0 + 1)], 1))
    for sid in ("s1", "s2"):
        summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(root / "in"),), warehouse=str(root / "wh"),
                                                                 snapshot_id=sid, num_partitions=50))
        assert summary.status == "succeeded", summary.validation
    return root / "wh"


@pytest.mark.parametrize("damage", [_truncate_last_commit, _delete_last_commit, _delete_table, _empty_last_commit,
                                    _braces_last_commit, _bare_commit_info_last_commit, _strip_last_commit],
                         ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("args", [["describe", "payments"], ["lookup", "--group", "payments"], ["diff", "s1", "s2"],
                                  ["reset-plan", "--group", "payments"], ["sql", "SELECT 1"]], ids=lambda a: a[0])
def test_a_damaged_delta_log_is_one_line_naming_the_table(rebuilt, tmp_path, damage, args):
    """The Delta log of a table the snapshot's run committed, truncated or gone in part or whole: a truncated or
    missing commit was a stack trace from delta-rs, and a table whose directory was gone read as empty, so describe
    said the group was not there and lookup answered no offsets. A commit replaced by valid JSON that holds no
    action (empty, `{}` lines), by a commitInfo alone, or stripped of its adds and removes read as an empty table
    too (delta-rs replays it as a commit that changed nothing)."""
    _assert_one_line_naming(rebuilt, tmp_path, "loaded_offsets", damage, args)


def test_a_legitimately_empty_table_still_reads_as_empty(rebuilt):
    """The snapshot's quarantine has no rows: its commits hold a commitInfo and no add, and that is no damage."""
    r = CliRunner().invoke(main, ["sql", "--warehouse", str(rebuilt), "--format", "csv",
                                  "SELECT count(*) AS n FROM quarantine"], catch_exceptions=False)
    assert r.exit_code == 0 and r.stdout.splitlines()[-1] == "0", r.output


def _assert_one_line_naming(rebuilt, tmp_path, table: str, damage, args: list[str]):
    """A copy of `rebuilt` with `table` damaged by `damage`: the command `args` says so in one line, exit 2; the
    copy's path."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(rebuilt, wh)
    damage(wh / table)
    r = CliRunner().invoke(main, [args[0], "--warehouse", str(wh), *args[1:]], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: cannot read the warehouse's {table} table"), r.stderr
    return wh


def _delete_files(table):
    for f in table.rglob("*.parquet"):
        f.unlink()


def _zero_files(table):
    for f in table.rglob("*.parquet"):
        data = f.read_bytes()
        f.write_bytes(data[:len(data) // 2] + bytes(len(data) - len(data) // 2))


def _drop_event_column(table):
    """Files rewritten without `event` (the Delta schema still has it: the reader gives nulls for it), which
    describe --history printed as None and changes left out."""
    import pyarrow.parquet as pq

    for f in table.rglob("*.parquet"):
        pq.write_table(pq.read_table(f).drop_columns(["event"]), f)


_HISTORY_VIEWS = [["describe", "payments", "--history"], ["changes", "--from", "2000-01-01", "--to", "2100-01-01"],
                  ["restore-plan", "--as-of", REBUILT_AS_OF, "--group", "payments", "--out", "{tmp}/plan"]]


@pytest.mark.parametrize("damage", [_truncate_last_commit, _delete_last_commit, _delete_table, _delete_files,
                                    _zero_files, _drop_event_column], ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("args", _HISTORY_VIEWS, ids=lambda a: a[0])
def test_a_damaged_group_history_is_one_line_naming_the_table(rebuilt, tmp_path, damage, args):
    """The history views read group_history under a catch-all meant for warehouses written before the table
    existed: a damaged one read as a group without group records (describe --history: exit 1, "No group events")
    and `changes` left out every group event, exit 0."""
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    wh = _assert_one_line_naming(rebuilt, tmp_path, "group_history", damage,
                                 [a.replace("{tmp}", str(tmp_path)) for a in args])
    with TestClient(create_app(DeltaWarehouseReader(wh), refresh_interval=0)) as client:
        r = client.get("/groups/payments/history")
    assert r.status_code == 500 and r.json()["detail"].startswith("cannot read the warehouse's group_history"), r.text


_HISTORY_READERS = [["changes", "--from", "2000-01-01", "--to", "2100-01-01"], ["sql", "SELECT count(*) FROM runs"],
                    ["restore-plan", "--as-of", REBUILT_AS_OF, "--group", "payments", "--out", "{tmp}/plan"]]


@pytest.mark.parametrize("args", _HISTORY_READERS, ids=lambda a: a[0])
def test_a_deleted_offset_commits_table_is_one_line_naming_it(rebuilt, tmp_path, args):
    """Every run merges its records into offset_commits; read as absent, the history had no record at all: `changes`
    left out every offset change (exit 0) and `sql` counted no commits."""
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    wh = _assert_one_line_naming(rebuilt, tmp_path, "offset_commits", _delete_table,
                                 [a.replace("{tmp}", str(tmp_path)) for a in args])
    with TestClient(create_app(DeltaWarehouseReader(wh), refresh_interval=0)) as client:
        r = client.get("/groups/payments/commits")
    assert r.status_code == 500 and r.json()["detail"].startswith("cannot read the warehouse's offset_commits"), r.text


def test_a_warehouse_of_other_cluster_runs_alone_has_no_history(tmp_path):
    """Runs given --other-cluster add nothing to the history: without one, there is no history to miss."""
    import shutil

    from tests.serving.warehouse_kit import T0, WarehouseKit, group, offset

    kit = WarehouseKit(tmp_path / "wh")
    kit.snapshot("a", groups=[group("g")], offsets=[offset("g", "t", 0, 5)], as_of=T0,
                 summary=json.dumps({"warnings": ["--other-cluster: cluster.id x; this snapshot's records are not "
                                                  "added to the history"]}))
    shutil.rmtree(tmp_path / "wh" / "offset_commits")
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(tmp_path / "wh"), "--from", "2000-01-01", "--to",
                                  "2100-01-01", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output


def test_a_warehouse_written_before_group_history_existed_has_no_group_events(story, tmp_path):
    """No group_history table and a run that pinned none (the warehouse predates it): no events, as before."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    shutil.rmtree(wh / "group_history")
    r = CliRunner().invoke(main, ["describe", "--warehouse", str(wh), "payments", "--history"],
                           catch_exceptions=False)
    assert r.exit_code == 1 and "No group events for group payments" in r.stderr, r.output
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--from", "2000-01-01", "--to", "2100-01-01",
                                  "--json"], catch_exceptions=False)
    from_history = ("group_created", "group_emptied", "group_deleted", "group_converted", "rebalance_storm")
    assert r.exit_code == 0 and not [c for c in json.loads(r.stdout) if c["kind"] in from_history], r.output


def test_restore_plan_into_an_empty_out_is_refused_and_empties_nothing(rebuilt, tmp_path, monkeypatch):
    """`--out "$OUT" --force` with OUT unset: an empty --out was the current directory, and --force deleted
    everything in it before writing the plan there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "precious").write_text("x")
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(rebuilt), "--as-of", REBUILT_AS_OF,
                                  "--group", "payments", "--out", "", "--force"], catch_exceptions=False)
    assert r.exit_code == 2 and r.stderr == "error: --out is empty: name the directory to write the plan into\n", \
        r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious"]


@pytest.mark.parametrize("out", ["wh", "wh/loaded_groups", ".", "wh/new"])
def test_restore_plan_never_writes_into_or_around_the_warehouse(rebuilt, tmp_path, monkeypatch, out):
    """`--out wh --force` (a typo for wh-plan) emptied the whole warehouse, `--out wh/loaded_groups --force` one of
    its tables, and `--out . --force` beside it everything around it, before writing the plan there."""
    import shutil

    shutil.copytree(rebuilt, tmp_path / "wh")
    monkeypatch.chdir(tmp_path)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", "wh", "--as-of", REBUILT_AS_OF, "--group", "payments",
                                  "--out", out, "--force"], catch_exceptions=False)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "the warehouse wh: write the plan outside it" in r.stderr
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_restore_plan_force_empties_an_earlier_plan_only(rebuilt, tmp_path):
    """--force deleted whatever --out held; it now empties an earlier plan's directory, and nothing else."""
    args = ["restore-plan", "--warehouse", str(rebuilt), "--as-of", REBUILT_AS_OF, "--group", "payments", "--out",
            str(tmp_path / "plan"), "--force"]
    assert CliRunner().invoke(main, args, catch_exceptions=False).exit_code == 0
    (tmp_path / "plan" / "applied.txt").write_text("payments.csv\n")
    assert CliRunner().invoke(main, args, catch_exceptions=False).exit_code == 0  # a plan, as apply.sh left it
    (tmp_path / "plan" / "notes.md").write_text("mine")
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 2 and "holds what no restore plan writes ('notes.md')" in r.stderr, r.output
    assert (tmp_path / "plan" / "notes.md").read_text() == "mine"


def test_a_deleted_table_file_never_aborts_the_program_after_its_error_line(story, tmp_path):
    """The scan's FileNotFoundError, still held by Arrow's I/O threads with the frames of the read, was freed on one
    of them after the interpreter had finalized: `diff` printed its error line, then aborted (exit 134) most times."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    for f in (wh / "loaded_offsets").rglob("*.parquet"):
        f.unlink()
    for _ in range(5):
        p = subprocess.run([sys.executable, "-m", "jobs.cli", "diff", "--warehouse", str(wh), "s1", "s2"],
                           cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and p.stderr.count("\n") == 1, (p.returncode, p.stderr[-2000:])


def test_control_characters_from_the_log_are_shown_escaped_in_the_text_views(no_spark, settings, tmp_path):
    """A group id is whatever a client sent: an escape sequence in one acted on the reader's terminal (clear it,
    recolour a row) and a carriage return wrote over its line, in describe, changes, diff, sql and reset-plan's
    notes. The text views show each as its escape; JSON keeps the id as it is."""
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests import badinputs as bi

    from pipelines.coordinator.partitioner import partition_for

    g = "evil\x1b[2J\x1b[31mred\rx"
    bi.write_segment(tmp_path / "in" / f"__consumer_offsets-{partition_for(g, 50)}", 0,
                     bi.batch([bi.group_record(g, bi.T0)], 0) + bi.batch([bi.commit(g, 0, 7, bi.T0 + 1)], 1))
    wh = tmp_path / "wh"
    for sid in ("s1", "s2"):
        summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / "in"),), warehouse=str(wh),
                                                                 snapshot_id=sid, num_partitions=50))
        assert summary.status == "succeeded", summary.validation
    views = [["describe", "--all-groups"], ["describe", g, "--history"], ["changes", "--from", "2000-01-01",
             "--to", "2100-01-01"], ["diff", "s1", "s2"], ["sql", "select group_id from loaded_offsets"],
             ["reset-plan", "--group", g], ["describe", g + "x"]]
    for args in views:
        # color=True: what a terminal gets (click strips ANSI escapes only from what is not one)
        r = CliRunner().invoke(main, [args[0], "--warehouse", str(wh), *args[1:]], color=True)
        text = r.stdout + r.stderr
        assert "\x1b" not in text and "\r" not in text, (args, text)
        assert args[0] == "diff" or "\\x1b[2J\\x1b[31mred\\rx" in text, (args, text)
    r = CliRunner().invoke(main, ["lookup", "--warehouse", str(wh), "--group", g])
    assert json.loads(r.stdout)["offsets"][0]["group_id"] == g


def test_a_character_that_draws_nothing_is_shown_escaped_in_the_text_views(tmp_path):
    """`pay\u200bments` printed as `payments` in describe and sql's table, one id looking like another, and U+202E
    reversed what followed it on a terminal that lays out bidi text (and a zero-width character shifted the
    columns after it): the text views show Unicode's format characters and the line and paragraph separators as
    their escapes, as the page does; CJK and emoji as they are; JSON keeps each id as it is."""
    from .warehouse_kit import WarehouseKit, group, offset

    ids = ["payments", "pay\u200bments", "\u202eevil", "u\u2028x", "\ufeffbom", "日本😀"]
    WarehouseKit(tmp_path).snapshot("s1", groups=[group(g) for g in ids],
                                    offsets=[offset(g, "t", 0, i) for i, g in enumerate(ids)])
    shown = ["payments", "pay\\u200bments", "\\u202eevil", "u\\u2028x", "\\ufeffbom", "日本😀"]
    r = CliRunner().invoke(main, ["describe", "--warehouse", str(tmp_path), "--all-groups", "--state"])
    assert r.exit_code == 0, r.output
    rows = [line.split()[0] for line in r.stdout.splitlines() if line and not line.startswith("GROUP")]
    assert sorted(rows) == sorted(shown), rows
    r = CliRunner().invoke(main, ["sql", "--warehouse", str(tmp_path), "SELECT group_id, committed_offset AS o FROM "
                                  "loaded_offsets ORDER BY o"])
    lines = r.stdout.splitlines()[3:-2]
    assert [line.split("|")[1].strip() for line in lines] == shown
    assert len({len(line) for line in lines}) == 1  # one column width: nothing drawn narrower than counted
    r = CliRunner().invoke(main, ["lookup", "--warehouse", str(tmp_path), "--group", ids[1]])
    assert json.loads(r.stdout)["offsets"][0]["group_id"] == ids[1]


def test_a_newline_or_tab_from_the_log_is_shown_escaped_and_never_splits_a_row(no_spark, settings, tmp_path):
    """The text views lay their rows out with newlines and tabs, so those were left alone: a group id, member id,
    client id or host holding one split its row in two (or shifted its columns), and the half-row after it read as
    a row of its own. Inside a value each is shown as its escape, as the other control characters are; JSON and
    CSV keep the value as it is."""
    from pipelines.coordinator.partitioner import partition_for
    from pipelines.decoding import message_writer as mw
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests import badinputs as bi

    g = "pay\nments\t2"
    value = mw.write_group_metadata_value(3, protocol_type="consumer", generation=2, protocol="range",
                                          leader="m\n1", current_state_timestamp=bi.T0, members=[dict(
                                              member_id="m\n1", client_id="cli\nent", client_host="/10.0.0.1\nX",
                                              subscription=mw.write_consumer_subscription(0, ["orders"]),
                                              assignment=mw.write_consumer_assignment(0, {"orders": [0]}))])
    part = tmp_path / "in" / f"__consumer_offsets-{partition_for(g, 50)}"
    records = [(mw.write_group_metadata_key(g), value, bi.T0), bi.commit(g, 0, 7, bi.T0 + 1)]
    wh = tmp_path / "wh"
    for sid in ("s1", "s2"):  # s2: the group's offset back from 7 to 3
        bi.write_segment(part, 0, b"".join(bi.batch([r], n) for n, r in enumerate(records)))
        summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / "in"),), warehouse=str(wh),
                                                                 snapshot_id=sid, num_partitions=50))
        assert summary.status == "succeeded", summary.validation
        records.append(bi.commit(g, 0, 3, bi.T0 + 2))
    views = {("describe", g): 2, ("describe", g, "--members"): 2, ("describe", g, "--members", "--verbose"): 2,
             ("describe", g, "--state"): 2, ("describe", g, "--history"): 3, ("describe", "--all-groups"): 2,
             ("changes", "--from", "2000-01-01", "--to", "2100-01-01"): 2, ("diff", "s1", "s2"): None,
             ("sql", "select group_id, client_id from group_members"): None}
    for args, lines in views.items():
        r = CliRunner().invoke(main, [args[0], "--warehouse", str(wh), *args[1:]])
        assert r.exit_code == 0, (args, r.output)
        rows = [line for line in r.stdout.splitlines() if line.strip()]
        assert "pay\\nments\\t2" in r.stdout and "\t" not in r.stdout, (args, r.stdout)
        assert all("pay\\nments" in line for line in rows if "ments" in line), (args, r.stdout)
        assert lines is None or len(rows) == lines, (args, r.stdout)
        assert "cli\n" not in r.stdout and "\nX" not in r.stdout and "m\n1" not in r.stdout, (args, r.stdout)
    r = CliRunner().invoke(main, ["describe", "--warehouse", str(wh), g, "--members"])
    assert "m\\n1" in r.stdout and "cli\\nent" in r.stdout and "/10.0.0.1\\nX" in r.stdout
    r = CliRunner().invoke(main, ["lookup", "--warehouse", str(wh), "--group", g])
    assert json.loads(r.stdout)["offsets"][0]["group_id"] == g
    r = CliRunner().invoke(main, ["sql", "--warehouse", str(wh), "select group_id from loaded_groups", "--format", "csv"])
    assert r.stdout == f'group_id\n"{g}"\n'


@pytest.mark.parametrize("group_type", ["consumer", "share", "streams"])
def test_describe_verbose_shows_the_epochs_of_every_group_with_them(tmp_path, group_type):
    """A share (KIP-932) or streams (KIP-1071) group has a group epoch, a target assignment epoch and member epochs
    as a consumer group does (`ShareGroupDescribe`, `StreamsGroupDescribe`): --verbose shows them, not `-`."""
    from .warehouse_kit import WarehouseKit, group, member

    kit = WarehouseKit(tmp_path)
    kit.snapshot("s1", groups=[group("g", "Reconciling", members=1, generation=4, protocol=None, group_type=group_type,
                                     protocol_type=group_type, assignment_epoch=3)],
                 members=[member("g", "m", [("t", 0)], group_type=group_type, member_epoch=2)])

    def describe(*args):
        r = CliRunner().invoke(main, ["describe", "--warehouse", str(tmp_path), "--snapshot", "s1", "g", *args],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.stdout.splitlines()

    state = describe("--state", "--verbose")
    assert state[1].split()[5:7] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
    assert state[2].split()[-3:] == ["4", "3", "1"]
    # ASSIGNMENT-STRATEGY: the assignor the group's describe call names (`ShareGroupDescribe`: the share assignor,
    # `simple`; `StreamsGroupDescribe` names none)
    assert state[2].split()[2] == {"consumer": "uniform", "share": "simple", "streams": "-"}[group_type]
    members = describe("--members", "--verbose")
    assert members[2].split()[-4:] == ["2", "t:0", "3", "-"]


def test_a_topic_kafka_would_refuse_is_left_out_of_the_plans_not_written_into_them(tmp_path):
    """A commit's key holds whatever a client sent: a topic `orders` + newline passed the legal-name check (its `$`
    matches before a trailing newline), and its plan row split in two (`orders` alone, then `,0,5`), a CSV
    `kafka-consumer-groups --from-file` cannot read; `.` and `..` (Topic.detectInvalidTopic, 4.0) were written too.
    Each is left out with a warning, and the legal topic's row is the plan (restore-plan's CSVs take the same
    `reset_plan.legal_topic`)."""
    from .warehouse_kit import WarehouseKit, group, offset, ts

    bad = ["orders\n", ".", ".."]
    wh = tmp_path / "wh"
    k = WarehouseKit(wh)
    k.snapshot("s1", groups=[group("g", members=0, state="Empty")],
               offsets=[offset("g", t, 0, 5) for t in bad] + [offset("g", "orders", 1, 7)],
               as_of=ts(2.0))
    r = CliRunner().invoke(main, ["reset-plan", "--warehouse", str(wh), "--group", "g"])
    assert r.exit_code == 0 and r.stdout == "orders,1,7\n", r.output
    assert all(repr(t) in r.stderr for t in bad), r.stderr


def test_sql_prints_a_varint_and_an_uhugeint_as_their_numbers(run):
    """A VARINT printed as the hex of DuckDB's encoding of it (`12345::VARINT` as 8000023039) in every format, and
    an UHUGEINT from 2**127 on as a negative number (2**128 - 1 as -1): each is now its number, as DuckDB's own
    text of it (`::VARCHAR`) says, at the top or nested; in JSON a number within 64 bits, its digits as a string
    past them (as a HUGEINT's, a decimal's)."""
    values = ["0", "1", "-1", "255", "-256", "12345", "-12345", str(2**63 - 1), str(-2**63), str(2**64 - 1),
              str(2**64), str(-2**64 - 1), "9" * 44, "-" + "9" * 44]
    varints = ", ".join(f"'{v}'::VARINT AS v{i}" for i, v in enumerate(values))
    q = (f"SELECT {varints}, 340282366920938463463374607431768211455::UHUGEINT AS u, "
         "170141183460469231731687303715884105728::UHUGEINT AS u2, 5::UHUGEINT AS u3, "
         "[12345::VARINT, NULL] AS l, {'a': -5::VARINT} AS s, MAP {7::VARINT: 340282366920938463463374607431768211455"
         "::UHUGEINT} AS m, NULL::VARINT AS n")
    r = run("sql", f"SELECT {', '.join(f'v{i}::VARCHAR' for i in range(len(values)))} FROM ({q})", "--format", "csv")
    assert r.exit_code == 0 and r.stdout.splitlines()[1].split(",") == values, r.output  # DuckDB's own text of them
    r = run("sql", q, "--format", "json")
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)[0]
    assert [row[f"v{i}"] for i in range(len(values))] == [
        int(v) if -2**63 <= int(v) < 2**64 else v for v in values]
    assert (row["u"], row["u2"], row["u3"]) == (str(2**128 - 1), str(2**127), "5")
    assert (row["l"], row["s"], row["m"], row["n"]) == ([12345, None], {"a": -5}, {"7": str(2**128 - 1)}, None)
    r = run("sql", q, "--format", "csv")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1].split(",")[:len(values) + 3] == values + [str(2**128 - 1), str(2**127), "5"]
    r = run("sql", q)
    assert r.exit_code == 0, r.output
    cells = [c.strip() for c in r.stdout.splitlines()[3].split("|")[1:-1]]
    assert cells[:len(values) + 3] == values + [str(2**128 - 1), str(2**127), "5"]
    assert cells[len(values) + 3:] == ["[12345, null]", '{"a": -5}', '{"7": "%d"}' % (2**128 - 1), "NULL"]


@pytest.mark.parametrize("args, option", [
    (("lookup", "--group", "payments", "--group", "txn"), "--group"),
    (("lookup", "--topic", "orders", "--partition", "0", "--partition=1"), "--partition"),
    (("describe", "payments", "--snapshot", "s1", "--snapshot", "s2"), "--snapshot"),
    (("reset-plan", "--group", "payments", "--group", "txn"), "--group"),
    (("sql", "SELECT 1 AS x", "--format", "json", "--format", "csv"), "--format"),
    (("changes", "--from", "2026-01-01", "--from", "2026-01-02", "--to", "2026-01-03"), "--from"),
    (("restore-plan", "--as-of", "2026-01-01", "--out", "a", "--out", "b"), "--out"),
    (("diff", "s1", "s2", "--warehouse", "elsewhere"), "--warehouse"),
    (("serve", "--port", "1", "--port", "70000"), "--port"),  # the last out of range: never served
])
def test_a_one_value_option_given_twice_is_refused(run, args, option, tmp_path, monkeypatch):
    """click keeps the last of a one-value option given twice: `lookup --group payments --group txn` answered for
    txn alone, without a word of payments, and so did every read command for each of its options. Such a run is
    now one line naming the option, exit 2, before anything is read or written."""
    monkeypatch.chdir(tmp_path)
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert r.stderr == f"error: option {option} given 2 times: it takes one value (run the command once per value) " \
                       f"— see 'offsetlake {args[0]} --help'\n"
    assert r.stdout == "" and not any(tmp_path.iterdir())


def test_a_flag_or_a_repeatable_option_given_twice_still_runs(run):
    r = run("describe", "payments", "--snapshot", "s1", "--members", "--members")
    assert r.exit_code == 0 and "c-1" in r.stdout, r.output
    r = run("changes", "--from", "2026-01-01", "--to", "2026-01-03", "--group", "payments", "--group", "txn")
    assert "given 2 times" not in r.stderr, r.output
