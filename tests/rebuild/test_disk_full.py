"""A warehouse whose disk fills up at each stage that writes, as a platform team found it: before, a full disk in
the checkpoint stage printed a Rust panic (`thread 'tokio-rt-worker' panicked at …object_store…/buffered.rs…:
Already shut down`), `stack backtrace:` and a note before the one error line.

The warehouse is a 64 MB tmpfs in a private mount namespace held by a helper process (root only; skipped
elsewhere), so it lives across the runs: a first run is served, then each case runs again with the disk filled to
the last byte as its stage begins (the run and its JVM stopped while the filler writes, so the stage meets a full
disk), then the space is given back. Each failed run is one message line on stderr beside its progress lines,
names its stage, and leaves the first snapshot served and every Delta table readable; once the disk has room, a
run gives the clean run's snapshot. A fill meets the stage it was aimed at or a later one (the run writes its
stage's line, then its work: a stage that finishes before the stop is past).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]

STAGES = ["decode", "replay", "materialize", "validate", "summarize", "checkpoint", "write", "commit"]
PROGRESS = re.compile(r"^(\[\s*[\d.]+s\] |          )")
FAILED = re.compile(r"^error: run (\S+) failed in stage (\w+): ")


def _mounts_ok() -> bool:
    if not shutil.which("unshare") or not shutil.which("nsenter") or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                          capture_output=True).returncode == 0


class SmallDisk:
    """A tmpfs at `path` in a mount namespace of its own, held by a sleeping helper: commands run in it
    (`nsenter`), and this process reaches its files through `/proc/<helper>/root`."""

    def __init__(self, path: Path, size: str = "64m"):
        path.mkdir(parents=True)
        self.path = path
        self.helper = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             f'mount -t tmpfs -o size={size} tmpfs "{path}" && echo mounted && exec sleep 3600'],
            stdout=subprocess.PIPE, text=True)
        if self.helper.stdout.readline().strip() != "mounted":
            self.helper.kill()
            pytest.skip("cannot mount a tmpfs in a private namespace")
        self.seen = Path(f"/proc/{self.helper.pid}/root{path}")

    def command(self, *args: str) -> list[str]:
        return ["nsenter", "-t", str(self.helper.pid), "-m", "--", *args]

    def fill(self) -> None:
        try:
            with open(self.seen / "filler", "wb", buffering=0) as f:
                while True:
                    f.write(b"\0" * (1 << 16))
        except OSError as e:
            assert e.errno == 28, e  # ENOSPC: full to the last byte

    def give_back(self) -> None:
        (self.seen / "filler").unlink(missing_ok=True)

    def close(self) -> None:
        self.helper.kill()
        self.helper.wait()


@pytest.fixture(scope="module")
def disk(tmp_path_factory):
    if not _mounts_ok():
        pytest.skip("needs root and mount namespaces (unshare -m, nsenter)")
    base = tmp_path_factory.mktemp("diskfull")
    r = subprocess.run([sys.executable, "-m", "jobs.cli", "sample", str(base / "dump"), "--records", "3000",
                        "--groups", "30", "--partitions", "4", "--seed", "5"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = SmallDisk(base / "wh")
    d.dump = base / "dump"
    yield d
    d.close()


def rebuild(disk: SmallDisk, snapshot_id: str, fill_at: str | None = None, *extra: str) -> tuple[int, list[str]]:
    """`offsetlake rebuild` in the disk's namespace; `fill_at`: the stage whose progress line fills the disk (the
    run stopped meanwhile). (exit code, stderr lines)."""
    cmd = disk.command(sys.executable, "-m", "jobs.cli", "rebuild", "--env", "ci", "--input", str(disk.dump),
                       "--warehouse", str(disk.path), "--snapshot-id", snapshot_id, *extra)
    p = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    marker = None if fill_at is None else ("commit: every table staged" if fill_at == "commit" else f"] {fill_at}")
    for line in p.stderr:
        lines.append(line.rstrip("\n"))
        if marker is not None and marker in line:
            os.killpg(p.pid, signal.SIGSTOP)
            try:
                disk.fill()
            finally:
                os.killpg(p.pid, signal.SIGCONT)
            break
    lines += p.stderr.read().splitlines()
    return p.wait(timeout=600), lines


# Read in the disk's namespace: delta-rs resolves /proc/<pid>/root as the link it is, to this namespace's root.
_SERVED = """
import json, sys
from deltalake import DeltaTable
from pathlib import Path
from pipelines.io.warehouse import Warehouse
root = Path(sys.argv[1])
for table in sorted(p.name for p in root.iterdir() if (p / "_delta_log").is_dir()):
    DeltaTable(str(root / table)).to_pyarrow_table()  # every Delta table still opens
wh = Warehouse(root)
sid = wh.latest_snapshot_id()
rows = wh.read_table("loaded_offsets", sid, columns=["group_id", "topic", "partition", "committed_offset"])
print(json.dumps([sid, sorted(rows.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True))]))
"""


def served(disk: SmallDisk) -> tuple[str | None, list]:
    """The snapshot served and its committed offsets, once every Delta table of the warehouse has been read."""
    import json

    r = subprocess.run(disk.command(sys.executable, "-c", _SERVED, str(disk.path)), cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    sid, rows = json.loads(r.stdout)
    return sid, rows


@pytest.fixture(scope="module")
def first(disk):
    code, lines = rebuild(disk, "a")
    assert code == 0, "\n".join(lines[-20:])
    return served(disk)


@pytest.mark.parametrize("stage,extra", [
    ("decode", ("--conf", "decode.in_process_max_bytes=0")),  # the decode tasks write the history and state
    ("materialize", ()), ("checkpoint", ()), ("write", ()), ("commit", ()),
])
def test_a_full_disk_is_one_line_and_keeps_the_served_snapshot(disk, first, stage, extra):
    code, lines = rebuild(disk, f"full-{stage}", stage, *extra)
    disk.give_back()
    text = "\n".join(lines)
    assert code == 1, text[-3000:]
    messages = [ln for ln in lines if ln.strip() and not PROGRESS.match(ln)]
    assert len(messages) <= 2, text[-3000:]
    failed = [FAILED.match(ln) for ln in messages]
    assert [m.group(1) for m in failed if m] == [f"full-{stage}"], messages
    hit = next(m.group(2) for m in failed if m)
    assert STAGES.index(hit) >= STAGES.index(stage), (stage, messages)
    assert "disk full" in messages[-1] and "(log: " in messages[-1], messages
    for chatter in ("panicked", "stack backtrace", "Traceback", "RUST_BACKTRACE", "s3fs.cc", "WARNING: Using"):
        assert chatter not in text, (chatter, text[-3000:])
    assert served(disk) == first


def test_once_the_disk_has_room_a_run_equals_a_clean_one(disk, first):
    code, lines = rebuild(disk, "after")
    assert code == 0, "\n".join(lines[-20:])
    sid, rows = served(disk)
    assert sid == "after" and rows == first[1]
