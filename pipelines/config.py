"""Settings: the only reader of conf/ and of environment variables. Loaded once at the edge, passed down."""
from __future__ import annotations

import copy
import difflib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# conf/ in the checkout is the one source of the settings; a built wheel carries a copy of it as package data
# (pipelines/_conf, copied by setup.py at build time), because an installed package has no checkout beside it.
_PACKAGED_CONF = Path(__file__).resolve().parent / "_conf"
_CHECKOUT_CONF = Path(__file__).resolve().parent.parent / "conf"
CONF_DIR = next((d for d in (_PACKAGED_CONF, _CHECKOUT_CONF) if (d / "base" / "offsetlake.yml").is_file()),
                _CHECKOUT_CONF)
ENV_VAR = "OFFSETLAKE_ENV"
CONF_DIR_VAR = "OFFSETLAKE_CONF_DIR"
# The `storage:` section as JSON, in the environment of Spark's Python workers (`session.spark_builder` puts it
# there): a task retries its store requests as the run's settings say (`io.retry.policy`).
STORAGE_ENV_VAR = "OFFSETLAKE_STORAGE"


class ConfigError(ValueError):
    """A settings file or override is malformed (a usage error: exit 2)."""


def not_whole(value: Any) -> bool:
    """Whether a setting read as YAML is a fraction or a boolean (`1.5`, `yes`) where a whole number belongs: a typo,
    not a number to round (`int` would make them 1)."""
    return isinstance(value, bool) or (isinstance(value, float) and not value.is_integer())


def _merge(base: dict, overlay: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (overlay or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _read_yaml(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


# A section whose keys belong to another program and are passed through unchecked.
PASS_THROUGH_SECTIONS = ("spark",)


def _check_known(known: dict, overlay: dict, where: str) -> None:
    """Every section and key of `overlay` is one the base file has: a typo (`rebuild.semantix`) is an error
    with the nearest known name, not a setting silently ignored."""
    for section, values in (overlay or {}).items():
        if section not in known:
            raise ConfigError(f"{where}: unknown settings section {section!r}{_did_you_mean(section, known)}")
        if section in PASS_THROUGH_SECTIONS or not isinstance(values, dict):
            continue
        for key in values:
            if key not in (known[section] or {}):
                raise ConfigError(f"{where}: unknown setting {section}.{key}"
                                  f"{_did_you_mean(key, known[section] or {}, section + '.')}")


def _did_you_mean(name, choices, prefix: str = "") -> str:
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {prefix}{close[0]}?)" if close else f" (known: {', '.join(prefix + str(c) for c in choices)})"


@dataclass(frozen=True)
class Settings:
    """Every setting a run uses. `raw` keeps the merged YAML for sections other layers own."""

    env: str
    raw: dict[str, Any] = field(default_factory=dict)

    def section(self, name: str) -> dict[str, Any]:
        return dict(self.raw.get(name) or {})

    @property
    def spark_conf(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.section("spark").items() if v is not None}

    @property
    def spark_master_from_env(self) -> str | None:
        return os.environ.get("OFFSETLAKE_SPARK_MASTER")

    @property
    def launched_by_spark_submit(self) -> bool:
        # spark-submit starts the Python driver with a gateway to its JVM already running.
        return "PYSPARK_GATEWAY_PORT" in os.environ

    @property
    def python_executable(self) -> str | None:
        return os.environ.get("PYSPARK_PYTHON")


def load_settings(env: str | None = None, overrides: dict[str, Any] | None = None,
                  conf_dir: str | Path | None = None) -> Settings:
    """Base file, then the environment overlay, then command-line overrides (nested dicts). The folder is
    `conf_dir`, else $OFFSETLAKE_CONF_DIR, else the checkout's conf/ (or the installed wheel's copy of it)."""
    root = Path(conf_dir or os.environ.get(CONF_DIR_VAR) or CONF_DIR)
    if env is not None and not env.strip():  # `--env "$ENV"` with ENV unset: never another environment's settings
        raise ConfigError(f"the environment is empty (an unset variable?): name one, a folder of {root}")
    env = env or os.environ.get(ENV_VAR) or "local"
    merged = _read_yaml(root / "base" / "offsetlake.yml")
    if not merged:
        raise ConfigError(f"no base settings at {root / 'base' / 'offsetlake.yml'}")
    env_dir = root / env
    if env != "base" and not env_dir.is_dir():
        raise ConfigError(f"unknown environment {env!r}: no folder {env_dir}")
    overlay = _read_yaml(env_dir / "offsetlake.yml")
    _check_known(merged, overlay, str(env_dir / "offsetlake.yml"))
    _check_known(merged, overrides or {}, "--conf")
    merged = _merge(merged, overlay)
    merged = _merge(merged, overrides or {})
    return Settings(env=env, raw=merged)


def storage_section_from_env() -> dict | None:
    """The `storage:` settings handed to this process (a Spark task) through `STORAGE_ENV_VAR`, None without."""
    raw = os.environ.get(STORAGE_ENV_VAR)
    if not raw:
        return None
    try:
        section = json.loads(raw)
    except ValueError:
        return None
    return section if isinstance(section, dict) else None
