"""The one atomic writer (a temp file renamed into place: no reader sees a half-written file) and the one
folder lock, under which one process at a time reads, modifies and writes a folder."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import os
import platform
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from deer.base.extras import DISTRIBUTION
from deer.base.version import __version__
from kg_data.locks import held_lock


def _process_umask() -> int:
    """The process umask, read once at import: from /proc on Linux, else by the set-and-restore (racing threads)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0)
    os.umask(mask)
    return mask


NEW_FILE_MODE = 0o666 & ~_process_umask()  # what a plain new file gets (mkstemp would give 0o600)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, then rename: never a half-written file."""
    atomic_write_with(path, lambda handle: handle.write(data))


def atomic_write_with(path: Path, write) -> None:
    """``write(handle)`` into a temp file in the same folder, then rename (for data too large to hold as bytes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.chmod(tmp, NEW_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def folder_lock(folder: Path, name: str = ".lock", wait_message: str | None = None):
    """The cross-process lock ``folder/name``, held while the ``with`` block runs (``kg_data.locks.held_lock``)."""
    return held_lock(Path(folder) / name, wait_message)


def write_text(path: Path, text: str) -> None:
    atomic_write_bytes(Path(path), text.encode())


def save_figure(path: Path, figure, **options) -> None:
    """``figure.savefig`` through the atomic writer (format from the suffix)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **options)
    atomic_write_bytes(Path(path), buffer.getvalue())


VERSIONED_PACKAGES = ("torch", "transformers", "numpy", "scipy", "pandas", "click")


def json_default(value):
    """JSON for numpy scalars and arrays and paths (``json.dumps(..., default=json_default)``)."""
    for kind, convert in ((np.integer, int), (np.floating, float), (np.ndarray, np.ndarray.tolist), (Path, str)):
        if isinstance(value, kind):
            return convert(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def as_written(payload):
    """``payload`` as ``write_json`` stores it and a reader gets it back (numpy values plain, tuples as lists)."""
    return json.loads(json.dumps(payload, default=json_default))


def write_json(path: Path, payload) -> None:
    atomic_write_bytes(Path(path), json.dumps(payload, indent=2, default=json_default, sort_keys=False).encode())


def write_table(path: Path, table: pd.DataFrame) -> Path:
    """Write ``table`` as parquet where the suffix asks (with page checksums, which ``read_table`` checks), else CSV."""
    path = Path(path)
    buffer = io.BytesIO()
    if path.suffix == ".parquet":
        table.to_parquet(buffer, index=False, write_page_checksum=True)
    else:
        table.to_csv(buffer, index=False)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def read_table(path: Path) -> pd.DataFrame:
    """A table written by ``write_table``; a parquet page whose checksum does not match raises (OSError)."""
    path = Path(path)
    return pd.read_parquet(path, page_checksum_verification=True) if path.suffix == ".parquet" else pd.read_csv(path)


def default_table_suffix() -> str:
    with contextlib.suppress(ImportError):
        import pyarrow  # noqa: F401

        return ".parquet"
    return ".csv"


def package_versions() -> dict:
    versions = {"python": platform.python_version(), DISTRIBUTION: __version__}  # the code's own version, not metadata's
    for package in VERSIONED_PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    return versions
