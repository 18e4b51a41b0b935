"""Partition assignors, as the coordinator or the group leader runs them: range, round robin and a balanced sticky
one (standing in for the sticky, cooperative-sticky and uniform assignors). Over member ids and (topic idx,
partition) pairs, sorted first, so an assignment follows from its inputs alone."""
from __future__ import annotations

from simulator.topics import Topic


def assign_range(member_ids: list[str], topics: list[Topic]) -> dict[str, set]:
    out = {m: set() for m in member_ids}
    ms = sorted(member_ids)
    m = len(ms)
    for t in sorted(topics, key=lambda t: t.name):
        n = t.partitions
        q, r = divmod(n, m)
        for i, mid in enumerate(ms):
            start = i * q + min(i, r)
            for p in range(start, start + q + (1 if i < r else 0)):
                out[mid].add((t.idx, p))
    return out


def topic_partitions(topics: list[Topic]) -> list[tuple[int, int]]:
    """Every (topic idx, partition) of `topics`, topics by name."""
    return [(t.idx, p) for t in sorted(topics, key=lambda t: t.name) for p in range(t.partitions)]


def assign_roundrobin(member_ids: list[str], topics: list[Topic]) -> dict[str, set]:
    ms = sorted(member_ids)
    out = {m: set() for m in ms}
    for i, tp in enumerate(topic_partitions(topics)):
        out[ms[i % len(ms)]].add(tp)
    return out


def assign_sticky(member_ids: list[str], topics: list[Topic], previous: dict[str, set]) -> dict[str, set]:
    """Balanced and sticky: members keep what they owned up to the quota, the rest goes to the least loaded."""
    ms = sorted(member_ids)
    tps = topic_partitions(topics)
    valid = set(tps)
    quota = -(-len(tps) // len(ms))
    out = {m: set() for m in ms}
    taken = set()
    for m in ms:
        for tp in sorted(previous.get(m, ()))[:quota]:
            if tp in valid and tp not in taken:
                out[m].add(tp)
                taken.add(tp)
    for tp in tps:
        if tp not in taken:
            least = min(ms, key=lambda x: (len(out[x]), x))
            out[least].add(tp)
    while True:
        most = max(ms, key=lambda x: (len(out[x]), x))
        least = min(ms, key=lambda x: (len(out[x]), x))
        if len(out[most]) - len(out[least]) <= 1:
            return out
        tp = max(out[most])
        out[most].discard(tp)
        out[least].add(tp)
