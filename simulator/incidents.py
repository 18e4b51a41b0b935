"""Named incidents on the sample's timeline (`offsetlake sample --duration D --incident KIND@TIME`), each written as
the brokers write what causes it, at exactly TIME, so a rehearsal finds in the log what a real incident leaves there:

* `reset`: `kafka-consumer-groups --reset-offsets --all-topics --to-offset 0 --execute` on a Stable classic group,
  the one with the most partitions committed then. The tool refuses a group with members, so its consumers are
  stopped first: a little before TIME the group becomes Empty (its Empty GroupMetadata, as `leave_all` writes it).
  At TIME the tool's one OffsetCommit request (`Admin.alterConsumerGroupOffsets`: no member, generation -1, no
  leader epoch, empty metadata, no expire timestamp) sets every partition the group has an offset for to 0, one
  batch. A few minutes later the consumers are back (a new generation) and commit on from 0. (0 on every partition:
  the data topics' log start offsets are drawn after the offsets topic is written, which never depends on them; a
  data partition whose log starts past 0 in the dump lost those records to retention after the reset.)
* `rewind`: a consumer's bug: one member of a Stable classic group (the one owning the most committed partitions)
  commits every partition it owns `REWIND_BY` lower (at least 0) at TIME, one OffsetCommit request with its leader
  epoch, as any commit of its; the group commits on from there.
* `delete`: `kafka-consumer-groups --delete` (DeleteGroups) on a classic, simple or KIP-848 group with offsets (the
  more it has, the likelier). The broker refuses a group with members (GROUP_NOT_EMPTY), so a classic or KIP-848
  group's members leave a little before TIME; at TIME the offset tombstones and the group tombstone(s), one batch,
  as every deletion is written (`delete_group`). The group stays gone.

A victim is chosen when its incident starts, from the groups in the right state then (never a transactional group,
one of the groups the sample deletes at its end, nor an earlier incident's), with a generator of the incidents' own
seeded from the sample's: the same arguments give the same victims, and the same sample without its incidents is the
same up to them. Every other group goes on as it would, but from `QUIET_MS` before the first incident to `QUIET_MS`
after the last no other group's offsets are deleted, so every group `changes` reports damaged in that window is an
incident's: the drill's answer is exact. (The groups the sample deletes at its end are deleted at its end, or kept
when that end is in the window.)
"""
from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from random import Random
from typing import TYPE_CHECKING, Callable

from pipelines.times import TimeFormatError, ms_to_iso, parse_duration_ms, parse_time_ms
from simulator.classic_group import ClassicGroup
from simulator.consumer_group import ConsumerGroup
from simulator.groups import Group, SimpleGroup

if TYPE_CHECKING:
    from simulator.cluster import Cluster

KINDS = ("reset", "delete", "rewind")
REWIND_BY = 500  # offsets a `rewind` goes back on each partition
QUIET_MS = 5 * 60_000  # around the incidents: no other group's offsets deleted
FIRST_AT_MS = 60_000  # an incident may start this long after the timeline's start: its victim must be Stable by then
# how long before TIME the victim's consumers stop (the reset tool and DeleteGroups both need an Empty group), and how
# long after a reset they are back: a person running the tool by hand
STOP_BEFORE_MS = (20_000, 50_000)
BACK_AFTER_MS = (60_000, 240_000)
_SPEC = re.compile(r"(?P<kind>[a-z]+)@(?P<time>.+)")


class IncidentError(ValueError):
    """An incident that cannot be placed: a bad spec, a time outside the timeline, no group to be its victim."""


@dataclass(frozen=True)
class IncidentSpec:
    """`KIND@TIME` as asked: TIME either `+D` (this long after the timeline's start) or an absolute TIME."""

    kind: str
    text: str  # as the user wrote it, for the summary and errors
    after_start_ms: int | None = None
    at_ms: int | None = None

    def time_ms(self, start_ms: int) -> int:
        return self.at_ms if self.at_ms is not None else start_ms + self.after_start_ms


def parse_incident(text: str) -> IncidentSpec:
    """`reset@+60m`, `delete@+1h15m`, `rewind@2026-11-01T01:30:00Z` -> an IncidentSpec; IncidentError otherwise.
    An absolute TIME goes through the project's one parser (`pipelines.times.parse_time_ms`), an offset through its
    duration parser."""
    m = _SPEC.fullmatch(text.strip())
    if not m:
        raise IncidentError(f"--incident: {text!r} is not KIND@TIME (KIND one of {', '.join(KINDS)}; TIME +90m after "
                            "the timeline's start, or an ISO-8601 time)")
    kind, when = m.group("kind"), m.group("time").strip()
    if kind not in KINDS:
        raise IncidentError(f"--incident: {text!r}: no incident kind {kind!r} (one of {', '.join(KINDS)})")
    try:
        if when.startswith("+"):
            return IncidentSpec(kind, text, after_start_ms=parse_duration_ms(when[1:], what=f"--incident {text}"))
        if when == "now":
            raise TimeFormatError(f"--incident {text}: 'now' is not on the sample's timeline (it starts at "
                                  f"2026-11-01T00:00:00Z); give +D after its start or an ISO-8601 time")
        return IncidentSpec(kind, text, at_ms=parse_time_ms(when, what=f"--incident {text}"))
    except TimeFormatError as e:
        raise IncidentError(str(e)) from None


@dataclass
class Incident:
    """What one incident did, as the summary prints it."""

    spec: IncidentSpec
    time_ms: int = 0
    group: Group | None = None
    partitions: int = 0  # partitions reset, rewound, or whose offsets the deletion removed
    emptied_ms: int | None = None  # the victim's consumers stopped (its Empty record, or its last member's leave)
    back_ms: int | None = None  # a reset's consumers back
    member_id: str | None = None  # a rewind's member

    def as_dict(self) -> dict:
        g = self.group
        return {"kind": self.spec.kind, "asked": self.spec.text, "time_ms": self.time_ms,
                "time": ms_to_iso(self.time_ms).replace("+00:00", "Z"), "group_id": g.gid,
                "group_type": _group_type(g), "offsets_partition": g.log.index, "partitions": self.partitions,
                "emptied_ms": self.emptied_ms, "back_ms": self.back_ms, "member_id": self.member_id}


def _group_type(g: Group) -> str:
    if isinstance(g, ConsumerGroup):
        return "consumer"
    return "simple" if isinstance(g, SimpleGroup) else "classic"


class Incidents:
    """The incidents of one timeline: their events in time order (`due`, `fire_next`), the victims held out of the
    timeline while their consumers are stopped (`Group.held`), and the quiet window (`quiet`)."""

    def __init__(self, cluster: Cluster, specs: tuple[IncidentSpec, ...], start_ms: int, end_ms: int):
        self.cluster = cluster
        self.done: list[Incident] = []
        self.events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        # its own generator: the world and every record before the incidents' window are those of the same sample
        # without them
        rng = self.rng = Random(f"incidents:{cluster.stats.seed}")
        times = []
        for spec in specs:
            t = spec.time_ms(start_ms)
            if not start_ms + FIRST_AT_MS <= t < end_ms:
                raise IncidentError(
                    f"--incident {spec.text}: {_iso(t)} is not on the timeline: incidents go from "
                    f"{_iso(start_ms + FIRST_AT_MS)} (its first minute, its groups are forming) to "
                    f"{_iso(end_ms)} (its end: --duration)")
            times.append(t)
            inc = Incident(spec)
            self.done.append(inc)
            if spec.kind == "reset":
                stop, back = rng.randint(*STOP_BEFORE_MS), rng.randint(*BACK_AFTER_MS)
                self._at(t - stop, lambda inc=inc: self._stop(inc, self._reset_victim))
                self._at(t, lambda inc=inc: self._reset(inc))
                self._at(t + back, lambda inc=inc: self._back(inc))
            elif spec.kind == "delete":
                stop = rng.randint(*STOP_BEFORE_MS)
                self._at(t - stop, lambda inc=inc: self._stop(inc, self._delete_victim))
                self._at(t, lambda inc=inc: self._delete(inc))
            else:
                self._at(t, lambda inc=inc: self._rewind(inc))
        self.quiet_from = min(times) - QUIET_MS if times else 0
        self.quiet_to = max(times) + QUIET_MS if times else -1

    # -- the schedule --------------------------------------------------------------------------------------------
    def _at(self, at_ms: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at_ms, self._seq, fn))

    @property
    def pending(self) -> bool:
        return bool(self.events)

    def due(self) -> int | None:
        """When the next event happens (None: none left)."""
        return self.events[0][0] if self.events else None

    def fire_next(self) -> None:
        """The next event, at its own time (the cluster's clock is set to it first)."""
        at, _, fn = heapq.heappop(self.events)
        clock = self.cluster.clock
        clock.now = max(clock.now, at)
        fn()

    def quiet(self, now_ms: int) -> bool:
        """Whether `now_ms` is in the incidents' window, where no other group's offsets are deleted."""
        return self.quiet_from <= now_ms <= self.quiet_to

    def records(self) -> list[dict]:
        return [inc.as_dict() for inc in self.done]

    # -- victims -------------------------------------------------------------------------------------------------
    def _may_be_victim(self, g: Group) -> bool:
        return (g.created and not g.held and not g.deleted and not g.deleted_at_end and not g.victim
                and not getattr(g, "transactional", False) and any(o > 0 for o in g.committed.values()))

    def _reset_victim(self, spec: IncidentSpec) -> Group:
        # the reset of many partitions the drill looks for: the Stable classic group with the most committed
        stable = [g for g in self.cluster.groups if type(g) is ClassicGroup and g.members and self._may_be_victim(g)]
        if not stable:
            raise self._none(spec, "Stable classic group with committed offsets")
        return min(stable, key=lambda g: (-len(g.committed), g.gid))

    def _delete_victim(self, spec: IncidentSpec) -> Group:
        kinds = (ClassicGroup, SimpleGroup, ConsumerGroup)  # a Connect group commits no offsets
        some = [g for g in self.cluster.groups if type(g) in kinds and self._may_be_victim(g)]
        if not some:
            raise self._none(spec, "group with committed offsets")
        # a mistaken deletion hurts most where there is most to lose: a group with more offsets is likelier
        return self.rng.choices(some, weights=[len(g.committed) for g in some])[0]

    def _none(self, spec: IncidentSpec, what: str) -> IncidentError:
        when = _iso(self.cluster.clock.now)  # when the victim is chosen: its consumers stop then
        return IncidentError(f"--incident {spec.text}: no {what} at {when} to be its victim (none yet, or every one "
                             "is another incident's): place it later or give more --groups")

    # -- the incidents -------------------------------------------------------------------------------------------
    def _stop(self, inc: Incident, choose: Callable[[IncidentSpec], Group]) -> None:
        """The victim's consumers stop: the group becomes Empty (a simple group has no members to stop)."""
        g = choose(inc.spec)
        g.victim = g.held = True
        inc.group = g
        if isinstance(g, ClassicGroup) and g.members:
            g.leave_all()
            inc.emptied_ms = g.log.last_ts
        elif isinstance(g, ConsumerGroup) and g.members:
            for mid in sorted(g.members):
                g.leave(g.members[mid])
            inc.emptied_ms = g.log.last_ts

    def _reset(self, inc: Incident) -> None:
        g = inc.group
        ts = g.log.tick()
        targets = {tp: 0 for tp in sorted(g.committed)}  # --all-topics: every partition the group has an offset for
        g.log.write(g.commit_at(targets, ts, leader_epoch=False), new_batch=True)  # one request of its own
        inc.time_ms, inc.partitions = ts, len(targets)

    def _back(self, inc: Incident) -> None:
        g = inc.group
        g.held = False
        g.join_all()  # new members, a new generation; their commits go on from 0
        inc.back_ms = g.log.last_ts

    def _delete(self, inc: Incident) -> None:
        g = inc.group
        inc.partitions = len(g.committed)
        g.delete_group()
        inc.time_ms = g.log.last_ts

    def _rewind(self, inc: Incident) -> None:
        spec = inc.spec
        candidates = []
        for g in self.cluster.groups:
            if type(g) is ClassicGroup and g.members and self._may_be_victim(g):
                m = max(g.members, key=lambda m: sum(g.committed.get(tp, 0) > 0 for tp in m.owned_list))
                if any(g.committed.get(tp, 0) > 0 for tp in m.owned_list):
                    candidates.append((g, m))
        if not candidates:
            raise self._none(spec, "Stable classic group whose members own committed partitions")
        g, m = self.rng.choice(candidates)
        g.victim = True
        targets = {tp: max(0, g.committed[tp] - REWIND_BY) for tp in m.owned_list if g.committed.get(tp, 0) > 0}
        ts = g.log.tick()
        g.log.write(g.commit_at(targets, ts, leader_epoch=True), new_batch=True)  # the member's one request
        inc.group, inc.member_id, inc.time_ms, inc.partitions = g, m.member_id, ts, len(targets)


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _iso(ms: int) -> str:
    return ms_to_iso(ms).replace("+00:00", "Z")


def summary_line(d: dict) -> str:
    """One incident as `offsetlake sample` prints it: what, the exact time (ISO-8601 and epoch ms), the group."""
    kind = d["kind"]
    if kind == "reset":
        what = (f"{_n(d['partitions'], 'partition')} reset to 0 (kafka-consumer-groups --reset-offsets --to-offset 0 "
                f"--execute); Empty from {_iso(d['emptied_ms'])}, consumers back at {_iso(d['back_ms'])}")
    elif kind == "rewind":
        what = f"{_n(d['partitions'], 'partition')} committed {REWIND_BY} lower by member {d['member_id']}"
    else:
        what = f"deleted with its {_n(d['partitions'], 'offset')} (DeleteGroups)" + (
            f"; Empty from {_iso(d['emptied_ms'])}" if d["emptied_ms"] is not None else "")
    return (f"incident {d['asked']}: {d['time']} ({d['time_ms']}) group {d['group_id']!r} ({d['group_type']}, "
            f"__consumer_offsets-{d['offsets_partition']}): {what}")
