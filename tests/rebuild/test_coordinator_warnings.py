"""What a run says of the coordinator it emulates, from the tally of the records it read."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipelines.frames.tally import RunningTally, Tally
from pipelines.rebuild.coordinator_warnings import transaction_warnings
from tests.coordinator.rowkit import Log, to_table


def _tally(*logs: Log) -> Tally:
    running = RunningTally()
    for log in logs:
        running.add(to_table(log.rows))
    return Tally(running.result())


def _transactions(partition: int) -> Log:
    log = Log(partition=partition)
    log.commit("g", "t", 0, 5)
    with log.batch(pid=7, epoch=0, txn=True):
        log.commit("g", "t", 0, 9)
    log.marker(7, "COMMIT")
    log.marker(7, "ABORT")
    return log


@pytest.mark.parametrize("semantics,version,warned", [
    ("modern", "3.6", True), ("modern", "3.6.2", True), ("modern", "3.7", False), ("modern", "4.0", False),
    ("legacy", "3.6", False)])
def test_a_modern_run_of_kafka_3_6_names_the_partitions_whose_transactions_that_broker_would_not_load(
        semantics, version, warned):
    """Kafka 3.6's new coordinator has no transactions: `CoordinatorLoaderImpl` (3.6) throws "Control batches are
    not supported yet" at a transaction marker, so its broker does not load that partition, and
    `OffsetMetadataManager.replay` (3.6) reads a transactional offset commit as a plain one. A modern run of 3.6
    replayed them as 3.7 does and said nothing."""
    plain = Log(partition=2)
    plain.commit("g2", "t", 0, 1)
    got = transaction_warnings(SimpleNamespace(semantics=semantics, kafka_version=version),
                               _tally(_transactions(3), _transactions(11), plain))
    assert got == ([f"4 transaction marker(s) in offsets partition(s) 3, 11: Kafka {version}'s new coordinator has "
                    "no transactions (its load fails at a control batch, and it reads a transactional offset commit "
                    "as a plain one), so its broker would not load those partitions; this snapshot replays their "
                    "transactions as 3.7's new coordinator does"] if warned else [])


def test_a_modern_run_of_kafka_3_6_without_transactions_says_nothing():
    plain = Log(partition=2)
    plain.commit("g2", "t", 0, 1)
    assert transaction_warnings(SimpleNamespace(semantics="modern", kafka_version="3.6"), _tally(plain)) == []
