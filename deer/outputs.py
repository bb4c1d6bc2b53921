"""Run outputs: tables, JSON and metadata, each written atomically (temp file + rename)."""

from __future__ import annotations

import importlib.metadata
import io
import json
import platform
from pathlib import Path

import numpy as np
import pandas as pd

from deer.cache import atomic_write_bytes

VERSIONED_PACKAGES = ("deer-probe-toolkit", "torch", "transformers", "faiss-cpu", "numpy", "scipy", "pandas", "click")


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def write_json(path: Path, payload) -> None:
    atomic_write_bytes(Path(path), json.dumps(payload, indent=2, default=_json_default, sort_keys=False).encode())


def write_table(path: Path, table: pd.DataFrame) -> Path:
    """Write ``table`` as parquet (if pyarrow is installed and the suffix asks) or CSV."""
    path = Path(path)
    buffer = io.BytesIO()
    if path.suffix == ".parquet":
        table.to_parquet(buffer, index=False)
    else:
        table.to_csv(buffer, index=False)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def read_table(path: Path) -> pd.DataFrame:
    path = Path(path)
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def default_table_suffix() -> str:
    try:
        import pyarrow  # noqa: F401

        return ".parquet"
    except ImportError:
        return ".csv"


def package_versions() -> dict:
    versions = {"python": platform.python_version()}
    for package in VERSIONED_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions
