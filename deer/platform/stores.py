"""Append-only, resumable store of embeddings, keyed by everything that determines them.

A store is a folder named by the hash of its key (``key.json`` repeats it, checked on open).  Vectors
arrive in parts (one ``.npz`` each, written atomically), so an interrupted run keeps every finished
part; a process encoding a store's missing items holds its lock, so two never encode the same items.
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

FLUSH_COUNT = 2048
FLUSH_SECONDS_ENV = "DEER_STORE_FLUSH_SECONDS"


class CacheKeyMismatch(RuntimeError):
    """A cache folder's key.json does not match the key it was opened with."""


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


class EmbeddingStore:
    """Vectors for string item ids (entity ids, query keys) under one configuration key."""

    def __init__(self, root: Path, kind: str, key: dict):
        self.key = {"kind": kind, **key}
        self.folder = Path(root) / kind / key_digest(self.key)
        self.folder.mkdir(parents=True, exist_ok=True)
        key_file = self.folder / "key.json"
        if not key_file.exists():
            atomic_write_bytes(key_file, json.dumps(self.key, indent=2, sort_keys=True).encode())
        elif json.loads(key_file.read_text()) != json.loads(json.dumps(self.key)):
            raise CacheKeyMismatch(f"{key_file} holds a different key; refusing to reuse {self.folder}")
        self._vectors: dict[str, np.ndarray] = {}
        self._parts_seen: set[str] = set()
        self.refresh()

    def refresh(self) -> None:
        """Load the parts not seen yet (written by another process since this one looked)."""
        for part in sorted(self.folder.glob("part-*.npz")):
            if part.name in self._parts_seen:
                continue
            self._parts_seen.add(part.name)
            with np.load(part, allow_pickle=False) as data:
                ids, vectors = data["ids"], data["vectors"]
            if len(ids) != len(vectors):
                raise CacheKeyMismatch(f"{part} is inconsistent ({len(ids)} ids, {len(vectors)} vectors)")
            self._vectors.update(zip(ids.tolist(), vectors, strict=True))

    def __len__(self) -> int:
        return len(self._vectors)

    def missing(self, ids: Sequence[str]) -> list[int]:
        """Positions in ``ids`` with no stored vector."""
        return [i for i, item_id in enumerate(ids) if item_id not in self._vectors]

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Persist one part (atomically) and keep it in memory."""
        if len(ids) == 0:
            return
        vectors = np.asarray(vectors, dtype=np.float32)
        part_number = len(list(self.folder.glob("part-*.npz")))
        buffer = io.BytesIO()
        np.savez(buffer, ids=np.asarray(list(ids), dtype=str), vectors=vectors)
        name = f"part-{part_number:06d}-{os.getpid()}.npz"
        atomic_write_bytes(self.folder / name, buffer.getvalue())
        self._parts_seen.add(name)
        self._vectors.update(zip(ids, vectors, strict=True))

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
