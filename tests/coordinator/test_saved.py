"""A saved shard (`pipelines/coordinator/saved.py`) resumes like the log it was loaded from: for a log cut at a batch
boundary, resume(load(prefix), rest) == load(prefix ∪ rest), every table, both semantics.

The prefix is loaded and saved as a run saves it (`coordinator.shard.replay_shards(..., keep=True)`), through its
bytes (`SavedShard.to_bytes` / `from_bytes`), and the rest is loaded from it; the whole log is loaded by the
engine in one go. Each example is a batch of generated logs (interleaved groups, plain and
transactional commits of several producers, markers and open ends, tombstones, classic and KIP-848 records,
multi-record batches, gaps, junk), every log cut at three batch boundaries, each cut in its own offsets partition.
"""
from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.coordinator.options import REPLAY_TABLES, ReplayOptions
from pipelines.coordinator.saved import SavedShard
from pipelines.coordinator.shard import engine_rows, replay_shards
from tests.coordinator.harness import canon
from tests.coordinator.rowkit import to_table

from tests.coordinator.test_replay_differential import build_log, kafka_like_log, log_ops
from tests.depth import cases

HYPO = settings(max_examples=cases(deep=25, quick=10), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

CUTS_PER_LOG = 3


def saved_shards(rows, opts: ReplayOptions) -> dict:
    """The shards a run over `rows` saves, read back from their bytes."""
    if not rows:
        return {}
    saved = replay_shards(to_table(rows), opts, keep=True).saved
    return {p: SavedShard.from_bytes(s.to_bytes(), "state", p, opts.is_modern) for p, s in saved.items()}


def resumed_rows(rows, saved: dict, opts: ReplayOptions) -> dict[str, list[dict]]:
    """`replay_rows` of `rows` loaded on from `saved`."""
    result = replay_shards(to_table(rows) if rows else to_table([]), opts, resume=saved)
    return {t: engine_rows(a) for t, a in result.tables.items()}


def _batch_starts(rows) -> list[int]:
    """Indexes where a new batch starts (an incremental run resumes at an entry boundary), and the end."""
    starts = [i for i, r in enumerate(rows) if i == 0 or r["batch_base_offset"] != rows[i - 1]["batch_base_offset"]]
    return starts + [len(rows)]


def _by_partition(tables: dict[str, list[dict]]) -> dict[str, dict[int, list[dict]]]:
    out: dict[str, dict[int, list[dict]]] = {}
    for t, rows in tables.items():
        parts = out[t] = {}
        for r in rows:
            parts.setdefault(r["offsets_partition"], []).append(r)
    return out


def _check(semantics: str, batch, seed: int) -> None:
    rnd = random.Random(seed)
    prefix, rest, labels = [], [], {}
    part = 0
    for i, ops in enumerate(batch):
        starts = _batch_starts(build_log(ops, partition=0).rows)
        for k in rnd.sample(starts, min(CUTS_PER_LOG, len(starts))):
            rows = build_log(ops, partition=part).rows
            prefix += rows[:k]
            rest += rows[k:]
            labels[part] = (i, k)
            part += 1
    opts = ReplayOptions(semantics=semantics, snapshot_id="ret", load_time_ms=5, num_partitions=part + 1)
    full = _by_partition(resumed_rows(prefix + rest, {}, opts))  # the same representation on both sides
    resumed = _by_partition(resumed_rows(rest, saved_shards(prefix, opts), opts))
    pending = _by_partition({"c": [r for r in resumed_rows(prefix, {}, opts)["offset_commits"]
                                   if r["txn_outcome"] == "pending"]})["c"]  # open at each cut
    later_at = _by_partition({"r": rest})["r"]
    for t in REPLAY_TABLES:
        for p, (i, k) in labels.items():
            want = canon(full[t].get(p, []))
            got = canon(resumed[t].get(p, []))
            later = {r["offset"] for r in later_at.get(p, [])}
            if t == "offset_commits":
                # history: every later record, and the earlier records of the transactions still open at the cut,
                # with the outcome the whole log gives them (the previous snapshot holds the others as they are)
                want_later = {x for x in want if dict(x)["record_offset"] in later}
                pending_offsets = {r["record_offset"] for r in pending.get(p, [])}
                want_open = {x for x in want if dict(x)["record_offset"] in pending_offsets}
                assert set(got) == want_later | want_open, f"{semantics} log {i} cut {k}: {t}"
                continue
            if t == "group_history":
                # events: an incremental run keeps the previous snapshot's and adds those of the later records,
                # which must be exactly the full log's (same membership before them: the state is the same)
                assert got == [x for x in want if dict(x)["record_offset"] in later], \
                    f"{semantics} log {i} cut {k}: {t}"
                continue
            assert got == want, (f"{semantics} log {i} cut at row {k}: {t}\nops: {batch[i]}\n"
                                 f"resumed: {got}\nfull:    {want}")


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_saved_shard_resumes_like_the_whole_prefix(semantics, ops, data):
    batch = data.draw(st.lists(ops, min_size=10, max_size=16), label="batch")
    _check(semantics, batch, data.draw(st.integers(0, 2**32 - 1), label="seed"))


def test_a_shard_of_only_quarantined_and_unknown_rows_loads_to_nothing():
    """A partition whose every record was quarantined or is of an unknown type (a corrupt offsets partition):
    the shard loads, empty, and saves nothing (a Spark task gets exactly such a group)."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=7)
    log.error()
    log.unknown()
    result = replay_shards(to_table(log.rows), ReplayOptions(num_partitions=50), keep=True)
    assert {t: a.num_rows for t, a in result.tables.items()} == dict.fromkeys(result.tables, 0)
    assert result.saved == {}


def _resumes_like_full(log, cut: int, semantics: str) -> None:
    rows = log.rows
    prefix, rest = rows[:cut], rows[cut:]
    opts = ReplayOptions(semantics=semantics, snapshot_id="ret", load_time_ms=5, num_partitions=50)
    full, resumed = resumed_rows(prefix + rest, {}, opts), resumed_rows(rest, saved_shards(prefix, opts), opts)
    for t in REPLAY_TABLES:
        if t not in ("offset_commits", "group_history"):
            assert canon(resumed[t]) == canon(full[t]), f"{semantics} {t}"


def test_rule_last_tombstone_hides_an_open_entry_before_it():
    """modern: a tombstone purges pending entries before it, even when a plain value follows it."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    log.commit("g", "t", 0, 1, pid=3, epoch=0)  # open, before the tombstone
    log.offset_tombstone("g", "t", 0)
    log.commit("g", "t", 0, 2)
    log.commit("g", "t", 0, 3)
    cut = len(log.rows)
    log.commit("h", "t", 0, 1)  # the transaction stays open: its purged entry must not be pending
    _resumes_like_full(log, cut, "modern")


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_rule_topic_names_outlive_their_group(semantics):
    """A topic id named only by a removed incarnation's type-4 record still resolves later assignments."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    log.cg_topics("old", [("ID-A", "a", 4)])
    log.cg_epoch("old", 1)
    log.cg_topics("old", [("ID-B", "b", 4)])  # no longer names ID-A
    log.cg_tombstone("old")
    for _ in range(3):
        log.cg_epoch("new", 2)
    cut = len(log.rows)
    log.cg_member("new", "m")
    log.cg_current("new", "m", 2, [("ID-A", [0, 1])])
    _resumes_like_full(log, cut, semantics)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_rule_committed_entry_beats_later_plain_tombstone_only_by_its_marker(semantics):
    """A transactional commit resolved after the cut, and plain writes either side of the cut."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    for v in range(5):
        log.commit("g", "t", 0, v)
    log.commit("g", "t", 0, 10, pid=4, epoch=0)
    log.offset_tombstone("g", "t", 0)
    log.commit("g", "t", 1, 3)
    log.commit("g", "t", 1, 4, pid=5, epoch=0)
    log.marker(5, "COMMIT")  # before the cut: the installed offset of t-1 is this transactional entry
    cut = len(log.rows)
    log.marker(4, "COMMIT")  # legacy resurrects the entry (§5.5 #1); modern keeps the key empty
    _resumes_like_full(log, cut, semantics)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_rule_a_transaction_committed_after_the_cut_loses_to_a_later_plain_commit(semantics):
    """The old loader installs a committed transaction's entry only over an entry of an older batch
    (`appendedBatchOffset`): the batch of the offset installed before the cut must survive the save."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    log.commit("g", "t", 0, 5, pid=4, epoch=0)  # the transaction's entry, an early batch
    log.commit("g", "t", 0, 7)  # a plain commit in a later batch: installed
    cut = len(log.rows)
    log.marker(4, "COMMIT")  # the transaction's entry is older: 7 stays
    _resumes_like_full(log, cut, semantics)


def test_rule_last_offset_value_keeps_a_simple_group():
    """modern: an offset value after the group's removal makes a simple group, even an aborted one."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    log.group("g", [], protocol_type="")
    log.commit("g", "t", 0, 1)
    log.commit("g", "t", 0, 2)
    log.group_tombstone("g")
    log.commit("g", "t", 1, 1, pid=4, epoch=0)
    log.marker(4, "ABORT")
    cut = len(log.rows)
    log.commit("h", "t", 0, 1)
    _resumes_like_full(log, cut, "modern")


# KIP-848 groups whose state hangs on a few of their records: the saved shard holds the state they left
def _first_value_creates_the_group(log):
    """A consumer group whose only member left still exists (empty): the member's first value created it."""
    for _ in range(2):
        log.cg_member("g", "m1")
    log.cg_member_tombstone("g", "m1")


def _member_tombstone_removes_the_member_whole(log):
    """The group's first value is the member's own record: its later type-5 tombstone must still remove it."""
    _first_value_creates_the_group(log)
    log.cg_epoch("g", 2)


def _current_assignment_tombstone_needs_its_member(log):
    """A type-8 tombstone resets a member that exists (epochs -1) and is ignored before the member does: the
    member's first record must stay ahead of it."""
    log.cg_epoch("g", 1)
    for _ in range(2):
        log.cg_topics("g", [("ID-A", "a", 4)])
    log.cg_member("g", "m1")
    log.cg_current_tombstone("g", "m1")
    log.cg_member("g", "m1", assignor="range")


def _current_assignment_tombstone_keeps_the_state(log):
    """A type-8 tombstone after the last type-8 value: epochs -1, the value's state kept."""
    for epoch in (2, 3, 4):
        log.cg_current("g", "m1", epoch, [("ID-A", [0])], state=1)
    log.cg_current_tombstone("g", "m1")
    log.cg_epoch("g", 5)


def _last_record_is_the_groups_last_offset(log):
    """The group's last record (here a type-4 tombstone, kept by no other rule) is its `record_offset`."""
    for epoch in (1, 1, 1):
        log.cg_epoch("g", epoch)
    log.cg_topics_tombstone("g")


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("prefix", [_first_value_creates_the_group, _member_tombstone_removes_the_member_whole,
                                    _current_assignment_tombstone_needs_its_member,
                                    _current_assignment_tombstone_keeps_the_state,
                                    _last_record_is_the_groups_last_offset], ids=lambda f: f.__name__.strip("_"))
def test_rule_kip_live_group_records(prefix, semantics):
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    prefix(log)
    cut = len(log.rows)
    log.commit("h", "t", 0, 1)  # a later record of another group: the case's group as the cut left it
    _resumes_like_full(log, cut, semantics)


def test_a_saved_shard_unpickles_the_engine_types_only():
    """A state file is read back from the warehouse: one that would make the unpickler call anything but the
    engine's own types fails to load with a clear error instead of running it."""
    import os
    import pickle

    from pipelines.coordinator.saved import MAGIC, SavedShardError
    from tests.coordinator.rowkit import Log

    log = Log(partition=3)
    log.commit("g", "t", 0, 1)
    saved = replay_shards(to_table(log.rows), ReplayOptions(num_partitions=50), keep=True).saved[3]
    data = saved.to_bytes()
    assert SavedShard.from_bytes(data, "x", 3, False).state.offsets.items() == saved.state.offsets.items()
    evil = pickle.dumps(os.system)
    forged = MAGIC + b" 1\n" + len(evil).to_bytes(8, "little") + evil + data[data.index(b"\n") + 1 + 8 +
                                                                           int.from_bytes(data[data.index(b"\n") + 1:][:8], "little"):]
    with pytest.raises(SavedShardError, match="not part of a saved shard"):
        SavedShard.from_bytes(forged, "x", 3, False)
    with pytest.raises(SavedShardError, match="not a saved shard"):
        SavedShard.from_bytes(b"PAR1....", "x", 3, False)


def _forged(data: bytes, state: bytes) -> bytes:
    """`data` (a saved shard's bytes) with its pickled state replaced by `state`."""
    from pipelines.coordinator.saved import MAGIC

    body = data[data.index(b"\n") + 1:]
    rest = body[8 + int.from_bytes(body[:8], "little"):]
    return MAGIC + b" 1\n" + len(state).to_bytes(8, "little") + state + rest


def _str(s: str) -> bytes:
    return b"X" + len(s.encode()).to_bytes(4, "little") + s.encode()


@pytest.mark.parametrize("module, name", [(m, n) for m, names in sorted(
    __import__("pipelines.coordinator.saved", fromlist=["_StateUnpickler"])._StateUnpickler.ALLOWED.items())
    for n in sorted(names)])
def test_a_saved_shard_cannot_set_an_engine_types_attributes(module, name):
    """A tampered state file whose pickle BUILDs on an allowed class itself (not an instance of it), before a valid
    state, would set that class's attributes for the rest of the process (ClassicGroup.state = "Dead": every group
    of the run's snapshot Dead); it fails to load, and the class is as it was."""
    import importlib
    import pickle

    from pipelines.coordinator.saved import SavedShardError
    from tests.coordinator.rowkit import Log

    log = Log(partition=3)
    log.commit("g", "t", 0, 1)
    saved = replay_shards(to_table(log.rows), ReplayOptions(num_partitions=50), keep=True).saved[3]
    data = saved.to_bytes()
    state = pickle.dumps(saved.state, protocol=pickle.HIGHEST_PROTOCOL)
    cls = getattr(importlib.import_module(module), name)
    before = dict(vars(cls))
    poison = (b"c" + module.encode() + b"\n" + name.encode() + b"\n"  # GLOBAL
              + b"N}" + _str("state") + _str("Dead") + b"s\x86b0")  # BUILD (None, {"state": "Dead"}), POP
    with pytest.raises(SavedShardError):
        SavedShard.from_bytes(_forged(data, state[:2] + poison + state[2:]), "x", 3, False)
    assert dict(vars(cls)) == before


def test_a_saved_shard_calls_no_builtin():
    """A state file that calls a builtin (`list(bytes(10**12))`: terabytes) fails to load before calling it."""
    from pipelines.coordinator.saved import SavedShardError
    from tests.coordinator.rowkit import Log

    log = Log(partition=3)
    log.commit("g", "t", 0, 1)
    data = replay_shards(to_table(log.rows), ReplayOptions(num_partitions=50), keep=True).saved[3].to_bytes()
    huge = b"\x80\x05cbuiltins\nlist\ncbuiltins\nbytes\n\x8a\x06\x00\x10\xa5\xd4\xe8\x00\x85R\x85R."
    with pytest.raises(SavedShardError, match="builtins.list is not part of a saved shard"):
        SavedShard.from_bytes(_forged(data, huge), "x", 3, False)


def _one_of_each(state):
    gs = state.groups.groups
    return gs["classic"], gs["consumer"]


@pytest.mark.parametrize("tamper, why", [
    (lambda s: setattr(_one_of_each(s)[0], "generation", "3"), "group 'classic': generation = '3'"),
    (lambda s: setattr(_one_of_each(s)[0], "generation", 1 << 63), "group 'classic': generation = 9223372036854775808"),
    (lambda s: _one_of_each(s)[0].members.append(7), "group 'classic': members = "),
    (lambda s: setattr(_one_of_each(s)[0].members[0], "assigned_partitions", [{"topic": "t", "partitions": ["0"]}]),
     "group 'classic': members = "),
    (lambda s: setattr(_one_of_each(s)[1], "group_epoch", None), "group 'consumer': group_epoch = None"),
    (lambda s: _one_of_each(s)[1].members.update(x=_one_of_each(s)[0]), "group 'consumer': members = "),
    (lambda s: s.groups.groups.update(other=_one_of_each(s)[0]), "group 'other': group_id = 'classic'"),
    (lambda s: s.groups.last_group_record.update(classic=7), "the last record of group 'classic': 7"),
    (lambda s: setattr(s, "partition", 4), "the state of offsets partition 4, not 3"),
    (lambda s: setattr(s, "modern", False), "saved under legacy semantics, not this run's"),
    (lambda s: setattr(s, "modern", 1), "modern = 1"),
    (lambda s: setattr(s, "open_records", {1: [[2]]}), "its offsets are not a shard's"),
])
def test_a_saved_shard_holds_what_its_types_declare(tamper, why):
    """A state file edited into one of the right classes holding other values (a str where the replay keeps an
    int, another partition's shard, a group under another id, another semantics') fails to load for the run that
    would resume it, with what is wrong, instead of a snapshot holding it or a traceback at its write."""
    import pickle

    from pipelines.coordinator.saved import SavedShardError
    from tests.coordinator.rowkit import Log, member

    log = Log(partition=3)
    log.group("classic", [member("m1")])
    log.cg_member("consumer", "m2")
    log.cg_current("consumer", "m2", 1, [("tid", [0])])
    log.commit("classic", "t", 0, 1)
    # the new coordinator's: the old one skips a consumer group's records (`options.unknown_group_key_types`)
    saved = replay_shards(to_table(log.rows), ReplayOptions("modern", num_partitions=50), keep=True).saved[3]
    data = saved.to_bytes()
    assert SavedShard.from_bytes(data, "x", 3, True).state.groups.groups.keys() == {"classic", "consumer"}
    tamper(saved.state)
    forged = _forged(data, pickle.dumps(saved.state, protocol=pickle.HIGHEST_PROTOCOL))
    with pytest.raises(SavedShardError, match="^x: unreadable saved shard: " + re.escape(why)):
        SavedShard.from_bytes(forged, "x", 3, True)



def _replaced(data: bytes, i: int, part: bytes) -> bytes:
    """`data` (a saved shard's bytes) with its part `i` (0: the pickled state, 1-3: its tables) replaced by `part`."""
    head, body = data.split(b"\n", 1)
    parts, at = [], 0
    while at < len(body):
        n = int.from_bytes(body[at:at + 8], "little")
        parts.append(body[at + 8:at + 8 + n])
        at += 8 + n
    parts[i] = part
    return head + b"\n" + b"".join(len(p).to_bytes(8, "little") + p for p in parts)


@pytest.mark.parametrize("part", ["offsets", "open_history"])
def test_a_saved_shard_decompresses_no_table(part):
    """A saved shard's tables are written uncompressed; one whose offsets (inside its state) or one of its tables
    is a zstd-compressed Arrow stream (25 KB of it was 800 MB once read, a few MB of it any size) fails to load
    before it is decompressed."""
    import pickle

    import numpy as np
    import pyarrow as pa

    from pipelines.coordinator.saved import SavedShardError
    from tests.coordinator.rowkit import Log

    log = Log(partition=3)
    log.commit("g", "t", 0, 1)
    saved = replay_shards(to_table(log.rows), ReplayOptions(num_partitions=50), keep=True).saved[3]
    zeros = pa.table({"x": np.zeros(100_000, np.int64)})  # stands for rows enough to fill any memory
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, zeros.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(zeros)
    bomb = sink.getvalue().to_pybytes()
    assert len(bomb) < 2_000
    if part == "offsets":
        state = pickle.dumps(saved.state, protocol=3)  # no frames: the bytes' opcode is all that sizes them
        offsets = saved.state.offsets.to_bytes()
        old = b"B" + len(offsets).to_bytes(4, "little") + offsets
        assert state.count(old) == 1
        data = _replaced(saved.to_bytes(), 0, state.replace(old, b"B" + len(bomb).to_bytes(4, "little") + bomb))
    else:
        data = _replaced(saved.to_bytes(), 1, bomb)
    with pytest.raises(SavedShardError, match="compressed Arrow IPC message"):
        SavedShard.from_bytes(data, "x", 3, False)


@pytest.mark.parametrize("part", [1, 2, 3], ids=["open_history", "naming", "markers"])
def test_a_saved_shard_holds_its_tables_layouts(part):
    """A saved shard whose table was replaced by rows of another layout fails to load for the run that would
    resume it (it concatenated them with its own rows), saying which."""
    import pyarrow as pa

    from pipelines.coordinator.saved import SavedShardError, _ipc
    from tests.coordinator.rowkit import Log

    log = Log(partition=3)
    log.commit("g", "t", 0, 1)
    data = replay_shards(to_table(log.rows), ReplayOptions(num_partitions=50), keep=True).saved[3].to_bytes()
    assert SavedShard.from_bytes(data, "x", 3, False).markers.num_rows == 0
    forged = _replaced(data, part, _ipc(pa.table({"offsets_partition": pa.array(["3"])})))
    name = ("open_history", "naming", "markers")[part - 1]
    with pytest.raises(SavedShardError, match=f"^x: unreadable saved shard: its {name} rows are of another layout"):
        SavedShard.from_bytes(forged, "x", 3, False)


def test_a_saved_shard_keeps_its_share_and_streams_groups_whole(tmp_path):
    """A share or streams group extends the consumer group's slotted type: its saved state is every slot of both
    (a subclass's `__slots__` names its own only), so the --incremental run after one resumes the same groups
    instead of failing ("'StreamsGroup' object has no attribute 'group_id'") on the share group's none."""
    from tests.coordinator.test_group_replay import _decoded, _share_group, _streams_group, _topology

    table = _decoded(tmp_path, [*_share_group("sg"), *_streams_group("st", topology=False), _topology("st")])
    opts = ReplayOptions(semantics="modern", kafka_version="4.2", snapshot_id="t", num_partitions=50)
    saved = replay_shards(table, opts, keep=True).saved[0]
    groups = saved.state.groups.groups
    assert {g: type(v).__name__ for g, v in groups.items()} == {"sg": "ShareGroup", "st": "StreamsGroup"}
    restored = SavedShard.from_bytes(saved.to_bytes(), "state", 0, True)
    assert restored.state.groups.groups == groups
    assert restored.state.groups.groups["st"].source_topics == ("test-topic1", "test-topic2")
