"""The group replay's dispatch: the record types it names are Kafka's registry (spec §2.3), and every group record
the decoder emits reaches the replay of its record type."""
from __future__ import annotations

import re

import pytest

from pipelines.coordinator.groups import GroupStore
from pipelines.coordinator.loader import replay_group_records
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_rows
from schemas.record_types import CoordinatorRecordType
from tests.coordinator.rowkit import Log

_ROW = re.compile(r"^\| (\d+) \| ([^|]+)\|")


def _upper_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def test_record_types_are_the_specs_registry(shared_dir):
    """Every released key type of the spec's record-type registry, by its (latest) Kafka name; 18 never shipped."""
    spec = (shared_dir / "spec" / "offsets-topic.md").read_text()
    section = spec[spec.index("### 2.3 Record-type registry"):]
    section = section[:section.index("\n#", 1)]
    registry = {}
    for m in filter(None, map(_ROW.match, section.splitlines())):
        if not m.group(2).strip().startswith("("):  # parenthesized: never released
            registry[int(m.group(1))] = _upper_snake(re.findall(r"(\w+)Key\b", m.group(2))[-1])
    assert len(registry) == 23
    assert {t.value: t.name for t in CoordinatorRecordType} == registry


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_every_consumer_group_record_type_is_replayed(semantics):
    """One record of each KIP-848 type (3-8, 16) builds the group ConsumerGroupDescribe would show: nothing is
    dropped on the way to its replay, and each leaves its own event."""
    log = Log()
    rows = [log.cg_epoch("g", 3), log.cg_topics("g", [("ID-A", "a", 2)]), log.cg_member("g", "m"),
            log.cg_assignment_epoch("g", 3), log.cg_target("g", "m", [("ID-A", [0, 1])]),
            log.cg_current("g", "m", 3, [("ID-A", [0, 1])]), log.cg_regex("g", "a.*", ["a"])]
    tables = replay_rows(rows, ReplayOptions(semantics=semantics, snapshot_id="t", num_partitions=50))
    [group] = tables["loaded_groups"]
    assert (group["group_type"], group["generation"], group["assignment_epoch"], group["state"]) == \
        ("consumer", 3, 3, "Stable")
    [member] = tables["group_members"]
    assert member["assigned_partitions"] == member["target_partitions"] == [("a", 0), ("a", 1)]
    assert [e["event"] for e in tables["group_history"]] == [
        "group_epoch", "partition_metadata", "member_joined", "assignment_epoch", "target_assignment",
        "member_assignment", "regex"]


def test_rows_that_are_not_group_records_change_nothing():
    """A decode error or unknown key type among the loader's rows (whatever its key type) is no group record."""
    log = Log()
    store = GroupStore()
    replay_group_records(store, [{**log.error(), "key_type": 2, "group_id": "g"}, log.unknown(99)])
    assert store.groups == {} and store.history == []
