"""What a run says of the coordinator it emulated: the records it skipped as that coordinator's loader skips them (a
key type or value version it does not know), the partitions whose load that coordinator would fail (a record its
replay throws on, a share group's offsets its cleanup throws on, a transaction marker 3.6's new coordinator fails
at), and a `--kafka-version` with no coordinator of the run's semantics. The replay and the tally record what
happened; these read it and say it, once, in the summary."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.expiry import ExpiryOptions
from pipelines.coordinator.options import (DEFAULT_KAFKA_VERSIONS, LEGACY, MODERN, NEW_COORDINATOR_SINCE,
                                          NEW_COORDINATOR_TRANSACTIONS_SINCE, OLD_COORDINATOR_UNTIL,
                                          limited_value_versions, old_coordinator_key_types, parse_kafka_version,
                                          unknown_group_key_types)
from pipelines.frames.tally import DecodedFacts, Tally, label_key_type
from pipelines.validation.accounting import SKIP_UNKNOWN_KEY, SKIP_UNKNOWN_VERSION, Accounting
from schemas.decoded import KIND_CONTROL, KIND_UNKNOWN

if TYPE_CHECKING:  # the fields' types only
    from pipelines.frames.segment_shards import LoadedOnSpark
    from pipelines.rebuild.request import RunSettings


def _first(items: list, n: int, name=str) -> str:
    """The first `n` of `items` named, and how many more: a warning names a few and counts the rest."""
    return ", ".join(map(name, items[:n])) + (f" and {len(items) - n} more" if len(items) > n else "")


def unknown_key_warnings(conf: RunSettings, accounting: Accounting, tally: Tally, facts: DecodedFacts) -> list[str]:
    """Kafka's loaders warn of each record of a key type they do not know and skip it (spec §5.4); the run says how
    many it skipped so, by record kind, as their groups (a consumer, share or streams group's, or a newer kind's)
    are not in the snapshot.
    The old coordinator before 3.4.1 (KAFKA-14869) knows types 0-2 (0.8, type 0) and aborts a partition's load at
    any other: its broker serves that partition with no groups (0.8's, with the offsets read before the record),
    which the run says rather than emulates."""
    out = []
    n = accounting.totals.records_skipped.get(SKIP_UNKNOWN_KEY)
    if n:
        unknown = unknown_group_key_types(conf.semantics, conf.kafka_version)
        kinds: dict[str, int] = {}
        for label, count in facts.counts.items():
            kind = (label or "").partition(":")[0]
            if kind == KIND_UNKNOWN or label_key_type(label) in unknown:
                kinds[kind] = kinds.get(kind, 0) + count
        by_kind = ", ".join(f"{kind} {count:,}" for kind, count in sorted(kinds.items()))
        out.append(f"{n:,} record(s) of key types the {conf.semantics} coordinator of Kafka {conf.kafka_version} does "
                   f"not know skipped ({by_kind}), as its loader skips them: what they build is not in this snapshot "
                   f"(accounting: {SKIP_UNKNOWN_KEY!r}){_newer_coordinators_know(conf, facts, unknown)}")
    if conf.semantics == LEGACY and parse_kafka_version(conf.kafka_version) < (3, 4, 1):
        known = old_coordinator_key_types(conf.kafka_version)
        aborted = tally.partitions_with_key_types_beyond(known)
        if aborted:
            shown = _first(aborted, 10)
            # 0.8's `OffsetManager` put each offset in its cache as it read it: what came before the record stays
            fate = ("with only the offsets read before that record" if known == {0} else "with no groups")
            out.append(f"Kafka {conf.kafka_version}'s loader aborts the load of an offsets partition at a record of "
                       f"a key type but {'0-2' if len(known) > 1 else '0'} (it knows "
                       f"{'those' if len(known) > 1 else 'that'} only; 3.4.1+ skips the others): its broker would "
                       f"serve partition(s) {shown} {fate}; this snapshot holds what their records give")
    return out


def unknown_version_warnings(conf: RunSettings, tally: Tally) -> list[str]:
    """An offset commit or group metadata value of a version the emulated coordinator does not read (v4 before
    3.4.1, type 0's v1-v4 from 4.1, ...: `limited_value_versions`) fails its partition's load in Kafka (spec §5.4,
    §8 item 7): the old coordinator's broker serves that partition with no groups, the new one's does not load it.
    The replay skips the record rather than guess; the run says so, with the partitions a broker would not load."""
    known = limited_value_versions(conf.semantics, conf.kafka_version)
    beyond = tally.beyond_value_versions(known)
    if not beyond:
        return []
    by_version: dict[tuple[str, int], int] = {}
    for (_, label, version), n in beyond.items():
        by_version[(label, version)] = by_version.get((label, version), 0) + n
    found = ", ".join(f"{label} v{version} {n:,}" for (label, version), n in sorted(by_version.items()))
    reads = ", ".join(f"type {t} v0" + (f"-v{v}" if v else "") for t, v in known)
    parts = sorted({p for p, _, _ in beyond if p is not None})
    shown = _first(parts, 10)
    fate = (f"its broker would serve offsets partition(s) {shown} with no groups" if conf.semantics == LEGACY
            else f"its broker would not load offsets partition(s) {shown} and serve no group of them")
    return [f"{sum(by_version.values()):,} record(s) of value versions the {conf.semantics} coordinator of Kafka "
            f"{conf.kafka_version} does not read ({found}; it reads {reads}) skipped: its load of a partition fails "
            f"at such a record, so {fate}; this snapshot holds what their other records give (accounting: "
            f"{SKIP_UNKNOWN_VERSION!r})"]


def semantics_warnings(conf: RunSettings) -> list[str]:
    """A `--kafka-version` whose broker has no coordinator of the run's semantics: the replay emulates that
    coordinator as the nearest version had it, which no broker of the version named would give; the run says so
    and how to emulate that broker."""
    version = parse_kafka_version(conf.kafka_version)
    if conf.semantics == MODERN and version < NEW_COORDINATOR_SINCE:
        return [f"Kafka {conf.kafka_version} has no new group coordinator (it came with 3.6): this modern run loads "
                f"the log as the 3.x one does; give --semantics legacy to load it as that broker does"]
    if conf.semantics == LEGACY and version >= OLD_COORDINATOR_UNTIL:
        return [f"Kafka {conf.kafka_version} has no old group coordinator (the new one is its only one from 4.1): "
                f"this legacy run loads the log as 3.x's old one does; give --semantics modern to load it as that "
                f"broker does"]
    return []


def transaction_warnings(conf: RunSettings, tally: Tally) -> list[str]:
    """Kafka 3.6's new coordinator has no transactions: its loader throws at a control batch ("Control batches are
    not supported yet", `CoordinatorLoaderImpl` 3.6), so its broker does not load a partition holding a transaction
    marker, and its replay reads a transactional offset commit as a plain one (`OffsetMetadataManager.replay` 3.6).
    A modern run emulating 3.6 replays their transactions as 3.7's new coordinator does, the first with them; the
    run names the partitions such a broker would not load."""
    version = parse_kafka_version(conf.kafka_version)
    if conf.semantics != MODERN or not NEW_COORDINATOR_SINCE <= version < NEW_COORDINATOR_TRANSACTIONS_SINCE:
        return []
    markers: dict[int, int] = {}
    for p, label, n in zip(*(tally.table.column(c).to_pylist() for c in ("offsets_partition", "label", "n"))):
        if p is not None and (label or "").partition(":")[0] == KIND_CONTROL:
            markers[p] = markers.get(p, 0) + n
    if not markers:
        return []
    parts = sorted(markers)
    shown = _first(parts, 10)
    return [f"{sum(markers.values()):,} transaction marker(s) in offsets partition(s) {shown}: Kafka "
            f"{conf.kafka_version}'s new coordinator has no transactions (its load fails at a control batch, and it "
            f"reads a transactional offset commit as a plain one), so its broker would not load those partitions; "
            f"this snapshot replays their transactions as 3.7's new coordinator does"]


def skipped_group_records(events, loaded: LoadedOnSpark | None = None, earlier: bool = False
                          ) -> list[tuple[int | None, str]]:
    """(offsets partition, group id) of each group record `events` (a `group_history`) says the replay skipped, as
    the coordinator's load fails on it (event `skipped`). Arrow is read here; the shards' history on Spark is not:
    their tasks named what they skipped (`loaded`, `frames.segment_shards.LoadedOnSpark.skipped_groups`), so a run
    asks no Spark job for them. Only where the earlier runs' events an incremental run carries forward may hold some
    too (`earlier`: `incremental.plan.IncrementalStart.earlier_load_failures`) is the history read on Spark."""
    if events is None:
        return []
    if isinstance(events, pa.Table):
        skipped = events.filter(pc.equal(events.column("event"), "skipped"))
        return list(zip(*(skipped.column(c).to_pylist() for c in ("offsets_partition", "group_id"))))
    if not earlier and loaded is not None:
        return loaded.skipped_groups
    from pyspark.sql import functions as F  # imported here: pyspark's import is slow (python -X importtime)

    frame = events.frame() if hasattr(events, "frame") else events
    return [(r[0], r[1]) for r in frame.filter(F.col("event") == "skipped")
            .select("offsets_partition", "group_id").collect()]


def load_failure_warnings(rows: list[tuple[int | None, str]]) -> list[str]:
    """A group record the coordinator's replay throws on (a GroupMetadata value whose members it cannot all add,
    `groups.refused_member`; the new coordinator's: a consumer, share or streams record for an id holding a group of
    another type, not a simple one: `IllegalStateException`; a share / streams value no known layout reads; 4.0's
    share records (3.x's consumer group records) of no group or member, `GroupStore.early`; a tombstone out of the
    order the coordinator deletes in) fails its partition's load, and the broker serves that partition with no groups
    (spec §5.3, §8 item 15). The replay skips the record (its `group_history` event `skipped`); the
    run says which partitions a broker would not load, rather than a snapshot that only looks whole. `rows`: the
    records skipped so (`skipped_group_records`), an incremental run's with the earlier runs', which its log still
    holds."""
    if not rows:
        return []
    partitions = sorted({p for p, _ in rows if p is not None})
    groups = sorted({g for _, g in rows})
    shown = _first(groups, 5, repr)
    return [f"{len(rows):,} group record(s) the coordinator's load fails on (a GroupMetadata value repeating a "
            f"member id before another member or a static member's instance id, a record of a group type other than "
            f"its id's group, a value no layout reads, a 4.0 share or 3.x consumer group record of no group or member, "
            f"or a tombstone out of the coordinator's deletion order: group(s) {shown}) were skipped; its broker would "
            f"not load offsets partition(s) {', '.join(map(str, partitions))} and serve no group of them; this "
            f"snapshot holds what their other records give (group_history event 'skipped')"]


def cleanup_failure_warnings(expiry: ExpiryOptions | None, in_hand: dict[str, pa.Table]) -> list[str]:
    """A share group holding offsets fails 4.0's cleanup pass of its partition (`ExpiryOptions
    .share_offsets_fail_cleanup`): the replay expires nothing there, as the broker; the run says which partitions
    and groups, as a snapshot whose offsets never expire would otherwise look like retention kept them."""
    if expiry is None or not expiry.share_offsets_fail_cleanup:
        return []
    groups = in_hand["loaded_groups"]
    share = groups.filter(pc.equal(groups.column("group_type"), "share"))
    if not share.num_rows:
        return []
    held = set()
    for name in ("loaded_offsets", "empty_group_offsets"):
        held.update(pc.unique(in_hand[name].column("group_id")).to_pylist())
    failing = sorted((p, g) for p, g in zip(share.column("offsets_partition").to_pylist(),
                                            share.column("group_id").to_pylist()) if g in held)
    if not failing:
        return []
    partitions = sorted({p for p, _ in failing})
    groups_shown = _first([g for _, g in failing], 5, repr)
    return [f"share group(s) {groups_shown} hold committed offsets, on which Kafka {expiry.kafka_version}'s "
            f"cleanup throws (ShareGroup.offsetExpirationCondition): its broker expires no offset and deletes no "
            f"group in offsets partition(s) {', '.join(map(str, partitions))}, nor does this snapshot"]


#: the new coordinators a modern run on the default version is pointed to when they are newer and know records it
#: skipped
_NEWER_MODERN_VERSIONS = ("4.0", "4.1")


def _newer_coordinators_know(conf: RunSettings, facts: DecodedFacts, unknown: frozenset[int]) -> str:
    """A modern run on the default `--kafka-version` (4.0, whose coordinator knows no streams group) says how many
    of the records it skipped a newer one would have replayed, and how to emulate it: a newer log read as its own
    broker reads it is a flag away, where the default alone would hide its groups."""
    if conf.semantics != MODERN or conf.kafka_version != DEFAULT_KAFKA_VERSIONS[MODERN]:
        return ""
    known, newer_versions = [], [v for v in _NEWER_MODERN_VERSIONS
                                 if parse_kafka_version(v) > parse_kafka_version(conf.kafka_version)]
    for version in newer_versions:
        newer = unknown - unknown_group_key_types(MODERN, version)
        n = sum(c for label, c in facts.counts.items() if label_key_type(label) in newer)
        if n:
            known.append(f"{version}'s {n:,}" if known else f"Kafka {version}'s coordinator would replay {n:,} of them")
    if not known:
        return ""
    return (f"; {conf.kafka_version} is the default --kafka-version (rebuild.kafka_version): {', '.join(known)}; "
            f"give --kafka-version {' or '.join(newer_versions)} to emulate that broker")
