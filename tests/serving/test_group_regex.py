"""The group regex of `changes` and `restore-plan` (CLI `--group-regex`, API `group_regex`): a pattern that makes a
backtracking engine take exponential time answers promptly, in every command and route; one the linear-time engine
refuses is one line (exit 2) or a 400, before anything is read; the rest match anywhere in the id, as re.search.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .conftest import running_server
from .warehouse_kit import WarehouseKit, commit, group, offset, ts

ROOT = Path(__file__).resolve().parents[2]
#: against an id of 24 characters without an X, Python's re takes hours: (.*.*)* splits it every way there is
CATASTROPHIC = "(.*.*)*X"
LONG = "a" * 24
#: generous: a linear engine answers in well under a second, a backtracking one never does
PROMPT = 20


@pytest.fixture(scope="module")
def long_ids(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("long-ids")
    ids = [LONG, LONG + "b", "b" + LONG, LONG + "X"]
    WarehouseKit(root).snapshot(
        "s1", groups=[group(g, "Empty") for g in ids], offsets=[offset(g, "t", 0, 5, t=1.0) for g in ids],
        commits=[c for g in ids for c in (commit(g, "t", 0, 9, t=1.0), commit(g, "t", 0, 5, t=2.0))], as_of=ts(10))
    return root


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=PROMPT)


def _window() -> list[str]:
    return ["--from", ts(0).isoformat(), "--to", ts(10).isoformat()]


def test_changes_answers_a_catastrophic_pattern_promptly(long_ids):
    r = _cli("changes", "--warehouse", str(long_ids), *_window(), "--group-regex", CATASTROPHIC, "--json")
    assert r.returncode == 0, r.stderr
    assert {c["group_id"] for c in json.loads(r.stdout)} == {LONG + "X"}


def test_restore_plan_answers_a_catastrophic_pattern_promptly(long_ids, tmp_path):
    r = _cli("restore-plan", "--warehouse", str(long_ids), "--as-of", ts(5).isoformat(), "--out",
             str(tmp_path / "plan"), "--group-regex", CATASTROPHIC)
    # warehouse_kit's history lacks the batch positions a plan replays: refused, but only after the selection
    assert r.returncode == 2 and "written before restore plans" in r.stderr, r.stderr


@pytest.mark.integration
def test_the_server_answers_a_catastrophic_pattern_promptly(long_ids):
    with running_server(long_ids) as base:
        r = httpx.get(base + "/changes", params={"from": ts(0).isoformat(), "to": ts(10).isoformat(),
                                                 "group_regex": CATASTROPHIC}, timeout=PROMPT)
        assert r.status_code == 200 and {c["group_id"] for c in r.json()["changes"]} == {LONG + "X"}
        r = httpx.get(base + "/restore-plan.zip", params={"as_of": ts(5).isoformat(), "group_regex": CATASTROPHIC},
                      timeout=PROMPT)
        assert r.status_code == 404 and "written before restore plans" in r.json()["detail"], r.text
        assert httpx.get(base + "/health", timeout=PROMPT).status_code == 200


@pytest.mark.parametrize("pattern", ["a(?=X)", r"(a)\1", "(", r"\bpay", r"[\W]", "ments$\\n", r"\C"])
def test_a_pattern_the_engine_refuses_is_one_line_and_exit_2(long_ids, tmp_path, pattern):
    for args in (["changes", "--warehouse", str(long_ids), *_window()],
                 ["restore-plan", "--warehouse", str(long_ids), "--as-of", ts(5).isoformat(), "--out",
                  str(tmp_path / "plan")]):
        r = _cli(*args, "--group-regex", pattern)
        assert r.returncode == 2 and r.stdout == "", r
        assert r.stderr.startswith(f"error: --group-regex {pattern!r}: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / "plan").exists()


@pytest.mark.parametrize("pattern", ["a(?=X)", r"(a)\1", "("])
def test_a_pattern_the_engine_refuses_is_a_400(long_ids, pattern):
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    with TestClient(create_app(DeltaWarehouseReader(long_ids), refresh_interval=0)) as client:
        for route, params in (("/changes", {"from": ts(0).isoformat(), "to": ts(10).isoformat()}),
                              ("/restore-plan.zip", {"as_of": ts(5).isoformat()})):
            r = client.get(route, params={**params, "group_regex": pattern})
            assert r.status_code == 400, (route, r.text)
            assert r.json()["detail"].startswith("group_regex ") and "\n" not in r.json()["detail"], r.text


@pytest.mark.parametrize("pattern", ["^pay", "ments$", "ay", "(?i)PAY", "^[a-z]+-[0-9]{2}$", "a|z", r"\.", ""])
def test_a_pattern_matches_anywhere_in_the_id_as_re_search(pattern):
    from pipelines.serving.group_regex import matching

    ids = ["payments", "pay-01", "repay", "orders.v2", "Zed", "ünïcode-42"]
    assert matching(ids, pattern) == [g for g in ids if re.search(pattern, g)]


#: ids RE2 reads otherwise than Python's re: Unicode letters and digits, spaces that are not ASCII, a final newline
UNICODE_IDS = ["analytics-ομάδα-44", "catalog-그룹-118", "pay-٣", "a{,3}", "aa", "foo\n", "café-x", "tab\x0bx",
               "nb\xa0x", "x\u2028y", "A", "x]y", "a[b", ":", "", "a\nb\n", "Ab_9", "ǅ", "Ⅻ", "²"]


@pytest.mark.parametrize("pattern", [r"-\w+-", r"[\w]+-44", r"^\w+$", r"-\W", r"[^\w]", r"\d", r"[\d]", r"\D", r"\s",
                                     r"\S", r"[^\s\d]", "a{,3}", "^a{,3}$", "a{,}", "foo$", "^foo$", r"foo\Z", "(?m)a$",
                                     r"\u03bc", r"\N{GREEK SMALL LETTER MU}", "[[:alpha:]]", "[]]", "(?#note)aa", "(?u)a",
                                     r"(?i)ΟΜΆΔΑ", r"[\b]"])
def test_what_re2_reads_otherwise_is_matched_as_re_search(pattern):
    """RE2 took \\w, \\d and \\s for ASCII (`-\\w+-` selected no Greek or Korean id), `{,3}` for text and `$` for the
    end of the text alone, and refused Python's \\u, \\N{…}, (?#…) and (?u): each selected other groups than
    re.search does, or none, without a word."""
    import warnings

    from pipelines.serving.group_regex import matching

    with warnings.catch_warnings():  # [[: Python's "possible nested set"
        warnings.simplefilter("ignore", FutureWarning)
        want = [g for g in UNICODE_IDS if re.search(pattern, g)]
    assert matching(UNICODE_IDS, pattern) == want


def test_random_patterns_match_as_re_search_or_are_refused():
    """Patterns made of Python's syntax at random: whatever the translation accepts matches what re.search does."""
    import random
    import warnings

    from pipelines.serving.group_regex import BadGroupRegex, matching

    atoms = [r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", "a", ".", "^", "$", r"\Z", r"\A", "-", "[", "]", "[^", "(", ")",
             "(?:", "(?i)", "(?m)", "(?i:", "|", "*", "+", "?", "{,2}", "{1,}", "{,}", r"\n", "ο", r"\u03bf", r"[\w-]",
             r"[^\d]", ":", r"\[", r"\$", "x", "_", "٣", "[]a]", "{", "ǆ", "[[:alpha:]]", "(?#c)"]
    rng, tried = random.Random(7), 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        for _ in range(3000):
            pattern = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 6)))
            try:
                compiled = re.compile(pattern)
                got = matching(UNICODE_IDS, pattern)
            except (re.error, BadGroupRegex):
                continue
            tried += 1
            assert got == [g for g in UNICODE_IDS if compiled.search(g)], pattern
    assert tried > 1000


@pytest.mark.parametrize("command", ["changes", "restore-plan"])
def test_a_regex_that_matches_no_group_is_refused_as_a_mistyped_group(long_ids, tmp_path, command):
    """A regex no group id of the snapshot matches (a typo, `aaaaX` for `aaaX`) answered no changes, exit 0, and
    restore-plan wrote a plan of no groups, exit 0; a mistyped --group was already one line, exit 2 (HTTP 404)."""
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    args = ([command, "--warehouse", str(long_ids), *_window()] if command == "changes" else
            [command, "--warehouse", str(long_ids), "--as-of", ts(5).isoformat(), "--out", str(tmp_path / "plan")])
    r = _cli(*args, "--group-regex", "^b?aaaaX")
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr == "error: no group id in snapshot 's1' matches the group regex '^b?aaaaX'\n", r.stderr
    assert not (tmp_path / "plan").exists()
    route, params = (("/changes", {"from": ts(0).isoformat(), "to": ts(10).isoformat()}) if command == "changes"
                     else ("/restore-plan.zip", {"as_of": ts(5).isoformat()}))
    with TestClient(create_app(DeltaWarehouseReader(long_ids), refresh_interval=0)) as client:
        got = client.get(route, params={**params, "group_regex": "^b?aaaaX"})
    assert got.status_code == 404 and "matches the group regex" in got.json()["detail"], got.text


def test_a_regex_that_matches_groups_without_changes_answers_none(long_ids):
    r = _cli("changes", "--warehouse", str(long_ids), "--from", ts(5).isoformat(), "--to", ts(10).isoformat(),
             "--group-regex", "X$", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == [], r
