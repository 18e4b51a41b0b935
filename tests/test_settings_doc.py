"""The README's settings table names every setting `conf/base` knows, with its default and each environment's
value, so the documented list cannot drift from the one `load_settings` accepts."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _table() -> dict[str, list[str]]:
    text = (ROOT / "README.md").read_text()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\| `([a-z_]+\.[a-z_]+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def _flat(path: Path) -> dict[str, object]:
    data = yaml.safe_load(path.read_text()) or {}
    return {f"{section}.{key}": value for section, keys in data.items() if section != "spark"
            for key, value in (keys or {}).items()}


def _yaml_text(value) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def test_every_setting_is_documented_with_its_values():
    table = _table()
    base = _flat(ROOT / "conf" / "base" / "offsetlake.yml")
    assert set(table) == set(base), (set(base) - set(table), set(table) - set(base))
    envs = ["local", "ci", "prod"]
    for key, value in base.items():
        cells = table[key]
        assert cells[0] == f"`{_yaml_text(value)}`", (key, cells[0])
        for i, env in enumerate(envs, start=1):
            overlay = _flat(ROOT / "conf" / env / "offsetlake.yml")
            expected = f"`{_yaml_text(overlay[key])}`" if key in overlay else ""
            assert cells[i] == expected, (key, env, cells[i], expected)
        assert cells[4], f"{key}: no description"
