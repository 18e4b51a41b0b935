"""`offsetlake sample` / `generate_sample`: determinism, layout, the broker's write patterns, and a clean decode."""
from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobs.cli import main
from pipelines.decoding.batches import read_batches_from_file
from pipelines.coordinator.partitioner import partition_for
from pipelines.decoding.reader import iter_decoded_rows
from simulator import BASE_TIME_MS, generate_sample
from simulator.log import CODECS

ARGS = dict(records=12_000, groups=80, partitions=6, seed=7, segment_bytes=64 * 1024)


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _logs(root: Path) -> dict[int, list[Path]]:
    out = {}
    for d in sorted(root.glob("__consumer_offsets-*")):
        out[int(d.name.rsplit("-", 1)[1])] = sorted(d.glob("*.log"), key=lambda p: int(p.stem))
    return out


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample")
    stats = generate_sample(root, **ARGS)
    return root, stats


@pytest.fixture(scope="module")
def batches(sample):
    """(partition, segment path, header, records) for every batch, in log order."""
    root, _ = sample
    out = []
    for part, files in _logs(root).items():
        for f in files:
            for item in read_batches_from_file(f, offsets_partition=part):
                assert isinstance(item, tuple), f"read problem in {f}: {item}"
                header, records = item
                out.append((part, f, header, records))
    return out


@pytest.fixture(scope="module")
def rows(sample):
    root, _ = sample
    return list(iter_decoded_rows([root]))


# -------------------------------------------------------------------------------------------------- determinism
def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    args = dict(records=3000, groups=30, partitions=4, segment_bytes=20_000)
    a = _tree_digest_of(tmp_path / "a", seed=11, **args)
    b = _tree_digest_of(tmp_path / "b", seed=11, **args)
    c = _tree_digest_of(tmp_path / "c", seed=12, **args)
    assert a == b
    assert len(a) > 4 * 3  # several segments per partition plus the metadata files
    logs_a = {k: v for k, v in a.items() if k.endswith(".log")}
    logs_c = {k: v for k, v in c.items() if k.endswith(".log")}
    assert logs_a != logs_c
    assert set(logs_a.values()).isdisjoint(logs_c.values())


def test_bytes_do_not_depend_on_the_string_hash_seed(tmp_path):
    """Set iteration order of str varies with PYTHONHASHSEED; the output must not."""
    import os
    import subprocess
    import sys

    digests = []
    for hs in ("1", "2"):
        out = tmp_path / hs
        env = dict(os.environ, PYTHONHASHSEED=hs)
        subprocess.run([sys.executable, "-m", "jobs.cli", "sample", str(out), "--records", "2500", "--groups", "25",
                        "--partitions", "3", "--seed", "9"], check=True, env=env, capture_output=True,
                       cwd=Path(__file__).resolve().parent.parent)
        digests.append(_tree_digest(out))
    assert digests[0] == digests[1]


def _pinned_digest(root: Path) -> str:
    h = hashlib.sha256()
    for name, digest in _tree_digest(root).items():
        h.update(f"{Path(name).as_posix()}\0{digest}\n".encode())
    return h.hexdigest()


# A change that moves these bytes must be deliberate (then refresh the digest): benchmarks and the README's figures
# are measured on dumps the same arguments wrote. A codec library (pinned in setup.cfg) that compresses differently
# moves them too.
PINNED = [
    (ARGS, "7cacaf1bff30f0446d703674229cacc8ec0c506a984b4f07ca4c11906725866f"),
    (dict(records=6_000, groups=10, partitions=3, seed=2, shape="cleaner-died", hot_share=1.0),
     "25a37d2ba6cea253fca310667c425ca7c7bec9ab43150987ec84ec10540282b3"),
]


@pytest.mark.parametrize("args,digest", PINNED, ids=["mixed", "cleaner-died"])
def test_the_same_arguments_write_the_bytes_they_always_wrote(sample, tmp_path, args, digest):
    root = sample[0] if args is ARGS else tmp_path
    if args is not ARGS:
        generate_sample(root, **args)
    assert _pinned_digest(root) == digest


def test_the_smallest_budget_still_creates_every_group(tmp_path):
    stats = generate_sample(tmp_path, records=80, groups=10, partitions=2, seed=3)
    rows = list(iter_decoded_rows([tmp_path]))
    assert {r["group_id"] for r in rows if r["group_id"] is not None} == set(stats.group_partitions)
    assert not [r for r in rows if r["record_kind"] == "error"]


def _tree_digest_of(root: Path, **kw) -> dict[str, str]:
    generate_sample(root, **kw)
    return _tree_digest(root)


# ------------------------------------------------------------------------------------------------------- layout
def test_every_partition_dir_exists_with_contiguous_offsets_and_rolled_segments(sample, batches):
    root, stats = sample
    logs = _logs(root)
    assert sorted(logs) == list(range(ARGS["partitions"]))
    topic_ids = set()
    for part, files in logs.items():
        assert files, f"partition {part} has no .log file"
        meta = (root / f"__consumer_offsets-{part}" / "partition.metadata").read_text()
        assert meta.startswith("version: 0\n")
        topic_ids.add(meta.split("topic_id:", 1)[1].strip())
        for f in files:
            assert re.fullmatch(r"\d{20}\.log", f.name)
    assert len(topic_ids) == 1, topic_ids  # one __consumer_offsets topic: its partitions share its topic id
    expected_next: dict[int, int] = defaultdict(int)
    first_in_file: dict[Path, int] = {}
    last_ts: dict[int, int] = defaultdict(int)
    for part, f, h, recs in batches:
        assert h.base_offset == expected_next[part], (part, h.base_offset)
        assert [r.offset for r in recs] == list(range(h.base_offset, h.last_offset + 1))
        expected_next[part] = h.last_offset + 1
        first_in_file.setdefault(f, h.base_offset)
        assert h.crc_valid and h.magic == 2 and h.timestamp_type == "CreateTime"
        assert h.max_timestamp >= last_ts[part] >= 0
        last_ts[part] = h.max_timestamp
        assert all(r.timestamp >= BASE_TIME_MS for r in recs)
    for part, files in logs.items():
        sizes = [f.stat().st_size for f in files]
        assert len(files) > 1, "the sample is large enough to roll segments"
        for f, size in zip(files, sizes):
            if f in first_in_file:
                assert int(f.stem) == first_in_file[f]
            n_batches = sum(1 for b in batches if b[1] == f)
            assert size <= ARGS["segment_bytes"] or n_batches == 1
    assert stats.files == sum(len(v) for v in logs.values())
    assert stats.bytes == sum(f.stat().st_size for v in logs.values() for f in v)
    assert stats.records == sum(len(b[3]) for b in batches)


def test_high_watermarks_cover_every_commit_and_every_offsets_partition(sample, batches, rows):
    """The sample's log dir carries a `replication-offset-checkpoint` (what `rebuild` reads LAG from): each data
    partition's high watermark is at or past every offset a group committed there, and each offsets partition's
    is its log end."""
    from pipelines.decoding.log_end_offsets import read_offset_checkpoint

    root, _ = sample
    hw = read_offset_checkpoint(root / "replication-offset-checkpoint")
    ends: dict[int, int] = defaultdict(int)
    for part, _f, h, _recs in batches:
        ends[part] = h.last_offset + 1
    assert {p: o for (t, p), o in hw.items() if t == "__consumer_offsets"} == {
        p: ends[p] for p in range(ARGS["partitions"])}
    commits = [r for r in rows if r["key_type"] in (0, 1) and r.get("committed_offset") is not None]
    assert commits
    for r in commits:
        assert hw[(r["topic"], r["partition"])] >= r["committed_offset"], r
    lags = [hw[tp] - o for tp, o in {(r["topic"], r["partition"]): r["committed_offset"] for r in commits}.items()]
    assert 0 in lags and max(lags) > 0  # some groups caught up, some behind


def test_empty_partitions_get_an_empty_first_segment(tmp_path):
    stats = generate_sample(tmp_path, records=200, groups=2, partitions=12, seed=1)
    logs = _logs(tmp_path)
    assert sorted(logs) == list(range(12))
    used = set(stats.group_partitions.values())
    for part, files in logs.items():
        if part not in used:
            assert [f.name for f in files] == ["0" * 20 + ".log"] and files[0].stat().st_size == 0
    assert not [r for r in iter_decoded_rows([tmp_path]) if r["record_kind"] == "error"]


# --------------------------------------------------------------------------------------------------- contents
def test_decodes_with_zero_error_rows(sample, rows):
    _, stats = sample
    kinds = Counter(r["record_kind"] for r in rows)
    assert kinds["error"] == 0 and kinds["unknown"] == 0, [r["error"] for r in rows if r["error"]][:5]
    assert len(rows) == stats.records
    assert set(kinds) == {"offset_commit", "group_metadata", "consumer_group", "control"}


def test_every_group_lives_in_its_partition(sample, rows):
    _, stats = sample
    seen = set()
    for r in rows:
        if r["record_kind"] == "control":
            continue
        assert r["offsets_partition"] == partition_for(r["group_id"], ARGS["partitions"]), r["group_id"]
        seen.add(r["group_id"])
    assert seen == set(stats.group_partitions)
    assert all(stats.group_partitions[g] == partition_for(g, ARGS["partitions"]) for g in seen)
    assert any(ord(c) > 0xFFFF for g in seen for c in g) or any(ord(c) > 127 for g in seen for c in g)


@pytest.mark.parametrize("records,groups,partitions", [(2_000, 20, 3), (12_000, 80, 6), (40_000, 300, 16)])
def test_record_count_is_within_tolerance(tmp_path, records, groups, partitions):
    stats = generate_sample(tmp_path, records=records, groups=groups, partitions=partitions, seed=5)
    assert abs(stats.records - records) <= 0.03 * records, stats.records
    assert stats.groups == groups == sum(stats.groups_by_kind.values())


def test_group_mix(sample):
    _, stats = sample
    g = stats.groups_by_kind
    assert g == {"classic": 48, "simple": 12, "kip848": 12, "connect": 4, "deleted": 4}
    assert len(stats.deleted_groups) == 4


def test_every_codec_is_used_and_markers_stay_uncompressed(sample, batches):
    codecs = Counter(h.codec for _, _, h, _ in batches)
    assert set(codecs) == set(CODECS)
    assert codecs["none"] > max(codecs[c] for c in CODECS if c != "none")
    assert all(h.codec == "none" for _, _, h, _ in batches if h.is_control)
    _, stats = sample
    assert stats.batches_by_codec == {c: codecs[c] for c in CODECS}


def test_producer_fields_follow_the_coordinator_runtime(batches):
    for _, _, h, recs in batches:
        if h.is_control:
            assert h.is_transactional and h.base_sequence == -1 and len(recs) == 1 and h.producer_id >= 1000
        elif h.is_transactional:
            assert h.producer_id >= 1000 and h.producer_epoch >= 0 and h.base_sequence == 0
        else:
            assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, 0)


def test_multi_record_batches_mix_groups(sample, batches):
    from pipelines.decoding.messages import read_message_key

    sizes = Counter(min(len(r), 3) for *_, r in batches)
    assert sizes[1] and sizes[2] and sizes[3]
    mixed = 0
    def group_of(key):
        k = read_message_key(key)
        return getattr(k, "group", None) or k.group_id

    for _, _, h, recs in batches:
        if not h.is_control and len({group_of(r.key) for r in recs}) > 1:
            mixed += 1
    assert mixed > 0


def test_transactions_committed_aborted_and_open(sample, rows):
    _, stats = sample
    open_txn: dict[tuple[int, int], int] = {}
    outcomes = Counter()
    for r in rows:
        key = (r["offsets_partition"], r["producer_id"])
        if r["is_control"]:
            assert key in open_txn, f"marker without a transaction {key}"
            del open_txn[key]
            outcomes[r["control_type"]] += 1
        elif r["is_transactional"]:
            assert r["record_kind"] == "offset_commit" and r["value_version"] in (3, 4)
            assert r["leader_epoch"] == -1
            open_txn[key] = open_txn.get(key, 0) + 1
    assert outcomes["COMMIT"] == stats.transactions_committed > 0
    assert outcomes["ABORT"] == stats.transactions_aborted > 0
    assert len(open_txn) == stats.transactions_open >= 1
    # plain commits interleave with transactional ones on the same partitions
    txn_keys = {(r["group_id"], r["topic"], r["partition"]) for r in rows if r["is_transactional"] and not r["is_control"]}
    plain_keys = {(r["group_id"], r["topic"], r["partition"]) for r in rows
                  if r["record_kind"] == "offset_commit" and not r["is_transactional"]}
    assert txn_keys & plain_keys


def test_offset_commit_value_versions(sample, rows):
    _, stats = sample
    commits = [r for r in rows if r["record_kind"] == "offset_commit" and not r["is_tombstone"]]
    versions = Counter(r["value_version"] for r in commits)
    assert set(versions) == {1, 3, 4} and versions[3] > versions[4] and versions[3] > versions[1]
    assert versions == Counter(stats.offset_commit_value_versions)
    for r in commits:
        if r["value_version"] == 1:
            assert r["expire_timestamp"] > r["commit_timestamp"]
        if r["value_version"] == 4:
            assert r["topic_id"]
    # v4 (the 4.1 upgrade) comes after every v3 in each partition
    last_v3 = defaultdict(int)
    first_v4 = {}
    for r in commits:
        if r["value_version"] == 3:
            last_v3[r["offsets_partition"]] = r["offset"]
        elif r["value_version"] == 4:
            first_v4.setdefault(r["offsets_partition"], r["offset"])
    assert all(first_v4[p] > last_v3[p] for p in first_v4)
    assert {r["metadata"] for r in commits} > {""}


def test_classic_groups_rebalance_and_go_empty(rows):
    gm = [r for r in rows if r["record_kind"] == "group_metadata" and not r["is_tombstone"]]
    assert {r["value_version"] for r in gm} == {3}
    assert {r["protocol_type"] for r in gm} == {"", "consumer", "connect"}
    consumer = [r for r in gm if r["protocol_type"] == "consumer"]
    assert {r["protocol"] for r in consumer} == {"range", "roundrobin", "sticky", "cooperative-sticky", None}
    last_gen: dict[str, int] = {}
    empties = 0
    for r in gm:
        g = r["group_id"]
        if r["protocol_type"] == "":  # creation by the new coordinator: generation 0, nothing else
            assert r["generation"] == 0 and r["members"] == [] and g not in last_gen
        else:
            assert r["generation"] >= last_gen.get(g, 0)
        last_gen[g] = r["generation"]
        if r["members"] == []:
            assert r["protocol"] is None and r["leader"] is None
            empties += r["protocol_type"] != ""
        else:
            assert r["leader"] in {m["member_id"] for m in r["members"]}
    assert empties > 0
    members = [m for r in consumer for m in r["members"]]
    assert {m["subscription_version"] for m in members} == {1, 2, 3}
    assert all(m["subscribed_topics"] and m["assigned_partitions"] is not None for m in members)
    assert any(m["group_instance_id"] for m in members)
    assert any(m["owned_partitions"] for m in members)  # cooperative members report what they own


def test_simple_groups_write_no_group_metadata(sample, rows):
    _, stats = sample
    with_gm = {r["group_id"] for r in rows if r["record_kind"] == "group_metadata" and not r["is_tombstone"]}
    with_offsets = {r["group_id"] for r in rows if r["record_kind"] == "offset_commit"}
    kip848 = {r["group_id"] for r in rows if r["record_kind"] == "consumer_group"}
    simple = with_offsets - with_gm - kip848
    assert len(simple) >= stats.groups_by_kind["simple"]


def test_kip848_records_replay_under_the_new_coordinator_preconditions(rows):
    """§2.9: 5 only after 8 and 7 of that member, 6 only with no target left, 3 only with nothing left."""
    kinds = Counter((r["key_type"], r["is_tombstone"]) for r in rows if r["record_kind"] == "consumer_group")
    for t in (3, 4, 5, 6, 7, 8):
        assert kinds[(t, False)] > 0, t
    for t in (3, 4, 5, 6, 7, 8):
        assert kinds[(t, True)] > 0, t
    assert kinds[(16, False)] > 0  # regex subscriptions resolved (their tombstones need a regex group deleted)
    members: dict[str, set] = defaultdict(set)
    current: dict[str, set] = defaultdict(set)
    target: dict[str, set] = defaultdict(set)
    assignment_epoch: dict[str, int] = {}
    group_epoch: dict[str, int] = {}
    deleted = set()
    for r in rows:
        if r["record_kind"] != "consumer_group":
            continue
        g, t, mid, tomb = r["group_id"], r["key_type"], r["member_id"], r["is_tombstone"]
        assert g not in deleted, f"record after the deletion of {g}"
        if t == 5:
            if tomb:
                assert mid not in current[g] and mid not in target[g], (g, mid)
                members[g].discard(mid)
            else:
                members[g].add(mid)
        elif t == 8:
            (current[g].discard if tomb else current[g].add)(mid)
            if not tomb:
                assert mid in members[g]
                assert r["member_epoch"] <= assignment_epoch[g] <= group_epoch[g]
        elif t == 7:
            (target[g].discard if tomb else target[g].add)(mid)
        elif t == 6:
            if tomb:
                assert not target[g]
                assignment_epoch[g] = -1
            else:
                assignment_epoch[g] = r["assignment_epoch"]
                assert r["assignment_epoch"] == group_epoch[g]
        elif t == 3:
            if tomb:
                assert not members[g] and not target[g] and assignment_epoch[g] == -1
                deleted.add(g)
            else:
                assert r["group_epoch"] == group_epoch.get(g, 0) + 1
                group_epoch[g] = r["group_epoch"]
    assert deleted


def test_deleted_groups_end_with_offset_tombstones_then_the_group_tombstone(sample, rows):
    _, stats = sample
    by_group = defaultdict(list)
    for r in rows:
        if r["group_id"] is not None:
            by_group[r["group_id"]].append(r)
    assert stats.deleted_groups
    for g in stats.deleted_groups:
        recs = by_group[g]
        last = recs[-1]
        assert last["is_tombstone"] and last["key_type"] in (2, 3)
        tail = [r for r in recs if r["batch_base_offset"] == last["batch_base_offset"]]
        assert all(r["is_tombstone"] for r in tail)
        kinds = [r["key_type"] for r in tail]
        n_off = kinds.count(1)
        assert kinds[:n_off] == [1] * n_off
        assert kinds[n_off:] in ([2], [6, 4, 3], [6, 16, 4, 3], [6, 3], [6, 16, 3])
        live = {}
        for r in recs:
            if r["record_kind"] == "offset_commit" and not r["is_transactional"]:
                live[(r["topic"], r["partition"])] = not r["is_tombstone"]
        assert not any(live.values()), f"{g} keeps offsets after its deletion"


def test_offset_delete_tombstones_on_live_groups(sample, rows):
    _, stats = sample
    deleted = set(stats.deleted_groups)
    assert any(r["is_tombstone"] and r["record_kind"] == "offset_commit" and r["group_id"] not in deleted
               for r in rows)


# -------------------------------------------------------------------------------------------------------- CLI
def test_cli_writes_the_sample_and_prints_a_summary(tmp_path):
    out = tmp_path / "dump"
    res = CliRunner().invoke(main, ["sample", str(out), "--records", "1500", "--groups", "12", "--partitions", "3",
                                    "--seed", "4", "--segment-bytes", "30000"])
    assert res.exit_code == 0, res.output
    line = res.stderr.strip().splitlines()[-1]
    assert re.search(r"records=\d+ groups=12 partitions=3 bytes=\d+ files=\d+", line), line
    assert re.search(r"data_partitions=\d+ data_records=\d+ data_bytes=\d+", line), line
    names = sorted(p.name for p in out.iterdir())
    data = [n for n in names if not n.startswith("__") and "checkpoint" not in n]
    assert [n for n in names if n not in data] == [f"__consumer_offsets-{i}" for i in range(3)] + [
        "log-start-offset-checkpoint", "replication-offset-checkpoint"]
    assert data and all(re.fullmatch(r"[\w.-]+-\d+", n) for n in data)  # the data topics' partitions (--data-segments 2)
    again = CliRunner().invoke(main, ["sample", str(out), "--records", "1500", "--groups", "12"])
    assert again.exit_code == 2 and "--force" in again.output
    forced = CliRunner().invoke(main, ["sample", str(out), "--records", "1500", "--groups", "12", "--force",
                                       "--partitions", "2"])
    assert forced.exit_code == 0, forced.output
    names = sorted(p.name for p in out.iterdir())
    assert [n for n in names if n.startswith("__") or "checkpoint" in n] == [
        "__consumer_offsets-0", "__consumer_offsets-1", "log-start-offset-checkpoint", "replication-offset-checkpoint"]
    # the earlier sample's data topics went with its offsets partitions: only this one's are left
    written = int(re.search(r"data_partitions=(\d+)", forced.stderr).group(1))
    assert len([n for n in names if not n.startswith("__") and "checkpoint" not in n]) == written


@pytest.mark.parametrize("argv", [
    ["--partitions", "0"], ["--records", "0"], ["--groups", "-1"], ["--records", "70", "--groups", "9"],
    ["--segment-bytes", "0"], ["--seed", "x"], ["--hot-share", "0"], ["--hot-share", "1.5"], ["--shape", "odd"],
])
def test_cli_bad_arguments_are_usage_errors(tmp_path, argv):
    res = CliRunner().invoke(main, ["sample", str(tmp_path / "o"), *argv])
    assert res.exit_code == 2, res.output


def test_cli_refuses_a_bucket_instead_of_writing_a_local_folder_named_like_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["sample", "s3://bucket/dump", "--records", "1000", "--groups", "10"])
    assert res.exit_code == 2 and "writes a local directory, not s3://bucket/dump" in res.output, res.output
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ skewed samples
def _records_by_partition(root: Path) -> Counter:
    return Counter(r["offsets_partition"] for r in iter_decoded_rows([root]))


@pytest.mark.parametrize("share", [0.9, 1.0])
def test_hot_share_puts_that_share_of_the_records_in_one_partition(tmp_path, share):
    stats = generate_sample(tmp_path, records=20_000, groups=120, partitions=10, seed=4, hot_share=share)
    counts = _records_by_partition(tmp_path)  # counted from the decoded log, not from the generator's stats
    hot = stats.hot_partition
    assert counts.most_common(1)[0][0] == hot
    assert abs(counts[hot] / sum(counts.values()) - share) <= 0.05, counts
    assert stats.groups == 120
    # every group still lives where Kafka's hash puts it
    assert all(stats.group_partitions[g] == partition_for(g, 10) for g in stats.group_partitions)
    if share == 1.0:
        assert set(counts) == {hot}


def test_cleaner_died_is_few_keys_committed_many_times(tmp_path):
    generate_sample(tmp_path / "c", records=30_000, groups=12, partitions=3, seed=2, shape="cleaner-died",
                    hot_share=1.0)
    generate_sample(tmp_path / "m", records=30_000, groups=12, partitions=3, seed=2)

    def commits_per_key(root):
        keys = Counter((r["group_id"], r["topic"], r["partition"]) for r in iter_decoded_rows([root])
                       if r["record_kind"] == "offset_commit")
        return sum(keys.values()) / len(keys), sum(1 for r in iter_decoded_rows([root])
                                                   if r["record_kind"] == "group_metadata")

    died, died_groups = commits_per_key(tmp_path / "c")
    mixed, mixed_groups = commits_per_key(tmp_path / "m")
    assert died > 3 * mixed  # the same budget spent on far fewer keys
    assert died_groups < mixed_groups  # a stable fleet: few rebalances


# ------------------------------------------------------------------------------------------------- data topics
@pytest.fixture(scope="module")
def with_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample-data")
    return root, generate_sample(root, **{**ARGS, "data_segments": 3, "data_batches": 24})


def test_data_topics_leave_the_offsets_topic_as_it_was(sample, with_data):
    plain = {k: v for k, v in _tree_digest(sample[0]).items() if k.startswith("__consumer_offsets-")}
    data = _tree_digest(with_data[0])
    assert {k: v for k, v in data.items() if k.startswith("__consumer_offsets-")} == plain
    assert data["replication-offset-checkpoint"] == _tree_digest(sample[0])["replication-offset-checkpoint"]


def test_data_topics_hold_every_offset_to_the_high_watermark_written_before_it_was_consumed(with_data):
    """Each data partition's batches, decoded whole, cover its offsets from its log start to its high watermark;
    every record below a committed offset was written at or before that commit (a consumer commits what it
    consumed); some topics are LogAppendTime, some producers' CreateTime goes backwards, some partitions lost their
    oldest segment to retention, which `log-start-offset-checkpoint` may or may not say yet."""
    from pipelines.decoding.log_end_offsets import read_offset_checkpoint

    root, stats = with_data
    hw = {tp: o for tp, o in read_offset_checkpoint(root / "replication-offset-checkpoint").items()
          if not tp[0].startswith("__")}
    dirs = {(d.name.rsplit("-", 1)[0], int(d.name.rsplit("-", 1)[1])): d for d in root.iterdir()
            if d.is_dir() and not d.name.startswith("__")}
    assert set(dirs) == set(hw) and stats.data_topics["partitions"] == len(hw)
    largest_below: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (offset, largest timestamp up to it)
    types, backwards, starts = Counter(), 0, {}
    for tp, d in dirs.items():
        files = sorted(d.glob("*.log"), key=lambda p: int(p.stem))
        assert all(p.with_suffix(".index").exists() and p.with_suffix(".timeindex").exists() for p in files)
        expected, run, points = None, -1, []
        for f in files:
            for item in read_batches_from_file(f, offsets_partition=-1):
                assert isinstance(item, tuple), item
                header, records = item
                assert expected is None or header.base_offset == expected
                expected = header.last_offset + 1
                types[header.timestamp_type] += 1
                for r in records:
                    backwards += r.timestamp < run
                    run = max(run, r.timestamp)
                    points.append((r.offset, run))
        starts[tp] = int(files[0].stem)
        assert (expected or 0) == hw[tp], tp
        largest_below[tp] = points
    assert types["LogAppendTime"] and types["CreateTime"] and backwards
    deleted = [tp for tp, s in starts.items() if s > 0]
    assert len(deleted) == stats.data_topics["deleted_segments"] > 0
    checkpoint = read_offset_checkpoint(root / "log-start-offset-checkpoint")
    assert set(checkpoint) == set(deleted) and {checkpoint[tp] for tp in deleted} <= {0, *starts.values()}
    import bisect

    checked = 0
    for r in iter_decoded_rows([root]):
        if r["key_type"] not in (0, 1) or r.get("committed_offset") is None:
            continue
        points = largest_below[(r["topic"], r["partition"])]
        k = bisect.bisect_left([o for o, _ in points], r["committed_offset"])  # the records below the commit
        if k:
            assert points[k - 1][1] <= r["commit_timestamp"], r
            checked += 1
    assert checked > 1000


# -------------------------------------------------------------------------------- rehearsal data: --duration, --incident
HOUR = 3_600_000
DRILL = dict(records=12_000, groups=60, partitions=4, seed=5, segment_bytes=64 * 1024, duration_ms=2 * HOUR)
RESET_AT, REWIND_AT, DELETE_AT = BASE_TIME_MS + 60 * 60_000, BASE_TIME_MS + 70 * 60_000, BASE_TIME_MS + 75 * 60_000


def _incidents(*texts: str):
    from simulator.incidents import parse_incident

    return tuple(parse_incident(t) for t in texts)


@pytest.fixture(scope="module")
def drill(tmp_path_factory):
    """A two-hour sample with a reset at +60m, a rewind at +70m and a deletion at +75m, decoded."""
    root = tmp_path_factory.mktemp("drill")
    stats = generate_sample(root, **DRILL, incidents=_incidents("reset@+60m", "rewind@2026-11-01T01:10:00Z",
                                                                "delete@+1h15m"))
    return root, stats, list(iter_decoded_rows([root]))


def _incident(stats, kind: str) -> dict:
    (found,) = [i for i in stats.incidents if i["kind"] == kind]
    return found


def _offsets_before(rows, group: str, ts: int) -> dict[tuple[str, int], int]:
    """The group's committed offsets just before `ts`, from its decoded plain commits and tombstones."""
    out = {}
    for r in rows:
        if r["group_id"] == group and r["record_kind"] == "offset_commit" and r["timestamp"] < ts:
            if r["is_tombstone"]:
                out.pop((r["topic"], r["partition"]), None)
            else:
                out[(r["topic"], r["partition"])] = r["committed_offset"]
    return out


def test_duration_spreads_the_timeline_each_partition_in_order_without_rebalance_storms(drill):
    root, stats, rows = drill
    assert not [r for r in rows if r["record_kind"] == "error"]
    times = [r["timestamp"] for r in rows]
    assert min(times) >= BASE_TIME_MS and abs(max(times) - BASE_TIME_MS - 2 * HOUR) < 0.02 * 2 * HOUR
    assert stats.first_timestamp == BASE_TIME_MS and stats.last_timestamp == max(times)  # what the summary prints
    last: dict[int, int] = {}
    for r in rows:  # log order: each offsets partition's times never go back (PartitionLog.tick)
        assert r["timestamp"] >= last.get(r["offsets_partition"], 0)
        last[r["offsets_partition"]] = r["timestamp"]
    # new generations / group epochs per group and minute: far below a storm's 11 (`changes --storm-threshold`)
    new = defaultdict(set)
    for r in rows:
        if r["record_kind"] == "group_metadata" and not r["is_tombstone"] and r["protocol_type"]:
            new[(r["group_id"], r["timestamp"] // 60_000)].add(r["generation"])
        elif r["record_kind"] == "consumer_group" and r["key_type"] == 3 and not r["is_tombstone"]:
            new[(r["group_id"], r["timestamp"] // 60_000)].add(r["group_epoch"])
    assert new and max(len(v) for v in new.values()) <= 10
    # groups commit at their own pace, seconds to minutes apart, not a millisecond or two
    gaps = defaultdict(list)
    previous = {}
    for r in rows:
        if r["record_kind"] == "offset_commit" and not r["is_tombstone"]:
            g = r["group_id"]
            if g in previous and r["timestamp"] > previous[g]:
                gaps[g].append(r["timestamp"] - previous[g])
            previous[g] = r["timestamp"]
    medians = sorted(sorted(v)[len(v) // 2] for v in gaps.values() if len(v) > 10)
    assert medians[0] > 5_000 and medians[-1] > 60_000 and len(set(medians)) > len(medians) // 2


def test_same_seed_and_incidents_same_bytes(tmp_path):
    args = dict(records=3000, groups=30, partitions=3, seed=11, duration_ms=HOUR)
    spec = _incidents("reset@+20m", "delete@+30m", "rewind@+40m")
    a = generate_sample(tmp_path / "a", **args, incidents=spec)
    b = generate_sample(tmp_path / "b", **args, incidents=spec)
    assert _tree_digest(tmp_path / "a") == _tree_digest(tmp_path / "b") and a.incidents == b.incidents
    assert [i["kind"] for i in a.incidents] == ["reset", "delete", "rewind"]
    assert len({i["group_id"] for i in a.incidents}) == 3


def test_incidents_change_nothing_before_their_window(tmp_path):
    """The same sample without its incidents holds the same records up to the quiet window before the first one."""
    from simulator.incidents import QUIET_MS

    args = dict(records=4000, groups=30, partitions=3, seed=4, duration_ms=HOUR)
    generate_sample(tmp_path / "plain", **args)
    generate_sample(tmp_path / "drill", **args, incidents=_incidents("delete@+40m"))

    def early(root):
        return [(r["offsets_partition"], r["offset"], r["timestamp"], r["key"], r["value"])
                for r in iter_decoded_rows([root]) if r["timestamp"] < BASE_TIME_MS + 40 * 60_000 - QUIET_MS]

    plain, drilled = early(tmp_path / "plain"), early(tmp_path / "drill")
    assert len(plain) > 1000 and plain == drilled


def test_a_reset_is_the_tools_one_commit_to_0_at_the_asked_millisecond(drill):
    """kafka-consumer-groups --reset-offsets --to-offset 0 --execute: the group Empty first (the tool refuses an
    active group), then one batch of commits to 0 of every partition the group had an offset for, without member,
    leader epoch or metadata, at exactly +60m; then the consumers rejoin (a new generation) and commit on from 0."""
    _, stats, rows = drill
    inc = _incident(stats, "reset")
    g = inc["group_id"]
    assert inc["time_ms"] == RESET_AT and inc["time"] == "2026-11-01T01:00:00.000Z"
    before = _offsets_before(rows, g, RESET_AT)
    mine = [r for r in rows if r["group_id"] == g]
    at = [r for r in mine if r["timestamp"] == RESET_AT]
    assert len({r["batch_base_offset"] for r in at}) == 1 and at[0]["producer_id"] == -1
    assert {(r["topic"], r["partition"]) for r in at} == set(before) and len(before) == inc["partitions"] > 1
    assert all(r["record_kind"] == "offset_commit" and r["committed_offset"] == 0 and r["leader_epoch"] == -1
               and r["metadata"] == "" and r["expire_timestamp"] in (None, -1) for r in at)
    assert before and max(before.values()) > 0
    group_records = [r for r in mine if r["record_kind"] == "group_metadata"]
    emptied = [r for r in group_records if r["timestamp"] < RESET_AT][-1]  # its last group record before the reset
    assert emptied["members"] == [] and emptied["timestamp"] == inc["emptied_ms"] >= RESET_AT - 60_000
    assert not [r for r in mine if emptied["timestamp"] < r["timestamp"] < RESET_AT]  # nothing while it is stopped
    back = [r for r in group_records if r["timestamp"] > RESET_AT][0]
    assert back["members"] and back["generation"] > emptied["generation"] and back["timestamp"] == inc["back_ms"]
    assert not [r for r in mine if RESET_AT < r["timestamp"] < back["timestamp"]]
    after = defaultdict(list)
    for r in mine:
        if r["timestamp"] > back["timestamp"] and r["record_kind"] == "offset_commit" and not r["is_tombstone"]:
            after[(r["topic"], r["partition"])].append(r["committed_offset"])
    assert after and all(v == sorted(v) for v in after.values())  # on from the reset point, never back
    again = {tp: v for tp, v in after.items() if tp in before}  # (not partitions it first commits after)
    assert again and sum(v[0] < before[tp] for tp, v in again.items()) > len(again) // 2


def test_a_rewind_commits_500_lower_at_the_asked_millisecond(drill):
    from simulator.incidents import REWIND_BY

    _, stats, rows = drill
    inc = _incident(stats, "rewind")
    g = inc["group_id"]
    assert inc["time_ms"] == REWIND_AT
    before = _offsets_before(rows, g, REWIND_AT)
    at = [r for r in rows if r["group_id"] == g and r["timestamp"] == REWIND_AT]
    assert len(at) == inc["partitions"] > 0 and len({r["batch_base_offset"] for r in at}) == 1
    for r in at:
        assert r["committed_offset"] == max(0, before[(r["topic"], r["partition"])] - REWIND_BY)
        assert r["leader_epoch"] >= 0  # a consumer's own commit, with its fetch position's epoch
    # the member that committed it owned those partitions in the group's last generation before
    gm = [r for r in rows if r["group_id"] == g and r["record_kind"] == "group_metadata" and r["timestamp"] < REWIND_AT]
    (member,) = [m for m in gm[-1]["members"] if m["member_id"] == inc["member_id"]]
    owned = {(t["topic"], p) for t in member["assigned_partitions"] for p in t["partitions"]}
    assert {(r["topic"], r["partition"]) for r in at} <= owned
    later = [r for r in rows if r["group_id"] == g and r["timestamp"] > REWIND_AT and r["record_kind"] == "offset_commit"]
    assert later  # the group commits on


def test_a_deletion_is_offset_tombstones_then_the_group_tombstone_at_the_asked_millisecond(drill):
    _, stats, rows = drill
    inc = _incident(stats, "delete")
    g = inc["group_id"]
    assert inc["time_ms"] == DELETE_AT and g in stats.deleted_groups
    before = _offsets_before(rows, g, DELETE_AT)
    at = [r for r in rows if r["group_id"] == g and r["timestamp"] == DELETE_AT]
    assert len({r["batch_base_offset"] for r in at}) == 1 and all(r["is_tombstone"] for r in at)
    kinds = [r["key_type"] for r in at]
    n = len(before)
    assert n == inc["partitions"] > 0 and kinds[:n] == [1] * n and kinds[n:] in ([2], [6, 4, 3], [6, 16, 4, 3],
                                                                                 [6, 3], [6, 16, 3])
    assert {(r["topic"], r["partition"]) for r in at[:n]} == set(before)
    assert not [r for r in rows if r["group_id"] == g and r["timestamp"] > DELETE_AT]  # it stays gone
    if inc["group_type"] != "simple":  # DeleteGroups refuses a group with members: they left first
        assert DELETE_AT - 60_000 <= inc["emptied_ms"] < DELETE_AT


def test_no_other_group_is_damaged_around_the_incidents(drill):
    """From five minutes before the first incident to five after the last, the only offsets that go back or away are
    the incidents' (the drill's damaged-group plan holds them alone), while the other groups keep committing."""
    _, stats, rows = drill
    victims = {i["group_id"] for i in stats.incidents}
    window = [r for r in rows if RESET_AT - 5 * 60_000 <= r["timestamp"] <= DELETE_AT + 5 * 60_000]
    gone = [r for r in window if r["is_tombstone"] and r["key_type"] in (1, 2, 3) and r["group_id"] not in victims]
    assert not gone  # no offset tombstone, no group tombstone (a KIP-848 member leaving writes its own: not damage)
    healthy = {r["group_id"] for r in window if r["record_kind"] == "offset_commit"} - victims
    assert len(healthy) > 10


def test_an_incident_near_the_end_keeps_the_groups_the_sample_deletes_there(tmp_path):
    """An incident less than five minutes before the timeline's end: the groups the sample deletes at its end were
    deleted inside the quiet window, so `restore-plan --damaged-since` around the incidents picked them beside the
    victim (README: what it picks there is the incidents' groups). They are now kept when the end is in it."""
    stats = generate_sample(tmp_path, records=6000, groups=40, partitions=8, seed=5, duration_ms=5 * 60_000,
                            incidents=_incidents("rewind@+1m", "delete@+4m59s"))
    victims = {i["group_id"] for i in stats.incidents}
    first = min(i["time_ms"] for i in stats.incidents)
    rows = list(iter_decoded_rows([tmp_path]))
    gone = [r for r in rows if r["timestamp"] >= first - 5 * 60_000 and r["is_tombstone"]
            and r["key_type"] in (1, 2, 3) and r["group_id"] not in victims]
    assert not gone, sorted({r["group_id"] for r in gone})
    assert set(stats.deleted_groups) == {i["group_id"] for i in stats.incidents if i["kind"] == "delete"}


def test_cli_names_every_incident_with_its_group_and_millisecond(tmp_path):
    res = CliRunner().invoke(main, ["sample", str(tmp_path / "d"), "--records", "3000", "--groups", "30",
                                    "--partitions", "3", "--duration", "90m", "--incident", "reset@+30m",
                                    "--incident", "delete@2026-11-01T00:45:00Z", "--data-segments", "0"])
    assert res.exit_code == 0, res.output
    lines = res.stderr.strip().splitlines()
    assert "timeline=2026-11-01T00:00:00.000Z..2026-11-01T01:" in lines[0]
    assert re.fullmatch(r"incident reset@\+30m: 2026-11-01T00:30:00\.000Z \(1793493000000\) group '[^']+' \(classic, "
                        r"__consumer_offsets-\d\): \d+ partitions? reset to 0 .*", lines[1]), lines[1]
    assert re.fullmatch(r"incident delete@2026-11-01T00:45:00Z: 2026-11-01T00:45:00\.000Z \(1793493900000\) group "
                        r"'[^']+' \((classic|simple|consumer), __consumer_offsets-\d\): deleted .*", lines[2]), lines[2]
    assert len(lines) == 3


@pytest.mark.parametrize("argv,message", [
    (["--incident", "reset@+30m"], "--incident needs --duration"),
    (["--duration", "1h", "--incident", "reset"], "is not KIND@TIME"),
    (["--duration", "1h", "--incident", "purge@+30m"], "no incident kind 'purge' (one of reset, delete, rewind)"),
    (["--duration", "1h", "--incident", "reset@+2h"], "is not on the timeline"),
    (["--duration", "1h", "--incident", "reset@+10s"], "is not on the timeline"),
    (["--duration", "1h", "--incident", "reset@+half"], "'half' is not a duration"),
    (["--duration", "1h", "--incident", "reset@noon"], "is not an ISO-8601 time"),
    (["--duration", "1h", "--incident", "reset@now"], "'now' is not on the sample's timeline"),
    (["--duration", "two hours"], "--duration: 'two hours' is not a duration"),
    (["--duration", "30s"], "the duration must be at least 60 s"),
    # a timeline past year 9999 failed in a stack trace (OverflowError, struct.error) after writing the sample
    (["--duration", "99999999999h"], "the duration must be at most 365000 days"),
    (["--duration", "9999999999999999999999h"], "the duration must be at most 365000 days"),
    (["--duration", "1h", "--incident", "reset@+61s"], "no Stable classic group with committed offsets"),
])
def test_cli_bad_incidents_and_durations_are_one_error_line_and_leave_the_sample_there(tmp_path, argv, message):
    out = tmp_path / "d"
    made = CliRunner().invoke(main, ["sample", str(out), "--records", "400", "--groups", "6", "--partitions", "2",
                                     "--data-segments", "0"])
    assert made.exit_code == 0
    kept = _tree_digest(out)
    res = CliRunner().invoke(main, ["sample", str(out), "--records", "2000", "--groups", "20", "--partitions", "2",
                                    "--force", *argv])
    assert res.exit_code == 2 and message in res.output, res.output
    assert res.output.count("\n") == 1 and res.output.startswith("error: ") and "Traceback" not in res.output
    if "no Stable" not in message:  # refused before anything was removed
        assert _tree_digest(out) == kept
    else:  # the incident could not be placed while writing: no half-written sample is left
        assert not list(out.glob("__consumer_offsets-*"))
