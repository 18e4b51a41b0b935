"""The human summary printed at the end of a rebuild."""
from __future__ import annotations


def format_summary(s) -> str:
    lines = [
        f"snapshot {s.snapshot_id}: {s.status}"
        + (" (what-if: read it by id; the default snapshot and the incremental chain stay on the scheduled runs)"
           if getattr(s, "kind", "scheduled") == "what-if" else ""),
        f"  inputs            {', '.join(s.inputs)}",
        f"  read              {s.segments} segment file(s), {s.tabular_files} table file(s), {s.bytes_in / 1e6:.1f} MB",
        f"  records in        {s.records_in:,}  (used {s.records_out:,}, skipped {s.records_skipped:,}, "
        f"quarantined {s.records_quarantined:,}"
        + (f" in {s.quarantine_rows:,} quarantine row(s))" if getattr(s, "quarantine_rows", 0) else ")"),
    ]
    for label, n in sorted(s.record_type_counts.items()):
        lines.append(f"    {label:<28} {n:>12,}")
    lines += [
        f"  semantics         {s.semantics}",
        f"  as of             {s.as_of}  (retention {s.retention_minutes} min{'' if s.expiry else ', expiry off'})",
        f"  groups            {s.groups:,} live, {s.removed_groups:,} removed, {s.expired_groups:,} expired now"
        + (f", {s.misplaced_groups:,} in the wrong offsets partition" if s.misplaced_groups else ""),
        f"  offsets           {s.offsets:,} committed ({s.empty_group_offsets:,} of groups without a group record), "
        f"{s.expired_offsets:,} expired now",
        f"  transactions      {s.pending_transactions:,} open, {s.pending_offsets:,} pending offsets",
        _end_offsets_line(s),
        _lag_line(s.lag or {}),
        f"  validation        {'passed' if s.validation.get('success', True) else 'FAILED'}"
        + (f" ({s.validation.get('failed', 0)} expectation(s) failed)" if not s.validation.get('success', True) else ""),
    ]
    for f in (s.validation.get("failed_expectations") or []) if not s.validation.get("success", True) else []:
        lines.append(f"    failed            {f['table']}: {f['description'] or f['expectation']}"
                     + (f" ({f['unexpected_count']:,} row(s))" if f.get("unexpected_count") else ""))
    if s.incremental:
        lines.append(f"  incremental       {s.incremental}")
    for w in [*s.warnings, *getattr(s, "after_commit", ())]:
        lines.append(f"  warning           {w}")
    lines.append("  time              " + ", ".join(f"{k} {v:.1f}s" for k, v in s.stage_seconds.items()))
    first = getattr(s, "first_python_job_seconds", None)
    if first is not None:
        lines.append(f"  first Python job  {first:.1f}s")
    return "\n".join(lines)


def _lag_line(lag: dict) -> str:
    if not lag.get("partitions_read"):
        return "  lag in time       unknown (no data-topic segments in the log dirs)"
    notes = lag.get("notes") or {}
    return (f"  lag in time       {lag.get('offsets_timed', 0):,} of {lag.get('offsets', 0):,} committed offsets, "
            f"from {lag['partitions_read']:,} data-topic partition(s)' segments"
            + (f"; notes: {', '.join(f'{k} {v:,}' for k, v in notes.items())} (runs.summary lag.first_notes)"
               if notes else ""))


def _end_offsets_line(s) -> str:
    """How many data-topic partitions LAG is known for; a what-if run's are the ends at its as_of, which the log
    dirs do not give for every partition they hold (`log_end_offsets.ends_at`)."""
    unknown = getattr(s, "log_end_offsets_unknown_at_as_of", 0)
    if unknown:
        return (f"  end offsets       {s.log_end_offsets:,} data-topic partition(s) known at the as-of, {unknown:,} "
                "more in the log dirs whose end then is not (LAG unknown there)")
    return (f"  end offsets       {s.log_end_offsets:,} data-topic partition(s) in the log dirs"
            + ("" if s.log_end_offsets else " (LAG unknown: give describe --end-offsets)"))
