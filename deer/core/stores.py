"""Append-only, resumable store of embeddings, keyed by everything that determines them.

A store is a folder named by the hash of its key (model fingerprint, template, KG
fingerprint, dtype, ...); ``key.json`` inside repeats the key and is checked on open, so a
store is never used for a different configuration.  Vectors arrive in parts (one ``.npz`` per
encoded chunk, written to a temp file and renamed), so an interrupted run keeps every finished
part and resumes with the rest.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from deer.core.files import atomic_write_bytes


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
        if key_file.exists():
            stored = json.loads(key_file.read_text())
            if stored != json.loads(json.dumps(self.key)):
                raise CacheKeyMismatch(f"{key_file} holds a different key; refusing to reuse {self.folder}")
        else:
            atomic_write_bytes(key_file, json.dumps(self.key, indent=2, sort_keys=True).encode())
        self._vectors: dict[str, np.ndarray] = {}
        self._load_parts()

    def _load_parts(self) -> None:
        for part in sorted(self.folder.glob("part-*.npz")):
            with np.load(part, allow_pickle=False) as data:
                ids, vectors = data["ids"], data["vectors"]
            if len(ids) != len(vectors):
                raise CacheKeyMismatch(f"{part} is inconsistent ({len(ids)} ids, {len(vectors)} vectors)")
            for item_id, vector in zip(ids.tolist(), vectors, strict=True):
                self._vectors[item_id] = vector

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
        atomic_write_bytes(self.folder / f"part-{part_number:06d}-{os.getpid()}.npz", buffer.getvalue())
        for item_id, vector in zip(ids, vectors, strict=True):
            self._vectors[item_id] = vector

    def get(self, ids: Sequence[str]) -> np.ndarray:
        """Stacked vectors for ``ids`` (all must be present)."""
        return np.stack([self._vectors[item_id] for item_id in ids]) if len(ids) else np.zeros((0, 0), np.float32)
