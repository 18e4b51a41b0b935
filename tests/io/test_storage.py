"""Locations on a local S3-compatible server (moto) behave as local paths do, and their failures name the URI."""
from __future__ import annotations

import os

import pytest

from pipelines.io import retry, storage


def test_location_round_trip_on_s3(s3_bucket):
    root = storage.location(s3_bucket + "/wh/")
    assert root.uri == s3_bucket + "/wh" and root.remote
    f = root / "dir" / "a.json"
    assert not f.exists() and not root.is_dir()
    f.write_text('{"a": 1}')
    assert f.is_file() and f.size() == 8 and f.read_text() == '{"a": 1}'
    assert root.is_dir() and (root / "dir").is_dir()
    assert [root.child_of(i).uri for i in root.listdir(recursive=True)] == [
        s3_bucket + "/wh/dir", s3_bucket + "/wh/dir/a.json"]
    with f.as_local_file() as local:
        assert open(local).read() == '{"a": 1}'
    f.delete_file()
    assert not f.exists()


def test_local_location_is_a_path(tmp_path):
    loc = storage.location(str(tmp_path / "x"))
    assert not loc.remote and loc.local == tmp_path / "x"
    (loc / "y.txt").write_text("hi")
    assert (tmp_path / "x" / "y.txt").read_text() == "hi"
    assert storage.location("file://" + str(tmp_path)).uri == str(tmp_path)


@pytest.mark.parametrize("spelled", ["s3://b/dir/.", "s3://b/./dir/", "s3://b//dir", "s3a://b/dir/sub/..",
                                     "s3://b/dir/sub/./.."])
def test_a_uri_names_its_key_as_a_local_path_would(spelled, tmp_path):
    """A key is spelled as a path on disk is (pathlib drops `.` and empty names, the OS resolves `..`): `dir/.` was
    read as a key with a `.` name and found nothing, `//` failed in Arrow with a traceback."""
    (tmp_path / "dir" / "sub").mkdir(parents=True)
    on_disk = str(tmp_path) + spelled.split("://b", 1)[1]
    assert os.path.realpath(on_disk) == str(tmp_path / "dir")
    assert storage.location(spelled).uri == "s3://b/dir"
    assert storage.climbed_dirs(spelled) == ([storage.location("s3://b/dir/sub")] if "sub" in spelled else [])


@pytest.mark.parametrize("uri,cause", [("s3:///nobucket", "no bucket"), ("gs://b/x", "unsupported scheme"),
                                       ("s3://b/dir/../..", "climbs above the bucket")])
def test_bad_uris_are_named(uri, cause):
    with pytest.raises(storage.StorageError, match=cause):
        storage.location(uri)


def test_unreachable_endpoint_names_the_uri(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setattr(storage, "_s3_filesystem", storage._s3_filesystem.__wrapped__)
    # one try of each request and operation: a refused connection is transient, and the default budget retries it
    # for about 25 s before it gives up with the same line
    monkeypatch.setattr(retry, "_policy", retry.StoreRetry(attempts=1, connect_timeout_seconds=1))
    with pytest.raises(storage.StorageError, match=r"^s3://bucket/key: "):
        storage.location("s3://bucket/key").read_bytes()
