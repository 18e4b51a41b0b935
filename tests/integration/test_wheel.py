"""`make dist` as the README gives it: the wheel carries the default settings, and an installed copy (outside the
checkout) loads them, or the folder OFFSETLAKE_CONF_DIR names."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(make_dist_lock, tmp_path_factory) -> Path:
    """`make dist`'s wheel, copied out of dist/ before the lock is let go (another module may rebuild dist/)."""
    with make_dist_lock():
        r = subprocess.run(["make", "dist"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        wheels = sorted((ROOT / "dist").glob("offsetlake-*.whl"))
        assert len(wheels) == 1, wheels
        return Path(shutil.copy2(wheels[0], tmp_path_factory.mktemp("dist")))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed into a folder of its own; its dependencies come from this interpreter's venv."""
    site = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return site


def run_installed(site: Path, code: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OFFSETLAKE_CONF_DIR", "OFFSETLAKE_ENV")}
    return subprocess.run([sys.executable, "-c", code, "--help"], cwd=cwd, capture_output=True, text=True,
                          env={**clean, "PYTHONPATH": str(site), **env})


def test_wheel_carries_every_settings_file(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    committed = sorted(p.relative_to(ROOT / "conf").as_posix() for p in (ROOT / "conf").rglob("*.yml"))
    packed = sorted(n.removeprefix("pipelines/_conf/") for n in names if n.startswith("pipelines/_conf/"))
    assert committed and packed == committed
    assert any(n.startswith("pipelines/decoding/_fastdecode") and n.endswith(".so") for n in names)


def test_installed_wheel_loads_its_settings_outside_the_checkout(installed, tmp_path):
    r = run_installed(installed, "import pipelines, pipelines.config as c; s = c.load_settings(env='prod'); "
                                 "print(pipelines.__file__); print(c.CONF_DIR); print(s.section('validation'))",
                      cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    module, conf_dir, validation = r.stdout.splitlines()
    assert module == str(installed / "pipelines" / "__init__.py")
    assert conf_dir == str(installed / "pipelines" / "_conf")
    assert "'max_unread_bytes': 0" in validation  # conf/prod's overlay on conf/base


def test_installed_wheel_cli_starts(installed, tmp_path):
    r = run_installed(installed, "from jobs.cli import run; run()", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "rebuild" in r.stdout and "ConfigError" not in r.stdout + r.stderr


def test_installed_wheel_writes_a_sample(installed, tmp_path):
    """`offsetlake sample` (`make run`'s first step) from the installed wheel: the simulator travels with it."""
    code = ("import sys, simulator; print(simulator.__file__); "
            "sys.argv[1:] = ['sample', 'dump', '--records', '400', '--groups', '6', '--partitions', '2']; "
            "from jobs.cli import run; run()")
    r = run_installed(installed, code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == str(installed / "simulator" / "__init__.py")
    assert "records=" in r.stderr
    assert sorted(p.name for p in (tmp_path / "dump").glob("__consumer_offsets-*")) == [
        "__consumer_offsets-0", "__consumer_offsets-1"]


def test_installed_wheel_follows_offsetlake_conf_dir(installed, tmp_path):
    conf = tmp_path / "myconf"
    (conf / "base").mkdir(parents=True)
    (conf / "local").mkdir()
    text = (ROOT / "conf" / "base" / "offsetlake.yml").read_text()
    assert "keep_snapshots: 30" in text
    (conf / "base" / "offsetlake.yml").write_text(text.replace("keep_snapshots: 30", "keep_snapshots: 3"))
    r = run_installed(installed, "import pipelines.config as c; print(c.load_settings().section('warehouse'))",
                      cwd=tmp_path, OFFSETLAKE_CONF_DIR=str(conf))
    assert r.returncode == 0, r.stderr
    assert "'keep_snapshots': 3" in r.stdout
