"""A snapshot's validation report as one self-contained HTML page (no scripts, no external assets)."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from html import escape
from pathlib import Path

from pipelines.validation.runner import ExpectationOutcome, SuiteOutcome, ValidationResult

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 6px}
.meta{color:#57606a;margin-bottom:16px} .meta span{margin-right:18px}
.banner{padding:10px 14px;border-radius:6px;font-weight:600;margin:12px 0}
.ok{background:#dafbe1;color:#116329} .bad{background:#ffebe9;color:#a40e26} .warn{background:#fff8c5;color:#7d4e00}
table{border-collapse:collapse;width:100%;margin:6px 0 12px} th,td{border:1px solid #d0d7de;padding:5px 8px;
text-align:left;vertical-align:top} th{background:#f6f8fa;font-weight:600}
tr.pass td.status{background:#dafbe1;color:#116329;font-weight:600}
tr.fail td.status{background:#ffebe9;color:#a40e26;font-weight:600}
tr.fail{background:#fff5f5} code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.why{color:#57606a;font-size:12px} pre{margin:0;white-space:pre-wrap;font:12px ui-monospace,Menlo,monospace}
nav a{margin-right:12px} .num{text-align:right;font-variant-numeric:tabular-nums}
"""


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _examples(e: ExpectationOutcome) -> str:
    if not e.examples:
        return ""
    lines = [json.dumps(x, default=str, ensure_ascii=False, sort_keys=True) for x in e.examples]
    return "<pre>" + escape("\n".join(lines)) + "</pre>"


def _suite_section(s: SuiteOutcome) -> str:
    state = "ok" if s.success else "bad"
    head = (
        f'<h2 id="{escape(s.name)}">{escape(s.name)} '
        f'<span class="banner {state}" style="font-size:12px;padding:2px 8px">'
        f'{"PASS" if s.success else f"{len(s.failed)} FAILED"}</span></h2>'
        f'<div class="meta"><span>{s.rows} rows</span><span>{len(s.expectations)} expectations</span>'
        f"<span>{s.seconds:.2f} s</span></div>"
    )
    rows = []
    for e in s.expectations:
        cls = "pass" if e.success else "fail"
        observed = _fmt(e.observed_value)
        if e.exception:
            observed = f"error: {e.exception}"
        rows.append(
            f'<tr class="{cls}"><td class="status">{"PASS" if e.success else "FAIL"}</td>'
            f"<td><code>{escape(e.id)}</code><br>{escape(e.description)}"
            f'<div class="why">{escape(e.why)}</div></td>'
            f"<td><code>{escape(e.expectation_type)}</code></td>"
            f'<td class="num">{escape(_fmt(e.unexpected_count))}</td>'
            f'<td class="num">{escape(_fmt(e.unexpected_percent))}</td>'
            f"<td>{escape(observed)}</td><td>{_examples(e)}</td></tr>"
        )
    table = (
        "<table><thead><tr><th>status</th><th>check</th><th>expectation</th><th>unexpected</th><th>%</th>"
        "<th>observed</th><th>unexpected examples</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )
    return head + table


def render_report(result: ValidationResult, title: str | None = None) -> str:
    """The report page as a string."""
    as_of = datetime.fromtimestamp(result.as_of_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    title = title or f"offsetlake validation — snapshot {result.snapshot_id or '(unnamed)'}"
    if result.success:
        banner = '<div class="banner ok">All expectations passed.</div>'
    elif result.should_fail_run:
        banner = (f'<div class="banner bad">{len(result.failed)} expectation(s) failed — policy "fail": '
                  "the run fails and the snapshot is not committed.</div>")
    else:
        banner = (f'<div class="banner warn">{len(result.failed)} expectation(s) failed — policy '
                  f'"{escape(result.policy)}": reported, the run continues.</div>')
    nav = "<nav>" + "".join(
        f'<a href="#{escape(s.name)}" style="color:{"#116329" if s.success else "#a40e26"}">{escape(s.name)}</a>'
        for s in result.suites
    ) + "</nav>"
    skipped = ""
    if result.skipped:
        skipped = "<h2>Not evaluated</h2><table><thead><tr><th>suite / check</th><th>reason</th></tr></thead><tbody>"
        skipped += "".join(f"<tr><td><code>{escape(i)}</code></td><td>{escape(r)}</td></tr>" for i, r in result.skipped)
        skipped += "</tbody></table>"
    meta = (
        f'<div class="meta"><span>as_of {escape(as_of)}</span><span>{result.num_partitions} offsets partitions</span>'
        f"<span>policy {escape(result.policy)}</span><span>{len(result.expectations)} expectations</span>"
        f"<span>{result.seconds:.1f} s</span></div>"
    )
    body = "".join(_suite_section(s) for s in result.suites)
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>{meta}{banner}{nav}{body}{skipped}</body></html>"
    )


def write_report(result: ValidationResult, path: str | Path, title: str | None = None) -> Path:
    """Write the page to `path` (parents created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(result, title), encoding="utf-8")
    return path
