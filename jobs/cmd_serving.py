"""Serving commands — describe, lookup, serve, diff, reset-plan, sql, changes — over a warehouse's snapshots, no Spark.

Exit codes: 0 ok; 1 the answer is empty (`lookup --topic` with no offsets, a group with nothing to reset to, a
group without group records for `--history`, a regression with `diff --fail-on-regression`); 2 bad usage or
unreadable input (warehouse, snapshot id, a group or topic the snapshot does not hold, option values, SQL, a port in
use).
"""
from __future__ import annotations

import errno
import ipaddress
import json
import math
import shlex
import socket
import sys
from pathlib import Path

import click
import orjson

from jobs.errors import WRITE_ERRNOS, delta_error, fail, warn
from jobs.params import GivenPath, OneValueEach
from pipelines.io.retry import plain
from pipelines.serving.cells import did_you_mean, view
from pipelines.decoding.log_end_offsets import parse_end_offsets_file
from pipelines.io.snapshots import (DeltaWarehouseReader, GroupNotFound, NotAWarehouse, ReadError, SnapshotNotFound,
                                    resolve_snapshot)
from pipelines.io.storage import StorageError, StoreUnavailable
from pipelines.serving import views
from pipelines.serving.describe import HISTORY_COLUMNS, OUT, Rendered, consumer_group_ids, render_history
from pipelines.serving.describe import describe as render
from pipelines.serving.diff import diff_snapshots, render_text
from pipelines.serving.group_regex import BadGroupRegex, check as check_group_regex
from pipelines.serving.history import OutsideHistory, group_events, observed_events
from pipelines.serving.index import (close_topics, committed_partitions, load_index, topic_known,
                                     unknown_group_message)
from pipelines.serving.restore_plan import (HistoryUnavailable, OutNotAPlan, OutNotEmpty, counted, parse_instant,
                                            write_restore_plan)
from pipelines.serving.reset_plan import reset_plan as reset_offsets
from pipelines.serving.restore_plan import restore_plan as plan

warehouse_opt = click.option(
    "--warehouse", "warehouse", required=True, type=GivenPath(file_okay=False), help="warehouse directory"
)
snapshot_opt = click.option("--snapshot", "snapshot_id", default=None, help="snapshot id (default: the latest succeeded scheduled one; what-if runs by id)")


def _unknown_group(reader, snap, reason: str, group: str):
    """A group the snapshot does not hold is a usage error (a typo, the wrong snapshot): one line, with the
    snapshot's nearest group ids."""
    fail(unknown_group_message(reader, snap, group, reason))


def _pretty_json(value) -> str:
    """json.dumps(value, ensure_ascii=False, indent=2), the same text, written by orjson (a topic's offsets can be
    tens of thousands of rows; the json module takes most of a second for them)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode("utf-8")
    except TypeError:
        return json.dumps(value, ensure_ascii=False, indent=2)


def _open(warehouse: str, snapshot_id: str | None):
    try:
        reader = DeltaWarehouseReader(warehouse)
        return reader, resolve_snapshot(reader, snapshot_id)
    except (NotAWarehouse, SnapshotNotFound) as e:
        fail(str(e))


def _group_regex(pattern: str | None) -> None:
    """Refuse a pattern RE2 cannot compile before anything is read (`pipelines.serving.group_regex`)."""
    if pattern is not None:
        try:
            check_group_regex(pattern)
        except BadGroupRegex as e:
            fail(f"--group-regex {pattern!r}: {e}")


def _index(reader, snap, **kw):
    return load_index(reader, snap, **kw)


@click.command("restore-plan", cls=OneValueEach)
@warehouse_opt
@click.option("--as-of", "as_of", required=True, help="the time to restore: ISO-8601 (UTC when no zone) or epoch ms")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="directory to write the plan into")
@snapshot_opt
@click.option("--group", "groups", multiple=True, help="a group id (repeatable)")
@click.option("--group-regex", "group_regex", default=None,
              help="groups whose id a regex matches anywhere in (re.search, run by RE2)")
@click.option("--changed-since", "changed_since", default=None,
              help="groups with a commit or group record at or after this time, or a commit that took effect then "
                   "(a transactional one at its COMMIT marker; ISO-8601 or epoch ms)")
@click.option("--damaged-since", "damaged_since", default=None,
              help="groups `changes` reports damaged from this time on: an offset rewound, deleted or expired, or "
                   "the group deleted (ISO-8601 or epoch ms)")
@click.option("--damaged-until", "damaged_until", default=None,
              help="with --damaged-since: up to this time (included; default: the snapshot's as-of)")
@click.option("--clamp", is_flag=True,
              help="write each target clamped into [log start, log end] where the snapshot knows them (README.txt "
                   "lists the ones moved)")
@click.option("--force", is_flag=True, help="empty OUT first when it holds an earlier plan (refused otherwise)")
def restore_plan(warehouse, as_of, out, snapshot_id, groups, group_regex, changed_since, damaged_since,
                 damaged_until, clamp, force):
    """Every selected group's committed offsets at --as-of, as `kafka-consumer-groups --reset-offsets --from-file`
    plans (one CSV per group), with index.json, apply.sh and README.txt, in OUT."""
    chosen = [x for x in (groups and "--group", group_regex is not None and "--group-regex",
                          changed_since is not None and "--changed-since",
                          damaged_since is not None and "--damaged-since") if x]
    if len(chosen) > 1:
        fail(f"give one of --group, --group-regex, --changed-since, --damaged-since, not {' and '.join(chosen)}")
    if damaged_until is not None and damaged_since is None:
        fail("--damaged-until needs --damaged-since")
    if not out:  # `--out "$OUT"` with OUT unset: the current directory, which --force would have emptied
        fail("--out is empty: name the directory to write the plan into")
    if _inside(out, warehouse) or _inside(warehouse, out):  # --force emptied a table of it, or the whole warehouse
        where = "is in" if _inside(out, warehouse) else "holds"
        fail(f"--out {out} {where} the warehouse {warehouse}: write the plan outside it")
    try:
        as_of_ms = parse_instant(as_of, "--as-of")
        since_ms = None if changed_since is None else parse_instant(changed_since, "--changed-since")
        damaged = None if damaged_since is None else (
            parse_instant(damaged_since, "--damaged-since"),
            None if damaged_until is None else parse_instant(damaged_until, "--damaged-until"))
        if damaged is not None and damaged[1] is not None and damaged[1] < damaged[0]:
            fail("--damaged-until is before --damaged-since")
    except ValueError as e:
        fail(str(e))
    _group_regex(group_regex)
    reader, snap = _open(warehouse, snapshot_id)
    try:
        result = plan(reader, snap, as_of_ms, groups=list(groups) or None, group_regex=group_regex,
                      changed_since_ms=since_ms, damaged=damaged, clamp=clamp)
        write_restore_plan(result, out, force=force)
    except HistoryUnavailable as e:
        fail(f"{e} (a what-if run: offsetlake rebuild --until-time {as_of})")
    except OutsideHistory as e:
        fail(f"--{e.option.replace('_', '-')} {e}")
    except GroupNotFound as e:
        fail(str(e))
    except OutNotAPlan as e:
        fail(f"--out {e}")
    except OutNotEmpty:
        fail(f"--out {out}: not empty (an earlier plan's files would be applied with this one): choose an empty "
             "directory, or --force to empty it first")
    except OSError as e:
        fail(f"--out {out!r}: {e.strerror or e}")
    with_file = [g for g in result.groups if g.file]
    refused = sum(g.refused for g in with_file)
    gone = sum(g.state_now is None for g in with_file)
    outside = sum(len(g.below_log_start) + len(g.above_log_end) for g in with_file)
    unpassable = sum(g.unpassable for g in with_file)
    partitions = counted(sum(len(g.offsets) for g in with_file), "partition")
    click.echo(f"{counted(len(with_file), 'group')}, {partitions} as of "
               f"{as_of} (snapshot {snap.snapshot_id}) written to {out}: {refused} refused while active, {gone} gone, "
               f"{len(result.groups) - len(with_file)} with nothing to restore, {outside} target(s) outside the log"
               + (" (clamped)" if clamp and outside else "")
               + (f", {unpassable} not in apply.sh (a NUL in the id)" if unpassable else "")
               + f". Read {out}/README.txt, then BOOTSTRAP=host:9092 sh {out}/apply.sh --dry-run", err=True)


# what an end-offsets file may hold: a line is a topic (249 characters at most) and two numbers, and a cluster has a
# few million partitions; `--end-offsets /dev/zero` was read whole, until the kernel killed the process
END_OFFSETS_MAX_BYTES = 128 << 20
END_OFFSETS_MAX_LINE = 64 << 10


def _read_bounded(f) -> bytes:
    """`f`'s bytes (a file, or a pipe: `--end-offsets <(kafka-get-offsets.sh …)`), a ValueError past the bounds."""
    name = getattr(f, "name", "end offsets")
    chunks, size, line = [], 0, 0
    while chunk := f.read(1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        last = chunk.rfind(b"\n")
        line = line + len(chunk) if last < 0 else len(chunk) - last - 1
        if line > END_OFFSETS_MAX_LINE:
            raise ValueError(f"{name}: a line longer than {END_OFFSETS_MAX_LINE:,} bytes: not end offsets")
        if size > END_OFFSETS_MAX_BYTES:
            raise ValueError(f"{name}: more than {END_OFFSETS_MAX_BYTES:,} bytes: not end offsets")
    return b"".join(chunks)


@click.command(cls=OneValueEach)
@warehouse_opt
@click.argument("group", required=False)
@click.option("--members", is_flag=True, help="members: consumer id, host, client id, #partitions")
@click.option("--state", is_flag=True, help="state, assignment strategy, #members")
@click.option("--offsets", is_flag=True, help="offsets per partition (the default)")
@click.option("--history", is_flag=True,
              help="the group's rebalances from the log: generations/epochs, members joining and leaving, deletions")
@click.option("--all-groups", is_flag=True, help="every consumer group of the snapshot")
@click.option("--end-offsets", "end_offsets", type=click.File("rb"), default=None,
              help="end offsets giving LOG-END-OFFSET and LAG, instead of the snapshot's own: kafka-get-offsets "
                   "output (topic:partition:offset) or CSV topic,partition,end_offset")
@click.option("--verbose", is_flag=True, help="Kafka 4.0's --verbose columns")
@snapshot_opt
def describe(warehouse, group, members, state, offsets, history, all_groups, end_offsets, verbose, snapshot_id):
    """A group as `kafka-consumer-groups --describe` shows it (offsets, --members or --state)."""
    # one view a run, as kafka-consumer-groups --describe takes at most one of --members, --offsets, --state
    # (ConsumerGroupCommandOptions.checkArgs, 4.0): two were the last one given, the other dropped without a word
    views_asked = [f"--{n}" for n, on in (("members", members), ("state", state), ("offsets", offsets),
                                          ("history", history)) if on]
    if len(views_asked) > 1:
        raise click.UsageError(f"give at most one of --members, --state, --offsets, --history, not "
                               f"{' and '.join(views_asked)}")
    mode = views_asked[0][2:] if views_asked else "offsets"
    if all_groups and group:
        raise click.UsageError("give either GROUP or --all-groups, not both")
    if not all_groups and group is None:
        raise click.UsageError("missing GROUP (or --all-groups)")
    leo = None
    if end_offsets is not None:
        if mode != "offsets":
            raise click.UsageError("--end-offsets goes with the offsets view only")
        try:
            leo = parse_end_offsets_file(_read_bounded(end_offsets), getattr(end_offsets, "name", "end offsets"))
        except ValueError as e:
            raise click.UsageError(str(e)) from None
    reader, snap = _open(warehouse, snapshot_id)
    if mode == "history":
        if all_groups:
            raise click.UsageError("--history describes one GROUP")
        r = Rendered()
        # None for a warehouse written before group_history existed; a damaged one is a DamagedTable
        table = group_events(reader, snap, filters=[("group_id", "=", group)], columns=list(HISTORY_COLUMNS))
        events = [] if table is None or not table.num_rows else observed_events(table).to_pylist()
        if not events:
            idx = _index(reader, snap, group_ids=[group])
            if not (group in idx.groups or group in idx.expired_groups or group in idx.removed_groups):
                _unknown_group(reader, snap, idx.absent_reason(group), group)
        render_history(r, group, events)
        for stream, text in r.chunks:
            click.echo(view(text), nl=False, err=stream != OUT)
        sys.exit(1 if r.missing else 0)
    idx = _index(reader, snap, group_ids=None if all_groups else [group])
    if not all_groups and not idx.exists(group):
        _unknown_group(reader, snap, idx.absent_reason(group), group)
    groups = consumer_group_ids(idx) if all_groups else [group]
    r = render(idx, groups, mode=mode, end_offsets=leo, verbose=verbose)
    for stream, text in r.chunks:
        click.echo(view(text), nl=False, err=stream != OUT)
    if r.missing and not all_groups:
        sys.exit(1)


@click.command(cls=OneValueEach)
@warehouse_opt
@click.option("--group", default=None, help="group id")
@click.option("--topic", default=None, help="topic")
@click.option("--partition", type=click.IntRange(0, 2**31 - 1), default=None, help="partition (needs --topic)")
@snapshot_opt
def lookup(warehouse, group, topic, partition, snapshot_id):
    """Committed offsets by group / topic / partition, as JSON (the API's answers)."""
    if group is None and topic is None:
        raise click.UsageError("give --group and/or --topic")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    reader, snap = _open(warehouse, snapshot_id)
    idx = _index(reader, snap, group_ids=[group] if group is not None else None, topic=topic if group is None else None,
                 partition=partition if group is None else None)
    try:
        out = views.lookup(idx, group=group, topic=topic, partition=partition)
    except GroupNotFound as e:
        _unknown_group(reader, snap, str(e), group)
    if not out["offsets"] and topic is not None:
        # an empty list for a topic or partition the snapshot holds no offset on: a typo answered "nothing
        # committed" (exit 0 with --group) without a word
        why = _no_offsets(reader, snap, idx, group, topic, partition)
        click.echo(_pretty_json(out))
        fail(why, 1)
    click.echo(_pretty_json(out))
    if not out["offsets"] and group is None:
        sys.exit(1)


def _no_offsets(reader, snap, idx, group: str | None, topic: str, partition: int | None) -> str:
    """Why `lookup` holds no offset on `topic` (`partition`), in words; a topic the snapshot knows nothing of is a
    usage error (exit 2, with its nearest topics), as a group it does not hold is."""
    sid = snap.snapshot_id
    if not topic_known(reader, snap, topic):
        fail(f"topic {topic!r} does not exist in snapshot {sid!r}: no offset was committed on it and the dump's log "
             "dirs hold none of its partitions" + did_you_mean(close_topics(reader, snap, topic), quote=True))
    where = f"topic {topic!r}" if partition is None else f"partition {partition} of topic {topic!r}"
    if group is not None:
        held = idx.group_offsets(group, ["topic", "partition"])
        if partition is not None and any(r["topic"] == topic for r in held):
            theirs = f" (its partitions of {topic!r}: {_spans(r['partition'] for r in held if r['topic'] == topic)})"
        else:
            theirs = f" (its topics: {', '.join(map(repr, sorted({r['topic'] for r in held})))})" if held else ""
        return f"group {group!r} has no committed offset on {where} in snapshot {sid!r}{theirs}"
    committed = committed_partitions(reader, snap, topic) if partition is not None else []
    on = f" (committed on partitions {_spans(committed)})" if committed else ""
    return f"no group has a committed offset on {where} in snapshot {sid!r}{on}"


def _spans(numbers) -> str:
    """`0-2, 5` for 0, 1, 2, 5."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _inside(path: str, root: str) -> bool:
    """Whether local path `path` is `root` or under it (symlinks resolved); an object-store URI is never local."""
    if "://" in str(path) or "://" in str(root):
        return False
    p, r = Path(path).resolve(), Path(root).resolve()
    return p == r or r in p.parents


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command(cls=OneValueEach)
@warehouse_opt
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (loopback unless told)")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--token", default=None, help="require `Authorization: Bearer TOKEN` on the API routes")
@click.option("--refresh-interval", type=click.FloatRange(0.0, 3600.0), default=1.0, show_default=True,
              help="seconds between checks of the runs table for a new snapshot")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info")
@click.option("--metrics-max-series", type=click.IntRange(min=0), default=10_000, show_default=True,
              help="/metrics: at most this many partitions (largest lag first) and groups (worst first) get series")
def serve(warehouse, host, port, token, refresh_interval, log_level, metrics_max_series):
    """The read-only HTTP JSON API (every route described at GET /openapi.json) and a small web page at /."""
    # imported here, not at module level: fastapi ~0.6 s, uvicorn ~0.2 s of import (python -X importtime)
    import uvicorn

    from jobs.api import create_app
    from jobs.api.responses import JsonErrorsProtocol

    try:
        reader = DeltaWarehouseReader(warehouse)
        # the server reads `runs` as it starts: a damaged one failed its startup in a traceback (uvicorn's, exit 3)
        reader.runs()
    except (NotAWarehouse, ReadError) as e:
        fail(str(e))
    if token is not None and not token.strip():
        raise click.UsageError("--token must not be empty")
    if math.isnan(refresh_interval):  # click's range lets nan through; each refresh loop then spun without a pause
        raise click.UsageError("--refresh-interval must be a number of seconds, not nan")
    if not host.strip():  # `--host "$HOST"` with HOST unset: the socket would bind every interface
        raise click.UsageError("--host must not be empty (0.0.0.0 binds every interface, if that is what you mean)")
    if not _is_loopback(host) and token is None:
        warn(f"serving on {host} without --token: anyone who can reach it can read the snapshots.")
    sock = _listen(host, port)
    app = create_app(reader, token=token, refresh_interval=refresh_interval, metrics_max_series=metrics_max_series)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, workers=1, access_log=log_level == "debug",
                            http=JsonErrorsProtocol)
    uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound here as uvicorn binds it (SO_REUSEADDR, IPv6 for an address with `:`) and
    handed to it: a port in use or an address this host does not have is one line and exit 2, where uvicorn
    would log it in six and exit 3, and nothing can take the port between the check and the server's start."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        hint = " (another process is listening there: stop it or pick another --port)" if e.errno == errno.EADDRINUSE else ""
        fail(f"cannot listen on {host}:{port}: {e.strerror or e}{hint}")
    sock.set_inheritable(True)
    return sock


@click.command(cls=OneValueEach)
@warehouse_opt
@click.argument("snap_a")
@click.argument("snap_b")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--fail-on-regression", is_flag=True, help="exit 1 when a committed offset went backwards")
def diff(warehouse, snap_a, snap_b, as_json, fail_on_regression):
    """What changed from SNAP_A to SNAP_B: offsets advanced / regressed / appeared / disappeared / expired, groups
    created / deleted / changed."""
    reader, a = _open(warehouse, snap_a)
    _, b = _open(warehouse, snap_b)
    d = diff_snapshots(_index(reader, a), _index(reader, b))
    click.echo(json.dumps(d, ensure_ascii=False) if as_json else view(render_text(d)), nl=as_json)
    if fail_on_regression and d["summary"]["regressed"]:
        sys.exit(1)


@click.command("reset-plan", cls=OneValueEach)
@warehouse_opt
@click.option("--group", required=True, help="group id")
@snapshot_opt
def reset_plan(warehouse, group, snapshot_id):
    """The `kafka-consumer-groups --reset-offsets --from-file` CSV (topic,partition,offset) that puts GROUP back
    where the snapshot says it was. Notes go to stderr, the plan to stdout."""
    reader, snap = _open(warehouse, snapshot_id)
    idx = _index(reader, snap, group_ids=[group])
    try:
        text, warnings = reset_offsets(idx, group)
    except GroupNotFound as e:
        _unknown_group(reader, snap, str(e), group)
    except ValueError as e:  # the group holds no offset to reset to
        fail(str(e), 1)
    click.echo(text, nl=False)
    for w in warnings:
        warn(w)
    click.echo(view(
        f"# {text.count(chr(10))} partitions of group {group!r} as of snapshot {snap.snapshot_id}. Apply with:\n"
        f"#   kafka-consumer-groups.sh --bootstrap-server HOST:PORT --group {shlex.quote(group)} --reset-offsets "
        "--from-file PLAN.csv --dry-run   (then --execute)"),
        err=True,
    )


@click.command(cls=OneValueEach)
@warehouse_opt
@click.argument("query")
@snapshot_opt
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def sql(warehouse, query, snapshot_id, fmt):
    """Run QUERY in DuckDB over views named after the tables (snapshot tables restricted to the snapshot)."""
    # imported here, not at module level: duckdb ~0.3 s of import (python -X importtime)
    import duckdb

    from pipelines.serving import sql as sqlmod

    reader, snap = _open(warehouse, snapshot_id)
    con = sqlmod.connect(reader, snap)
    try:
        result = sqlmod.stream(con, query)
        # printed as fetched (a result of any size); Ctrl-C and `| head` end it as they end every command here
        for text in sqlmod.printed(result.columns, result.batches, fmt):
            click.echo(view(text) if fmt == "table" else text, nl=False)
    except duckdb.Error as e:
        fail(str(e))
    except BaseException:
        # Ctrl-C, `| head`: DuckDB's threads would run the query on, and the interpreter's exit wait for them
        con.interrupt()
        raise


@click.command(cls=OneValueEach)
@warehouse_opt
@click.option("--from", "start", required=True, help="window start: ISO-8601 (UTC when no zone) or epoch ms")
@click.option("--to", "end", required=True, help="window end (included): ISO-8601 or epoch ms")
@click.option("--group", "groups", multiple=True, help="only this group (repeatable)")
@click.option("--group-regex", default=None,
              help="only groups whose id a regex matches anywhere in (re.search, run by RE2)")
@click.option("--storm-threshold", type=click.IntRange(min=1), default=None,
              help="a rebalance storm is more than this many new generations / group epochs in one minute "
                   "[default: 10]")
@click.option("--json", "as_json", is_flag=True, help="one JSON document: the list of changes")
@snapshot_opt
def changes(warehouse, start, end, groups, group_regex, storm_threshold, as_json, snapshot_id):
    """What changed between --from and --to, from the snapshot's history, oldest first: offsets that went
    backwards or past the known log end, offset tombstones and expiry, groups created / emptied / deleted /
    converted, rebalance storms; each with its time, log position, generation and the member assigned then."""
    # imported here, not at module level: numpy ~0.1-0.3 s of import (python -X importtime)
    from pipelines.serving import changes as ch

    _group_regex(group_regex)
    try:
        sel = ch.Selection(ch.parse_time(start, "--from"), ch.parse_time(end, "--to"), tuple(groups), group_regex,
                           storm_threshold or ch.DEFAULT_STORM_PER_MINUTE)
    except ch.BadWindow as e:
        fail(str(e))
    reader, snap = _open(warehouse, snapshot_id)
    try:
        items, warnings = ch.changes_and_warnings(reader, snap, sel)
    except (HistoryUnavailable, GroupNotFound) as e:
        fail(str(e))
    except OutsideHistory as e:
        fail(f"--{e.option} {e}")
    for w in warnings:  # on stderr: the answer (--json's list) keeps its shape
        warn(w)
    click.echo(_pretty_json(items) if as_json else view(ch.render_text(items)), nl=as_json)


# Catch-all: a serving error that escaped a command is a message, not a stack trace.
for _cmd in (describe, lookup, diff, reset_plan, sql, changes, restore_plan):
    _inner = _cmd.callback

    def _wrapped(*args, __inner=_inner, **kwargs):
        try:
            return __inner(*args, **kwargs)
        except ReadError as e:
            fail(str(e))
        except StorageError as e:  # the object store refused a read: the URI and the cause
            fail(f"cannot read the warehouse: {e}")
        except StoreUnavailable as e:  # it kept failing past its retries (`io.retry`): not the user's mistake
            fail(f"cannot read the warehouse: {e}", 1)
        except OSError as e:
            if e.errno in WRITE_ERRNOS:  # stdout's reader left (`… | head`) or its disk is full: OneLineErrors
                raise
            fail(f"cannot read the warehouse: {plain(str(e))}")  # delta-rs raises some of its errors as OSErrors
        except Exception as e:  # delta-rs errors on a damaged table
            reason = delta_error(e)
            if reason is not None:
                fail(f"cannot read the warehouse: {reason}")
            raise

    _cmd.callback = _wrapped
