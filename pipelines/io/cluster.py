"""The Kafka cluster a dump comes from, and the one whose records a warehouse's history holds.

The history (`offset_commits`) keeps each record once by its position in the log, (offsets partition, record
offset): positions are a record's identity only within one cluster. Another cluster's log has records at the same
positions, so its records would be taken for ones the history holds and its commits never recorded. A run therefore
compares the cluster of its input with the warehouse's (`check`), before Spark starts.

A broker log dir says which cluster it belongs to: `meta.properties` (`cluster.id`, written by `kafka-storage
format` or by ZooKeeper-era brokers at first start), and each partition dir's `partition.metadata` names its topic's
id (KIP-516, Kafka 2.8+), unique per cluster and topic creation. Bare segment files and tabular dumps carry neither:
they are not checked. The warehouse's cluster is `<warehouse>/_cluster.json`, recorded by the first run whose
records go into the history, and completed by later ones (a dump of another broker holds other partitions).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from pipelines.decoding.log_names import OFFSETS_PARTITION_DIR
from pipelines.io import storage

CLUSTER_FILE = "_cluster.json"


@dataclass
class ClusterIdentity:
    """What identifies a cluster: its `cluster.id`s (one, unless inputs of several clusters are mixed) and the topic
    id of each `__consumer_offsets` partition seen, with where each was read."""

    cluster_ids: dict[str, str] = field(default_factory=dict)  # cluster.id -> a meta.properties it was read from
    topic_ids: dict[int, str] = field(default_factory=dict)  # offsets partition -> __consumer_offsets topic id
    topic_id_sources: dict[int, str] = field(default_factory=dict)  # offsets partition -> its partition.metadata
    # every __consumer_offsets topic id the inputs' partition dirs name -> a partition.metadata naming it
    topic_id_files: dict[str, str] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        return bool(self.cluster_ids or self.topic_ids)

    def describe(self) -> str:
        if self.cluster_ids:
            return "cluster.id " + ", ".join(sorted(self.cluster_ids))
        ids = sorted(set(self.topic_ids.values()))
        return "__consumer_offsets topic id " + ", ".join(ids[:3]) + (f" (+{len(ids) - 3} more)" if len(ids) > 3 else "")

    def to_json(self) -> dict:
        return {"cluster_id": next(iter(sorted(self.cluster_ids)), None),
                "offsets_topic_ids": {str(p): t for p, t in sorted(self.topic_ids.items())}}

    @classmethod
    def from_json(cls, data: dict) -> "ClusterIdentity":
        cid = data.get("cluster_id")
        return cls({cid: CLUSTER_FILE} if cid else {},
                   {int(p): t for p, t in (data.get("offsets_topic_ids") or {}).items()})

    def mixed(self) -> str | None:
        """Why these inputs are not one cluster's (None when they may be)."""
        if len(self.cluster_ids) > 1:
            return "the inputs come from different clusters: " + ", ".join(
                f"cluster.id {c} ({where})" for c, where in sorted(self.cluster_ids.items()))
        if len(self.topic_id_files) > 1:  # a broker refuses a partition dir of another topic id (a stray)
            return "the inputs hold different __consumer_offsets topics (recreated, or of another cluster): " + \
                ", ".join(f"topic id {t} ({where})" for t, where in sorted(self.topic_id_files.items()))
        return None

    def differs_from(self, held: "ClusterIdentity") -> str | None:
        """Why the input (self) is not the cluster `held` stands for; None when nothing says so."""
        if self.cluster_ids and held.cluster_ids:
            if set(self.cluster_ids) != set(held.cluster_ids):
                return f"the input is {self.describe()}, the warehouse's history is {held.describe()}'s"
            return None
        other = sorted(p for p in set(self.topic_ids) & set(held.topic_ids) if self.topic_ids[p] != held.topic_ids[p])
        if other:
            p = other[0]
            return (f"the input's __consumer_offsets-{p} is topic id {self.topic_ids[p]} "
                    f"({self.topic_id_sources.get(p, 'partition.metadata')}), the warehouse's history has "
                    f"{held.topic_ids[p]} there ({len(other)} partition{'' if len(other) == 1 else 's'} differ)")
        return None

    def joined(self, other: "ClusterIdentity") -> "ClusterIdentity":
        """This identity completed with what `other` (the same cluster) saw besides."""
        return ClusterIdentity({**other.cluster_ids, **self.cluster_ids}, {**other.topic_ids, **self.topic_ids},
                               {**other.topic_id_sources, **self.topic_id_sources})


def _properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def partition_metadata_topic_id(text: str) -> str | None:
    """The topic id a partition dir's `partition.metadata` names (Kafka's `PartitionMetadataFile`: `version: 0`, then
    `topic_id: <id>`), None without one."""
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}
    return fields.get("topic_id") or None


def _read_text(loc: "storage.Location") -> str | None:
    try:
        return loc.read_text() if loc.is_file() else None
    except (OSError, UnicodeDecodeError, storage.StorageError):
        return None


def of_inputs(plan) -> ClusterIdentity:
    """The identity the inputs' log dirs give (`plan`: `frames.decode.DecodePlan`): the `meta.properties` of the
    log dir above each `__consumer_offsets-N` dir a segment was found in, and that dir's `partition.metadata`."""
    identity = ClusterIdentity()
    partition_dirs = {}
    for item in plan.items:
        if item.get("kind") != "segment" or not item.get("path"):
            continue
        part_dir = storage.location(item["path"]).parent
        found = OFFSETS_PARTITION_DIR.match(part_dir.name)
        if found:
            partition_dirs.setdefault(part_dir.uri, (part_dir, int(found.group(1))))
    log_dirs = {}
    for part_dir, p in partition_dirs.values():
        log_dirs.setdefault(part_dir.parent.uri, part_dir.parent)
        meta = part_dir / "partition.metadata"
        topic_id = partition_metadata_topic_id(_read_text(meta) or "")
        if topic_id:
            identity.topic_ids[p] = topic_id
            identity.topic_id_sources[p] = str(meta)
            identity.topic_id_files.setdefault(topic_id, str(meta))
    for log_dir in log_dirs.values():
        meta = log_dir / "meta.properties"
        cid = _properties(_read_text(meta) or "").get("cluster.id")
        if cid:
            identity.cluster_ids.setdefault(cid, str(meta))
    return identity


class ClusterRecordDamaged(ValueError):
    """`_cluster.json` is there but holds no cluster identity as `record` writes it."""


def of_warehouse(root: "storage.Location") -> ClusterIdentity | None:
    """The cluster whose records the warehouse's history holds (None: not recorded). A record that is there but
    does not read as one raises `ClusterRecordDamaged`: taken for none, it switched the check off and was then
    overwritten with whatever cluster the run read."""
    loc = root / CLUSTER_FILE
    text = _read_text(loc)
    if text is None:
        if loc.exists():
            raise ClusterRecordDamaged(f"{loc} cannot be read as a file")
        return None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ClusterRecordDamaged(f"{loc} is not JSON ({e})") from None
    topics = data.get("offsets_topic_ids") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(data.get("cluster_id"), (str, type(None))) \
            or not isinstance(topics, (dict, type(None))) \
            or not all(k.isdigit() and isinstance(v, str) for k, v in (topics or {}).items()):
        raise ClusterRecordDamaged(f"{loc} is not a cluster record (a cluster_id and the offsets_topic_ids by "
                                   f"partition): {text[:60]!r}")
    return ClusterIdentity.from_json(data)


def record(root: "storage.Location", identity: ClusterIdentity) -> None:
    """`identity` recorded as the warehouse's (completing what is recorded), when it says anything."""
    if not identity.known:
        return
    held = of_warehouse(root)
    merged = identity if held is None else identity.joined(held)
    (root / CLUSTER_FILE).write_text(json.dumps(merged.to_json(), sort_keys=True, indent=1))
