"""Append-only, resumable store of embeddings, keyed by everything that determines them.

A store is a folder named by the hash of its key (``key.json`` repeats it, checked on open).  Vectors
arrive in parts (one ``.npz`` each, written atomically), so an interrupted run keeps every finished
part; a process encoding a store's missing items holds its lock, so two never encode the same items.
Every part is checked when read (``deer.platform.read_back``): one that is unreadable or holds what
``add`` never writes is named in a warning, set aside as ``<name>.bad`` and its items are missing again.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from deer.platform.files import atomic_write_bytes, folder_lock
from deer.platform.read_back import StoredFileError, read_arrays, read_json_object, set_aside
from deer.platform.validate import warn

FLUSH_COUNT = 2048
FLUSH_SECONDS_ENV = "DEER_STORE_FLUSH_SECONDS"


class CacheKeyMismatch(RuntimeError):
    """A cache folder's key.json does not match the key it was opened with."""


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


class EmbeddingStore:
    """Vectors for string item ids (entity ids, query keys) under one configuration key.

    ``width``: the length of every vector (the model's hidden size, a score row's candidates), checked
    in every part read; None: not checked.  ``minus_inf``: -inf is a value here (a log-likelihood), not damage.
    """

    def __init__(self, root: Path, kind: str, key: dict, width: int | None = None, minus_inf: bool = False):
        self.key = {"kind": kind, **key}
        self.width, self.minus_inf = width, minus_inf
        self.folder = Path(root) / kind / key_digest(self.key)
        self.folder.mkdir(parents=True, exist_ok=True)
        key_file = self.folder / "key.json"
        stored = None
        if key_file.exists():
            try:
                stored = read_json_object(key_file)
            except StoredFileError as error:  # the folder is named by the key's digest: it can be written again
                set_aside(error, "written again")
        if stored is None:
            atomic_write_bytes(key_file, json.dumps(self.key, indent=2, sort_keys=True).encode())
        elif stored != json.loads(json.dumps(self.key)):
            raise CacheKeyMismatch(f"{key_file} holds a different key; refusing to reuse {self.folder}")
        self._vectors: dict[str, np.ndarray] = {}
        self._parts_seen: set[str] = set()
        self.refresh()

    def refresh(self) -> None:
        """Load the parts not seen yet (written by another process since this one looked); a bad one is
        set aside with a warning and its items stay missing, so they are computed again."""
        for part in sorted(self.folder.glob("part-*.npz")):
            if part.name in self._parts_seen:
                continue
            self._parts_seen.add(part.name)
            try:
                ids, vectors = self._read_part(part)
            except StoredFileError as error:
                set_aside(error, "its items are computed again")
                continue
            self._vectors.update(zip(ids.tolist(), vectors, strict=True))

    def _read_part(self, part: Path) -> tuple[np.ndarray, np.ndarray]:
        """A part's ids and vectors if they are what ``add`` writes: a 1-D string array of distinct ids and
        one float32 row per id, of this store's width, without NaN or infinity; StoredFileError if not."""
        arrays = read_arrays(part, ("ids", "vectors"))
        ids, vectors = arrays["ids"], arrays["vectors"]
        problem = None
        if ids.ndim != 1 or ids.dtype.kind != "U":
            problem = f"its ids are {ids.dtype} of shape {ids.shape}, not a list of strings"
        elif len(set(ids.tolist())) != len(ids):
            problem = f"{len(ids) - len(set(ids.tolist()))} of its ids repeat"
        elif vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != len(ids):
            problem = f"its vectors are {vectors.dtype} of shape {vectors.shape}, not float32 rows for its {len(ids)} ids"
        elif self.width is not None and vectors.shape[1] != self.width:
            problem = f"its vectors are {vectors.shape[1]} wide where this store's are {self.width}"
        elif (invalid := self._invalid_rows(vectors)).any():
            problem = f"{int(invalid.sum())} of its {len(ids)} vectors hold NaN or infinity"
        if problem:
            raise StoredFileError(part, problem)
        return ids, vectors

    def _invalid_rows(self, vectors: np.ndarray) -> np.ndarray:
        """Per row: whether it holds a value no part may hold (NaN, +inf, and -inf unless it is a value here)."""
        bad = np.isnan(vectors) | (vectors == np.inf)
        return (bad if self.minus_inf else bad | (vectors == -np.inf)).any(axis=1)

    def __len__(self) -> int:
        return len(self._vectors)

    def missing(self, ids: Sequence[str]) -> list[int]:
        """Positions in ``ids`` with no stored vector."""
        return [i for i, item_id in enumerate(ids) if item_id not in self._vectors]

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Persist one part (atomically) and keep it in memory.  Rows holding NaN or infinity (a model's
        overflow) are kept in memory only: read back, a part holding them would be set aside."""
        if len(ids) == 0:
            return
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.width is not None and vectors.shape[1:] != (self.width,):
            raise ValueError(f"vectors of shape {vectors.shape} for a store of width {self.width}")
        self._vectors.update(zip(ids, vectors, strict=True))
        keep = ~self._invalid_rows(vectors)
        if not keep.all():
            warn(f"{int((~keep).sum())} of {len(ids)} results hold NaN or infinity: not stored in {self.folder}, "
                 "so they are computed again next time")
            ids, vectors = [item for item, kept in zip(ids, keep, strict=True) if kept], vectors[keep]
            if not len(ids):
                return
        part_number = len(list(self.folder.glob("part-*.npz*")))  # set-aside parts count too: no name is reused
        buffer = io.BytesIO()
        np.savez(buffer, ids=np.asarray(list(ids), dtype=str), vectors=vectors)
        name = f"part-{part_number:06d}-{os.getpid()}.npz"
        atomic_write_bytes(self.folder / name, buffer.getvalue())
        self._parts_seen.add(name)

    def get(self, ids: Sequence[str]) -> np.ndarray:
        """Stacked vectors for ``ids`` (all must be present)."""
        return np.stack([self._vectors[item_id] for item_id in ids]) if len(ids) else np.zeros((0, 0), np.float32)

    @contextmanager
    def locked(self) -> Iterator[EmbeddingStore]:
        """Hold the store's lock (waiting for another process's encoding), then refresh."""
        with folder_lock(self.folder, wait_message=f"waiting for another run encoding into {self.folder}"):
            self.refresh()
            yield self


def flush_seconds() -> float:
    """Seconds between part writes while items are pending: ``$DEER_STORE_FLUSH_SECONDS`` or 60."""
    value = os.environ.get(FLUSH_SECONDS_ENV, "").strip()
    try:
        return float(value) if value else 60.0
    except ValueError:
        raise ValueError(f"{FLUSH_SECONDS_ENV}={value!r} is not a number of seconds") from None


class PendingParts:
    """Finished items on their way into a store: a part is written when ``count`` are pending or
    ``seconds`` (default :func:`flush_seconds`) have passed since the last write.  As a context
    manager it writes what is pending on exit, also when the block raises (Ctrl-C included).
    """

    def __init__(self, store: EmbeddingStore, count: int = FLUSH_COUNT, seconds: float | None = None, clock=time.monotonic):
        self.store = store
        self.count = count
        self.seconds = flush_seconds() if seconds is None else seconds
        self.clock = clock
        self._ids: list[str] = []
        self._vectors: list[np.ndarray] = []
        self._last_write = clock()

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        self._ids.extend(ids)
        self._vectors.append(np.asarray(vectors, dtype=np.float32))
        if len(self._ids) >= self.count or self.clock() - self._last_write >= self.seconds:
            self.flush()

    def flush(self) -> None:
        """Write what is pending as one part (nothing if nothing is)."""
        if self._ids:
            self.store.add(self._ids, np.concatenate(self._vectors))
        self._ids, self._vectors = [], []
        self._last_write = self.clock()

    def __enter__(self) -> PendingParts:
        return self

    def __exit__(self, *exc_info) -> None:
        self.flush()
