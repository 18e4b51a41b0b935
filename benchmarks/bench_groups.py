"""A KIP-848 group's records replayed with their events kept, per record, in groups of growing size.

    .venv/bin/python benchmarks/bench_groups.py [--members 3 100 1000] [--records 20000]

Each group gets its members (type 5), an assignment epoch (type 6), then `--records` current-assignment records
(type 8), member after member, replayed one at a time by `coordinator.groups.GroupStore` as a shard's load replays
them, each leaving its `group_history` event (the group's state, assignor, member count, who joined or left).
Prints the microseconds per type 8 record at each group size: a record's cost should not grow with its group's.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.coordinator.groups import GroupStore  # noqa: E402
from tests.coordinator.rowkit import Log  # noqa: E402


def per_record_us(members: int, records: int) -> float:
    log, store = Log(), GroupStore()
    store.replay(log.cg_epoch("g", 1))
    for i in range(members):
        store.replay(log.cg_member("g", f"member-{i}"))
    store.replay(log.cg_assignment_epoch("g", 1))
    rows = [log.cg_current("g", f"member-{k % members}", 1, [("ID-A", [k % members])]) for k in range(records)]
    started = time.process_time()
    for row in rows:
        store.replay(row)
    return 1e6 * (time.process_time() - started) / records


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, nargs="+", default=[3, 100, 1000])
    ap.add_argument("--records", type=int, default=20_000)
    args = ap.parse_args()
    print(json.dumps({"records": args.records,
                      "us_per_record": {m: round(per_record_us(m, args.records), 2) for m in args.members}}))


if __name__ == "__main__":
    main()
