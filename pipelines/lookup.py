"""Kept so that older imports keep working: the one snapshot reader is `pipelines.io.snapshots`."""
from pipelines.io.snapshots import *  # noqa: F401,F403
from pipelines.io.snapshots import GroupNotFound, SnapshotReader, iso, jsonable  # noqa: F401
