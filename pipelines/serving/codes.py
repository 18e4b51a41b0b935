"""Log-sized history columns of text as integer codes: `changes` and `restore-plan` compare, sort and group ids
and topics over millions of rows, which codes do faster than text, and a history read dictionary-encoded
(`SnapshotReader.history_table(dictionary=…)`) already holds them per chunk."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def string_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """A string column as int32 codes into one dictionary of its values (null: -1), and that dictionary: a history
    read dictionary-encoded (`history_table(dictionary=…)`) is not decoded. Each chunk's dictionary is mapped onto
    the one dictionary by hand: Parquet's dictionaries may hold a null, which Arrow's unify refuses."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    if not column.num_chunks:
        return np.empty(0, dtype=np.int32), pa.array([], pa.string())
    values = pc.unique(pa.concat_arrays([c.dictionary for c in column.chunks])).drop_null()
    out = []
    for c in column.chunks:
        mapping = pc.fill_null(pc.index_in(c.dictionary, value_set=values), -1).to_numpy(zero_copy_only=False)
        mapping = np.append(mapping, -1).astype(np.int32)  # a null index reads the last entry: -1
        out.append(mapping[pc.fill_null(c.indices, -1).to_numpy(zero_copy_only=False)])
    return np.concatenate(out), values
