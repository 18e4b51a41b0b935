"""Blobs (`io.blobs`) give back the rows they were made of, whichever way they were written: plain under
COMPRESS_CELLS, lz4 from it on. Decoded rows of a broker scenario, every slice length a run makes (one record,
a window, a decoder batch), hold it."""
from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.decoding.reader import iter_decoded_rows
from pipelines.io.blobs import COMPRESS_CELLS, from_blob, opened, to_blob
from tests.coordinator.rowkit import to_table


@pytest.fixture(scope="module")
def decoded(brokerdata) -> pa.Table:
    return to_table(list(iter_decoded_rows([brokerdata / "many-groups" / "data"])))


def test_blobs_of_every_size_give_their_rows_back(decoded):
    assert decoded.num_rows * decoded.num_columns > 4 * COMPRESS_CELLS
    plain = compressed = 0
    for length in (0, 1, 7, 100, 1000, decoded.num_rows):
        for start in (0, decoded.num_rows // 3):
            rows = decoded.slice(start, length)
            blob = to_blob(rows)
            assert from_blob(blob).equals(rows), (start, length)
            if rows.num_rows * rows.num_columns >= COMPRESS_CELLS:
                compressed += 1
                assert len(blob) < rows.nbytes / 2, (start, length)  # lz4 took it: a decoded log packs well
            else:
                plain += 1
    assert plain and compressed
    batches = [to_blob(b) for b in decoded.to_batches(max_chunksize=300)]
    assert opened(batches).equals(decoded)
