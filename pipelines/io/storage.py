"""Where a run reads its dump and keeps its warehouse: a local path or an object-store URI (`s3://bucket/key`).

Every reader and writer goes through the filesystems the stack already has, configured once here from the usual
AWS environment variables (nothing is hard-coded):
- pyarrow's `S3FileSystem` for files (listing the dump, reading segments in the tasks, writing Parquet);
- delta-rs `storage_options` for the Delta log;
- DuckDB's httpfs secret where DuckDB reads the warehouse's Parquet files;
- obstore only for the writer lock, the one place that needs a conditional write (`If-None-Match`), which
  pyarrow's filesystem cannot express.

`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`: credentials (else the SDK's default chain:
profile, instance role). `AWS_REGION` (or `AWS_DEFAULT_REGION`). `AWS_ENDPOINT_URL_S3` (or `AWS_ENDPOINT_URL`):
an S3-compatible service (MinIO, Ceph, moto); `http://` endpoints are allowed, path-style addressing is used.
Spark itself never opens an `s3://` path (it has no hadoop-aws here): the tasks do, with pyarrow, so executors
need the same environment variables (`spark.executorEnv.*` on a cluster).

Every client retries its requests as the `storage:` settings say (`pipelines/io/retry.py`), and each operation of
`Location` on an object store is retried whole when a client's own retries leave a transient failure (a body cut
mid-way): a fault that outlasts them is `retry.StoreUnavailable` (the run fails), a refusal a `StorageError` (the
user's to fix).
"""
from __future__ import annotations

import contextlib
import functools
import glob
import importlib
import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

import pyarrow.fs as pafs

from pipelines.io import retry
from pipelines.io.retry import StoreUnavailable  # noqa: F401  (re-exported: callers name it beside StorageError)

REMOTE_SCHEMES = ("s3",)
# Hadoop's names for the same buckets: accepted so a URI copied from a Spark job works as written.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


class StorageError(RuntimeError):
    """An object-store location cannot be used (bad URI, unreachable endpoint, denied, missing): the message names
    the URI and the cause in one line; the CLI exits 2 on it."""


def is_remote(uri: str | os.PathLike) -> bool:
    """True for a URI with a scheme this module reads (`s3://`); a local path otherwise."""
    if not isinstance(uri, str):
        return False
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    return _SCHEME_ALIASES.get(scheme, scheme) in REMOTE_SCHEMES


def _env(*names: str) -> str | None:
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return None


@dataclass(frozen=True)
class S3Settings:
    """The S3 client settings the environment gives, shared by pyarrow, delta-rs and DuckDB."""

    endpoint: str | None  # scheme://host[:port], or None for AWS itself
    region: str | None
    access_key: str | None
    secret_key: str | None
    session_token: str | None

    @classmethod
    def from_env(cls) -> "S3Settings":
        endpoint = _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        if endpoint is not None and "://" not in endpoint:
            endpoint = "https://" + endpoint
        return cls(endpoint=endpoint.rstrip("/") if endpoint else None,
                   region=_env("AWS_REGION", "AWS_DEFAULT_REGION"),
                   access_key=_env("AWS_ACCESS_KEY_ID"), secret_key=_env("AWS_SECRET_ACCESS_KEY"),
                   session_token=_env("AWS_SESSION_TOKEN"))

    @property
    def endpoint_scheme(self) -> str:
        return urlparse(self.endpoint).scheme if self.endpoint else "https"

    @property
    def endpoint_host(self) -> str | None:
        return urlparse(self.endpoint).netloc if self.endpoint else None


@functools.lru_cache(maxsize=8)
def _s3_filesystem(settings: S3Settings, policy: retry.StoreRetry) -> pafs.S3FileSystem:
    kwargs: dict = {}
    if settings.access_key and settings.secret_key:
        kwargs.update(access_key=settings.access_key, secret_key=settings.secret_key,
                      session_token=settings.session_token)
    if settings.region:
        kwargs["region"] = settings.region
    if settings.endpoint:
        kwargs.update(endpoint_override=settings.endpoint_host, scheme=settings.endpoint_scheme)
    # The SDK retries each request (a 5xx, throttling, a dropped connection) up to the policy's tries. Its
    # "standard" strategy is not used: it stops retrying once a quota of retries is spent, which sustained
    # throttling spends within minutes in a long-lived client; the legacy one backs off exponentially, and
    # `Location` retries whole operations with jitter on top.
    kwargs["retry_strategy"] = pafs.AwsDefaultS3RetryStrategy(max_attempts=policy.attempts)
    kwargs.update(connect_timeout=policy.connect_timeout_seconds, request_timeout=policy.request_timeout_seconds)
    return pafs.S3FileSystem(**kwargs)


def s3_filesystem() -> pafs.S3FileSystem:
    return _s3_filesystem(S3Settings.from_env(), retry.policy())


def configure(settings) -> None:
    """Retry this process' store requests as `settings`' `storage:` section says (Spark's tasks get the section
    from the session). Raises `config.ConfigError` for a bad value."""
    # imported here, not at module level: yaml ~0.04 s of import (python -X importtime)
    from pipelines.config import ConfigError

    try:
        retry.configure(retry.StoreRetry.from_section(settings.section("storage")))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def storage_options(uri: str | os.PathLike) -> dict[str, str] | None:
    """delta-rs `storage_options` for `uri` (None for a local path)."""
    if not is_remote(uri):
        return None
    s = S3Settings.from_env()
    opts: dict[str, str] = {}
    if s.endpoint:
        opts["AWS_ENDPOINT_URL"] = s.endpoint
        if s.endpoint_scheme == "http":
            opts["AWS_ALLOW_HTTP"] = "true"
    if s.region:
        opts["AWS_REGION"] = s.region
    if s.access_key and s.secret_key:
        opts["AWS_ACCESS_KEY_ID"], opts["AWS_SECRET_ACCESS_KEY"] = s.access_key, s.secret_key
        if s.session_token:
            opts["AWS_SESSION_TOKEN"] = s.session_token
    opts.update(retry.policy().object_store_options())
    return opts


def duckdb_s3_secret_sql() -> str:
    """The `CREATE SECRET` that lets DuckDB's httpfs read `s3://` with the environment's settings."""
    s = S3Settings.from_env()

    def lit(v: str) -> str:
        return "'" + v.replace("'", "''") + "'"

    parts = ["TYPE s3"]
    if s.access_key and s.secret_key:
        parts += [f"KEY_ID {lit(s.access_key)}", f"SECRET {lit(s.secret_key)}"]
        if s.session_token:
            parts.append(f"SESSION_TOKEN {lit(s.session_token)}")
    else:
        parts.append("PROVIDER credential_chain")
    if s.region:
        parts.append(f"REGION {lit(s.region)}")
    if s.endpoint:
        parts += [f"ENDPOINT {lit(s.endpoint_host)}", "URL_STYLE 'path'",
                  f"USE_SSL {'true' if s.endpoint_scheme == 'https' else 'false'}"]
    return f"CREATE OR REPLACE SECRET offsetlake_s3 ({', '.join(parts)})"


def duckdb_extension(name: str) -> str | None:
    """The path of a DuckDB extension shipped as a PyPI package (`duckdb-extension-<name>`), None without it."""
    try:
        mod = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError:
        return None
    base = os.path.dirname(mod.__file__)
    found = sorted(glob.glob(os.path.join(base, "extensions", "**", f"{name}.duckdb_extension"), recursive=True))
    return found[-1] if found else None


def enable_duckdb_s3(con) -> None:
    """Load httpfs into a DuckDB connection and give it the environment's S3 settings."""
    ext = duckdb_extension("httpfs")
    if ext is None:
        raise StorageError("reading s3:// with DuckDB needs the duckdb-extension-httpfs package")
    con.execute(f"LOAD '{ext}'")
    con.execute(duckdb_s3_secret_sql())
    for statement in retry.policy().duckdb_settings():
        con.execute(statement)


@dataclass(frozen=True)
class Location:
    """A file or directory, local or on an object store: `uri` as the user gave it (local paths made absolute),
    `fs` and `path` as pyarrow addresses it."""

    uri: str

    @property
    def remote(self) -> bool:
        return is_remote(self.uri)

    @property
    def fs(self) -> pafs.FileSystem:
        return s3_filesystem() if self.remote else pafs.LocalFileSystem()

    @property
    def path(self) -> str:
        """The path inside `fs` (`bucket/key` on S3)."""
        if self.remote:
            return self.uri.split("://", 1)[1].strip("/")
        return self.uri

    @property
    def local(self) -> Path | None:
        return None if self.remote else Path(self.uri)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def parent(self) -> "Location":
        if self.remote:
            scheme, rest = self.uri.split("://", 1)
            return Location(f"{scheme}://{posixpath.dirname(rest.rstrip('/'))}")
        return Location(str(Path(self.uri).parent))

    def join(self, *parts: str) -> "Location":
        if self.remote:
            return Location("/".join([self.uri.rstrip("/"), *[p.strip("/") for p in parts]]))
        return Location(str(Path(self.uri).joinpath(*parts)))

    def __truediv__(self, part: str) -> "Location":
        return self.join(part)

    def __str__(self) -> str:
        return self.uri

    def __fspath__(self) -> str:
        if self.remote:
            raise TypeError(f"{self.uri} is not a local path")
        return self.uri

    def _retried(self, operation: str, fn):
        return retried(self, operation, fn)

    # -------------------------------------------------------------- queries
    def info(self) -> pafs.FileInfo:
        return self._retried("info", lambda: self.fs.get_file_info(self.path))

    def exists(self) -> bool:
        return self.info().type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        """A directory; on an object store, a prefix with at least one object under it."""
        t = self.info().type
        return t == pafs.FileType.Directory

    def is_file(self) -> bool:
        return self.info().type == pafs.FileType.File

    def size(self) -> int:
        return int(self.info().size)

    def listdir(self, recursive: bool = False) -> list[pafs.FileInfo]:
        """The entries under this directory (empty when it does not exist), sorted by path. A local name that is not
        UTF-8 is a `StorageError` naming it: Arrow's listing cannot hold it as text."""
        infos = self._retried("list", lambda: self.fs.get_file_info(
            pafs.FileSelector(self.path, allow_not_found=True, recursive=recursive)))
        try:
            return sorted(infos, key=lambda i: i.path)  # each entry's path is decoded as it is asked for
        except UnicodeDecodeError:
            raise StorageError(f"{self.uri} holds a name that is not UTF-8 ({self._undecodable_name()}): offsetlake "
                               f"reads names as UTF-8; rename it") from None

    def _undecodable_name(self) -> str:
        for root, dirs, files in os.walk(os.fsencode(self.path)):
            for name in dirs + files:
                try:
                    name.decode("utf-8")
                except UnicodeDecodeError:
                    return os.path.join(root, name).decode("utf-8", "backslashreplace")
        return "?"

    def child_of(self, info: pafs.FileInfo) -> "Location":
        """The Location of an entry `listdir` returned."""
        rel = posixpath.relpath(info.path, self.path) if self.remote else os.path.relpath(info.path, self.path)
        return self.join(rel)

    # -------------------------------------------------------------- reads and writes
    def read_bytes(self) -> bytes:
        def read():
            with self.fs.open_input_stream(self.path) as f:
                return f.read()

        return self._retried("read", read)

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")

    def write_bytes(self, data: bytes) -> None:
        """Write the whole object. On an object store a PUT replaces the object at once; locally the file is
        written beside and renamed over, so a reader never sees half of it."""
        if self.remote:
            def put():
                with self.fs.open_output_stream(self.path) as f:
                    f.write(data)

            return self._retried("write", put)
        with errors(self):
            path = Path(self.uri)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def write_new(self, data: bytes) -> None:
        """Write a new file that nothing reads until its run names it (a task's files in a run's directory): on an
        object store one PUT, retried whole; locally written in place, with no rename and no fsync: a run that
        stops half-way never names it, and its directory goes with the run."""
        if self.remote:
            return self.write_bytes(data)
        with errors(self):
            Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
            with self.fs.open_output_stream(self.path) as out:
                out.write(data)

    def makedirs(self) -> None:
        """Create the directory (a no-op on an object store, where prefixes need no creation)."""
        if not self.remote:
            with errors(self):
                Path(self.uri).mkdir(parents=True, exist_ok=True)

    def delete_file(self, missing_ok: bool = True) -> None:
        try:
            self._retried("delete", lambda: self.fs.delete_file(self.path))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def delete_dir(self) -> None:
        """Delete the directory and everything under it; nothing when it does not exist."""
        with contextlib.suppress(FileNotFoundError):
            self._retried("delete", lambda: self.fs.delete_dir(self.path))

    def upload(self, local: str) -> None:
        """The local file `local` copied here whole (on an object store, retried whole from the local copy)."""
        def put():
            with open(local, "rb") as src, self.fs.open_output_stream(self.path) as out:
                shutil.copyfileobj(src, out, 8 << 20)

        self._retried("write", put)

    @contextlib.contextmanager
    def as_local_file(self, tmp_dir: str | None = None, *, start: int = 0, head: int = 0) -> Iterator[str]:
        """A local path holding this file's bytes: the file itself when local, else a download into `tmp_dir`
        (deleted on exit). The decoders map segments into memory, which needs a local file. `start`/`head`: only
        the bytes from `start` on and the first `head` bytes are fetched (the rest of the file reads as zeros),
        for a reader that resumes at `start`."""
        if not self.remote:
            yield self.uri
            return
        fd, tmp = tempfile.mkstemp(prefix="offsetlake-", suffix="-" + self.name, dir=tmp_dir)
        os.close(fd)

        def fetch():  # a try that fails mid-way is fetched again whole
            with open(tmp, "wb") as out, self.fs.open_input_file(self.path) as src:
                size = src.size()
                if start > 0:
                    out.write(src.read_at(min(head, size), 0) if head else b"")
                    src.seek(min(start, size))
                    out.seek(min(start, size))
                while True:
                    chunk = src.read(8 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
                out.truncate(size)

        try:
            self._retried("read", fetch)
            yield tmp
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


    @contextlib.contextmanager
    def as_local_copy(self) -> Iterator[str]:
        """A local path holding this file, or this folder and every file below it: the location itself when
        local, else a download into a temporary directory (deleted on exit), named as here."""
        if not self.remote:
            yield self.uri
            return
        tmp = tempfile.mkdtemp(prefix="offsetlake-")
        try:
            if self.is_file():
                local = os.path.join(tmp, self.name)
                files = [(self, local)]
            else:
                local = os.path.join(tmp, self.name or "root")
                files = [(self.child_of(i), os.path.join(local, *posixpath.relpath(i.path, self.path).split("/")))
                         for i in self.listdir(recursive=True) if i.type == pafs.FileType.File]
            for src, dst in files:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                src._retried("read", functools.partial(_download, src, dst))
            yield local
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _download(src: Location, dst: str) -> None:
    with src.fs.open_input_stream(src.path) as f, open(dst, "wb") as out:
        shutil.copyfileobj(f, out, 8 << 20)


def location(where: "str | os.PathLike | Location") -> Location:
    """A Location for a user's path or URI: local paths expanded and made absolute, `s3a://` read as `s3://`."""
    if isinstance(where, Location):
        return where
    s = os.fspath(where)
    if "://" in s:
        scheme, rest = s.split("://", 1)
        scheme = _SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
        if scheme not in REMOTE_SCHEMES:
            if scheme == "file":
                return Location(str(Path(rest).expanduser().absolute()))
            raise StorageError(f"{s}: unsupported scheme {scheme}:// (use a local path or s3://bucket/prefix)")
        bucket, key = _bucket_and_key(s, rest)
        return Location(f"{scheme}://" + "/".join([bucket, *_key_parts(s, key)]))
    return Location(str(Path(s).expanduser().absolute()))


def _bucket_and_key(uri: str, rest: str) -> tuple[str, str]:
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise StorageError(f"{uri}: no bucket in the URI (use s3://bucket/prefix)")
    return bucket, key


def _key_parts(uri: str, key: str) -> list[str]:
    """The key's names as a local path's spelling would resolve them: `dir/.`, `dir/`, `./dir` and `dir//sub` are
    the dir (pathlib drops empty and `.` names; Arrow refused an empty one and read a `.` as a name, so a `dir/.` that
    works on disk found nothing), and `dir/sub/..` is `dir` (as the OS resolves it; `climbed_dirs` lets a caller
    ask, as the OS does, that `sub` be there)."""
    parts: list[str] = []
    for part in key.split("/"):
        if part == "..":
            if not parts:
                raise StorageError(f"{uri}: '..' climbs above the bucket (use s3://bucket/prefix)")
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return parts


def climbed_dirs(where: str) -> list[Location]:
    """The prefixes a `..` of an object-store URI climbs out of (`s3://b/dir/sub/..`: `s3://b/dir/sub`), which a
    local path's must be directories for the OS to resolve it; none for a local path."""
    if not is_remote(where):
        return []
    scheme, rest = where.split("://", 1)
    bucket, key = _bucket_and_key(where, rest)
    names = key.split("/")
    return [location(f"{scheme}://{bucket}/" + "/".join(names[:i])) for i, name in enumerate(names) if name == ".."]


def retried(where: "Location | str", operation: str, fn):
    """`fn()` under `errors(where)`, retried whole on an object store when it fails transiently (`io.retry`: for
    what can simply run again, a read, a listing, a whole-object PUT, a delete); once on a local path."""
    with errors(where):
        return retry.call(fn, f"{where} ({operation})") if is_remote(str(where)) else fn()


def error_text(exc: BaseException) -> str:
    """The cause of a storage failure on one line (the SDK's messages span several)."""
    text = " ".join(str(exc).split())
    return text[:300] + ("…" if len(text) > 300 else "")


@contextlib.contextmanager
def errors(where: "Location | str") -> Iterator[None]:
    """Turn an object store's failure into a StorageError naming the URI and the cause, or into StoreUnavailable
    when it is transient (the client's own retries gave up on it; `Location`'s operations retry it whole first);
    local OSErrors pass through unchanged (their callers already word them)."""
    try:
        yield
    except (FileNotFoundError, StorageError, StoreUnavailable):
        raise
    except OSError as exc:
        if not is_remote(str(where)):
            raise
        if retry.transient(exc):
            raise StoreUnavailable(f"{where}: {error_text(exc)}") from exc
        raise StorageError(f"{where}: {error_text(exc)}") from exc
