"""The one atomic writer (a temp file renamed into place: no reader sees a half-written file; a failure names the
path: ``WriteError``), the one folder lock, under which one process at a time reads, modifies and writes a folder,
and ``restored_on_failure``, which puts a folder's files back as they were when a save of several files fails."""

from __future__ import annotations

import contextlib
import errno
import hashlib
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


class WriteError(OSError):
    """A write that failed, naming the file and what was being written; ``errno`` is the cause's (ENOSPC, EACCES, ...)."""

    def __init__(self, path: Path, what: str | None, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.path, self.what = Path(path), what

    def __str__(self) -> str:
        code = errno.errorcode.get(self.errno, "")
        return (f"could not write {self.path}{f' ({self.what})' if self.what else ''}: {self.strerror}"
                f"{f' [{code}]' if code else ''}")


def atomic_write_bytes(path: Path, data: bytes, what: str | None = None) -> None:
    """Write to a temp file in the same folder, then rename: never a half-written file (``WriteError`` if it fails)."""
    atomic_write_with(path, lambda handle: handle.write(data), what)


def atomic_write_with(path: Path, write, what: str | None = None) -> None:
    """``write(handle)`` into a temp file in the same folder, then rename (for data too large to hold as bytes).
    An OSError on the way (no space, no permission, a read-only disk) is a ``WriteError`` naming ``path`` and
    ``what`` was being written; the temp file is removed and a file already at ``path`` is left as it was."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.chmod(tmp, NEW_FILE_MODE)
        os.replace(tmp, path)
    except BaseException as error:
        if tmp is not None:
            with contextlib.suppress(OSError):
                Path(tmp).unlink(missing_ok=True)
        if isinstance(error, OSError) and not isinstance(error, WriteError):
            raise WriteError(path, what, error) from error
        raise


@contextlib.contextmanager
def restored_on_failure(paths):
    """Run the block; if it raises, put each of ``paths`` back as it was before (a file it created removed, one it
    replaced or removed restored), so a save of several files that fails part-way leaves the folder as it found it.
    The old files are kept by hard links (no space taken: a full disk cannot stop the restore); where a link cannot
    be made, that file is left as the block left it (a reader refuses the folder by name: ``load_result``)."""
    kept: dict[Path, Path | None] = {}
    for path in map(Path, paths):
        backup = None
        if path.exists():
            backup = path.with_name(f".{path.name}.{os.getpid()}.before")
            try:
                backup.unlink(missing_ok=True)
                os.link(path, backup)
            except OSError:
                continue  # no restore for this file
        kept[path] = backup
    try:
        yield
    except BaseException:
        for path, backup in kept.items():
            with contextlib.suppress(OSError):
                if backup is None:
                    path.unlink(missing_ok=True)
                else:
                    os.replace(backup, path)
        raise
    finally:
        for backup in kept.values():
            if backup is not None:
                with contextlib.suppress(OSError):
                    backup.unlink(missing_ok=True)


@contextlib.contextmanager
def folder_lock(folder: Path, name: str = ".lock", wait_message: str | None = None):
    """The cross-process lock ``folder/name``, held while the ``with`` block runs (``kg_data.locks.held_lock``); a
    folder or lock file that cannot be made is a ``WriteError`` naming it."""
    path, held = Path(folder) / name, False
    try:
        with held_lock(path, wait_message):
            held = True
            yield
    except OSError as error:
        if held or isinstance(error, WriteError):  # the block's own error
            raise
        raise WriteError(path, "the folder's lock file", error) from error


def write_text(path: Path, text: str, what: str | None = None) -> None:
    atomic_write_bytes(Path(path), text.encode(), what)


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


def write_json(path: Path, payload, what: str | None = None) -> None:
    atomic_write_bytes(Path(path), json.dumps(payload, indent=2, default=json_default, sort_keys=False).encode(), what)


def write_table(path: Path, table: pd.DataFrame, what: str | None = None, digest: bool = False) -> Path:
    """Write ``table`` as parquet where the suffix asks (with page checksums, which ``read_table`` checks), else CSV;
    ``what`` names it in a failed write's error.  ``digest`` (parquet only): the file also records ``table_digest`` of
    its content as a reader gets it back, which ``read_table_and_digest`` returns, so a reader can tell a table that
    is still valid but not what was written."""
    path = Path(path)
    buffer = io.BytesIO()
    if digest:
        if path.suffix != ".parquet":
            raise ValueError(f"{path}: only a parquet table records its content digest")
        buffer.write(_parquet_with_digest(table))
    elif path.suffix == ".parquet":
        table.to_parquet(buffer, index=False, write_page_checksum=True)
    else:
        table.to_csv(buffer, index=False)
    atomic_write_bytes(path, buffer.getvalue(), what)
    return path


TABLE_DIGEST_KEY = b"deer.table_digest"  # the parquet key-value metadata entry holding ``table_digest``


def _parquet_with_digest(table: pd.DataFrame) -> bytes:
    """``table`` as parquet bytes (as ``to_parquet(index=False)`` writes it) recording in its key-value metadata the
    digest of the content plain parquet bytes of it give back: a reader compares what it reads, whatever dtypes the
    round trip gives."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    plain = io.BytesIO()
    table.to_parquet(plain, index=False)
    content = table_digest(pd.read_parquet(io.BytesIO(plain.getvalue())))
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), TABLE_DIGEST_KEY: content.encode()})
    buffer = io.BytesIO()
    pq.write_table(arrow, buffer, write_page_checksum=True)
    return buffer.getvalue()


def table_digest(table: pd.DataFrame) -> str:
    """A digest of a table's content: its column names, row count and every value (pandas' fixed-key hash of each;
    a value pandas cannot hash, such as a list, by its repr).  Dtypes do not enter it: the same values read back
    as another dtype under another pandas version (object or str strings) are the same content."""
    digest = hashlib.sha256(json.dumps([[str(name) for name in table.columns], len(table)]).encode())
    for position in range(table.shape[1]):
        digest.update(_column_hashes(table.iloc[:, position]).tobytes())
    return digest.hexdigest()


def _column_hashes(column: pd.Series) -> np.ndarray:
    try:
        return pd.util.hash_pandas_object(column, index=False).to_numpy()
    except TypeError:  # unhashable values (lists, arrays): hashed by their text, exact for numbers
        text = column.map(lambda value: repr(value.tolist() if hasattr(value, "tolist") else value))
        return pd.util.hash_pandas_object(text, index=False).to_numpy()


def read_table(path: Path) -> pd.DataFrame:
    """A table written by ``write_table``; a parquet page whose checksum does not match raises (OSError)."""
    path = Path(path)
    return pd.read_parquet(path, page_checksum_verification=True) if path.suffix == ".parquet" else pd.read_csv(path)


def read_table_and_digest(path: Path) -> tuple[pd.DataFrame, str | None]:
    """A parquet table written by ``write_table(..., digest=True)`` and the digest it records (None: none), both
    from one read of the file, so a file replaced meanwhile cannot pair one version's content with another's digest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = Path(path).read_bytes()
    table = pd.read_parquet(io.BytesIO(data), page_checksum_verification=True)
    recorded = (pq.read_schema(pa.BufferReader(data)).metadata or {}).get(TABLE_DIGEST_KEY)
    return table, None if recorded is None else recorded.decode("ascii", "replace")


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


def toolkit_version(metadata: dict) -> str | None:
    """The toolkit version a run's ``metadata`` records (``package_versions``; None: none)."""
    return (metadata.get("versions") or {}).get(DISTRIBUTION)
