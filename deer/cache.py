"""Append-only, resumable store of embeddings, keyed by everything that determines them.

A store is a folder named by the hash of its key (model fingerprint, template, KG
fingerprint, dtype, ...); ``key.json`` inside repeats the key and is checked on open, so a
store is never used for a different configuration.  Vectors arrive in parts (one ``.npz`` per
encoded chunk, written to a temp file and renamed), so an interrupted run keeps every finished
part and resumes with the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np


class CacheKeyMismatch(RuntimeError):
    """A cache folder's key.json does not match the key it was opened with."""


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def _umask_mode() -> int:
    """Mode a plain new file gets (mkstemp would give 0o600, unreadable to others)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, then rename: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
            for item_id, vector in zip(ids.tolist(), vectors):
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
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".part-", suffix=".npz")
        os.close(fd)
        try:
            np.savez(tmp, ids=np.asarray(list(ids), dtype=str), vectors=vectors)
            os.chmod(tmp, _umask_mode())
            os.replace(tmp, self.folder / f"part-{part_number:06d}-{os.getpid()}.npz")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        for item_id, vector in zip(ids, vectors):
            self._vectors[item_id] = vector

    def get(self, ids: Sequence[str]) -> np.ndarray:
        """Stacked vectors for ``ids`` (all must be present)."""
        return np.stack([self._vectors[item_id] for item_id in ids]) if len(ids) else np.zeros((0, 0), np.float32)
