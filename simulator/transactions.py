"""Transactions: the transactional producers of classic groups (TxnOffsetCommit) and what the transaction
coordinator does with their transactions: a COMMIT (mostly) or ABORT marker in the group's offsets partition a
little after the commit, an abort for a producer that goes away, a few transactions left open at the end."""
from __future__ import annotations

import heapq
from random import Random
from typing import TYPE_CHECKING

from simulator.clock import Clock
from simulator.stats import SampleStats

if TYPE_CHECKING:
    from simulator.classic_group import ClassicGroup

COMMIT, ABORT = 1, 0  # control record types


class Producer:
    __slots__ = ("pid", "epoch", "open_tps", "group", "designated_open")

    def __init__(self, pid: int, epoch: int, group: ClassicGroup):
        self.pid = pid
        self.epoch = epoch
        self.open_tps = None  # the partitions of the open transaction, or None
        self.group = group
        self.designated_open = False  # its last transaction stays open at the end of the timeline


class TransactionCoordinator:
    """Hands out producer ids and writes each transaction's marker when it falls due (`fire_markers`)."""

    def __init__(self, rng: Random, clock: Clock, stats: SampleStats):
        self.rng = rng
        self.clock = clock
        self.stats = stats
        self.coordinator_epoch = rng.randint(0, 3)  # every marker's EndTxnMarker.coordinatorEpoch
        self.next_pid = 1000 + rng.randint(0, 5000)
        self.producers: list[Producer] = []
        self.markers: list[tuple] = []  # heap of (due ts, seq, producer, outcome)
        self.marker_seq = 0
        self.txn_seq = 0

    def new_producer(self, group: ClassicGroup) -> Producer:
        p = Producer(self.next_pid, self.rng.randint(0, 40), group)
        self.next_pid += self.rng.randint(1, 7)
        self.producers.append(p)
        return p

    def retire_producer(self, p: Producer) -> None:
        """A producer that goes away with a transaction open gets it aborted by the transaction coordinator."""
        if p.open_tps is not None:
            for i, item in enumerate(self.markers):
                if item[2] is p:
                    self.markers[i] = (item[0], item[1], p, ABORT)
            p.designated_open = False

    def txn_started(self, producer: Producer, tps, ts: int) -> None:
        producer.open_tps = tps
        self.txn_seq += 1
        n = self.txn_seq
        # the first transaction commits and the second aborts, so even a small sample has both
        outcome = COMMIT if n == 1 else ABORT if n == 2 else (COMMIT if self.rng.random() < 0.82 else ABORT)
        self.marker_seq += 1
        heapq.heappush(self.markers, (ts + self.rng.randint(5, 120), self.marker_seq, producer, outcome))

    def fire_markers(self, until: int) -> None:
        markers = self.markers
        while markers and markers[0][0] <= until:
            _due, _seq, producer, outcome = heapq.heappop(markers)
            self.write_marker(producer, outcome)

    def write_marker(self, producer: Producer, outcome: int) -> None:
        log = producer.group.log
        log.write_marker(outcome, self.coordinator_epoch, producer.pid, producer.epoch, log.tick())
        producer.open_tps = None
        if outcome == COMMIT:
            self.stats.transactions_committed += 1
        else:
            self.stats.transactions_aborted += 1
            if self.rng.random() < 0.4:
                producer.epoch += 1  # the application re-initialised its producer after the abort

    def finish(self) -> None:
        """End of the timeline: every transaction still pending gets its marker, but those designated to stay open."""
        pending = sorted(self.markers)
        self.markers = []
        for _due, _seq, producer, outcome in pending:
            if producer.designated_open and producer.open_tps is not None:
                self.stats.transactions_open += 1
                continue
            self.clock.now += self.rng.randint(0, 2)
            self.write_marker(producer, outcome)
