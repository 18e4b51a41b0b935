"""`offsetlake reset-plan`: the file `kafka-consumer-groups.sh --reset-offsets --from-file FILE --group G` reads
to put a group back to a snapshot's committed offsets.

Format (ConsumerGroupCommand `parseResetPlan`, single-group form, Kafka 2.x–4.x): one `topic,partition,offset`
line per partition, no header — the multi-group form `group,topic,partition,offset` is used only when several
`--group`s are given. Kafka reads it with Jackson's CSV mapper (older versions split on `,`), so a topic must
not contain a comma, quote or line break; legal Kafka topic names never do.
"""
from __future__ import annotations

import re

from pipelines.serving.index import SnapshotIndex

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's Topic.validate


def legal_topic(topic: str | None) -> bool:
    """Whether Kafka's `Topic.validate` takes `topic` (4.0 `Topic.detectInvalidTopic`; a commit's key holds whatever
    a client sent): the whole name, where a `$` let a trailing newline through, which split its plan's CSV row."""
    return topic is not None and topic not in (".", "..") and _LEGAL_TOPIC.fullmatch(topic) is not None


def reset_refused(state: str | None) -> bool:
    """`kafka-consumer-groups --reset-offsets` resets only a group with no active members (`ConsumerGroupCommand`:
    "Assignments can only be reset if the group is inactive"): any state but Empty or Dead (None: no such group)."""
    return state is not None and state not in ("Empty", "Dead")

def reset_plan(idx: SnapshotIndex, group_id: str) -> tuple[str, list[str]]:
    """The CSV text and warnings (partitions left out and why). Raises GroupNotFound, ValueError (no offsets)."""
    if not idx.exists(group_id):
        raise idx.not_found(group_id)
    lines, warnings = [], []
    for o in idx.group_offsets(group_id, ["topic", "partition", "committed_offset"]):
        topic, part, off = o["topic"], o["partition"], o["committed_offset"]
        if not legal_topic(topic):
            warnings.append(f"skipped {topic!r}-{part}: not a legal Kafka topic name")
            continue
        if off is None or off < 0:
            warnings.append(f"skipped {topic}-{part}: committed offset {off} cannot be reset to")
            continue
        lines.append(f"{topic},{part},{off}\n")
    if not lines:
        raise ValueError(f"group {group_id!r} has no committed offset to reset to in snapshot {idx.snapshot.snapshot_id!r}")
    state = idx.group(group_id).get("state")
    if reset_refused(state):
        warnings.append(
            f"group {group_id!r} was {state} in this snapshot; kafka-consumer-groups resets only an inactive group "
            "(stop its consumers first)"
        )
    return "".join(lines), warnings
