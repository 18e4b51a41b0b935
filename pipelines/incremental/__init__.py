"""`rebuild --incremental`: start from the latest succeeded scheduled snapshot's checkpoint, decode only the new bytes.

`plan` decides full or incremental and what to decode; `checkpoint` saves what a run read for the next one.

Exact by construction. Every run (incremental or not) saves, next to its snapshot:

* ``<warehouse>/_state/<snapshot_id>/decoded-<random>/`` — each offsets partition's shard as loading left it
  (`coordinator.saved`: the loader's state, the history rows of transactions still open, the records naming topic
  ids, each producer's last markers), a file per partition. Its size follows the coordinator's state, not the log.
  A state saved by an older version (decoded rows) means a full rebuild, with that reason. A what-if run
  (``--as-of``, ``--until-*``) saves none: it is always a full run, and the chain goes on from the latest scheduled
  snapshot as if it had not happened.
* ``<warehouse>/_checkpoints/<snapshot_id>.json`` (`io.checkpoint.write_checkpoint`, atomic) — what was read:
  semantics, the ``num_partitions`` setting, until bounds, the newest record timestamp and the highest offsets
  partition of ALL rows seen so far (error/unknown rows included, as a full run counts them), and per offsets
  partition every segment file read: name, base offset, size, bytes consumed (up to the end of the last entry
  that could be framed; what follows — a torn or zero tail — is read again next time), sha256 of its first
  ``min(64 KiB, consumed)`` bytes and of the last consumed entry's bytes, plus the partition's next offset; the
  sha256 of each saved shard's file (another file's bytes of the same size fail the run that reads them); sealed
  with the sha256 of its own fields (`io.checkpoint.SEAL`): one edited into other valid values is damaged, and one
  without it (written before checkpoints were sealed) is a full rebuild too: nothing tells its fields from edited ones.

An incremental run checks that today's input EXTENDS that checkpoint — every checkpointed file still there, same
head and last-entry bytes, at least ``consumed`` bytes long; no file before the checkpoint's log start and no new
file overlapping offsets already read; the same log start its log dir's `log-start-offset-checkpoint` names; same
semantics, same read policy (``rebuild.replay_corrupt_batches``,
``decode.max_batch_bytes``: which records are replayed), same ``num_partitions`` setting, no until bounds now or
then, no tabular dump now or then — and otherwise falls back to a full rebuild with the reason. It then decodes
only the new bytes (a checkpointed file from its ``consumed`` position, a new file from 0: work items carry a
``start_position``, reported positions stay absolute) and loads the new rows onto the saved shards, as Kafka's
coordinator goes on replaying what is appended to a partition it holds. The new rows are
exactly the full run's rows after the checkpoint because the framing walk is the decoder's
(`FileLogInputStream.nextBatch`: an entry is read or not, reading resumes at an entry boundary, nothing is read
twice or skipped), and loading any later rows onto a saved shard gives what loading all earlier rows with them
gives (the defining property of `coordinator.saved`, tested on generated logs cut at batch boundaries). The
replay is the engine's, as in a full run (when the new bytes are decoded in the driver and the saved shards hold
at most ``rebuild.local_replay_max_rows`` state entries: in-process, or on one task per core from
``rebuild.resume_tasks_min_rows`` rows on when that is set, `frames.resumed`). The newest timestamp (default ``as_of``
and the load time) and the highest partition come from
the checkpoint's totals combined with the new rows, so rows not kept in the state still count. Expiry, validation
and the write then run as usual on the union: the snapshot tables are the full run's.

Accounting of an incremental run covers the NEW bytes only: ``records_in``/``records_out``/``records_quarantined``,
the record-type counts, the ``accounting`` check and the ``quarantine`` table describe the records decoded in this
run (quarantine of older bytes is in the snapshot that first read them); discovery problems of the current input
(e.g. an unreadable path, a `.swap` file) are not bytes of any segment and are reported by every run.
``offset_commits`` of such a run holds its new records and the saved open transactions' records (a marker since
may have decided them); the history merge is told each partition's ``next_offset``
(`IncrementalStart.next_offsets`): rows below it are in the history already and can only decide a pending row, so
it reads back only the files that may hold one (`Warehouse._merge_offset_commits`).

Not detected (documented limit): a rewrite of an already-consumed file that keeps its first 64 KiB, its size at
least ``consumed`` and the bytes of its last consumed entry identical, while changing bytes in between.
"""
from __future__ import annotations

from pipelines.incremental.checkpoint import (  # noqa: F401
    CHECKPOINT_FORMAT,
    PendingCheckpoint,
    clean_state,
    prepare_checkpoint,
)
from pipelines.incremental.plan import IncrementalStart, check_extends, is_what_if, start  # noqa: F401
from pipelines.io.checkpoint import state_dir  # noqa: F401
