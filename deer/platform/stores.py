"""The append-only, resumable store of vectors (embeddings, score rows), keyed by everything that determines them.

A store is a folder named by the hash of its key (``key.json``).  Each ``add`` writes one shard: float32 rows, a
stamp (the key's and the ids' digests: a shard copied in from elsewhere is refused) and, last, the index (per row
the id's digest and ``row_checksums``), each atomically.  A shard that fails a check when opened or read is named
in a warning and set aside (``<file>.bad``), its items missing again (``StoreDamaged``) for the caller to compute.
A store that cannot be written (no space, no permission, a read-only disk) is named in a warning and the run goes on
without storing (as ``--no-cache`` would): what it adds is held in memory (``unwritable`` says why).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from deer.base.files import WriteError, atomic_write_bytes, atomic_write_with, folder_lock
from deer.platform.read_back import StoredFileError, read_json_object, set_aside
from deer.platform.validate import warn

KEY_DTYPE = np.dtype("S16")
INDEX_DTYPE = np.dtype([("key", KEY_DTYPE), ("checksum", "<u8")])
VECTORS, INDEX, STAMP = ".vectors.npy", ".index.npy", ".stamp.json"
FLUSH_COUNT = 2048  # rows pending before a shard is written (more for narrow rows: FLUSH_BYTES)
FLUSH_BYTES = 1 << 28
FLUSH_SECONDS_ENV = "DEER_STORE_FLUSH_SECONDS"
READ_ATTEMPTS = 2  # a damaged shard is computed again and read again this many times before the error stands
# A write failing with one of these: the store cannot be written now, and the run goes on without it (another is raised)
UNWRITABLE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS})


class CacheKeyMismatch(RuntimeError):
    """A cache folder's key.json does not match the key it was opened with."""


class StoreDamaged(RuntimeError):
    """Stored rows failed their checks when read; the shard was set aside and its items are missing again."""


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def item_keys(ids) -> np.ndarray:
    """(n,) 16-byte digests of item ids (strings); an array of digests as it is."""
    if isinstance(ids, np.ndarray) and ids.dtype == KEY_DTYPE:
        return ids
    return np.array([hashlib.blake2b(str(i).encode("utf-8", "surrogatepass"), digest_size=16).digest() for i in ids],
                    dtype=KEY_DTYPE)


def row_checksums(vectors: np.ndarray) -> np.ndarray:
    """Per row, the sum of its 32-bit words (uint64, exact: no wrap below 2**32 words a row).

    It changes, so a read-back row is refused, where one word of the row changed, or several whose changes do not
    cancel out (a row zeroed, cut short, or another row's read in its place, unless the two sums are equal).  It
    does not see words moved within a row (two values swapped, a row reversed: the same words, the same sum) nor
    changes that cancel out (one word up by k, another down by k): such a row reads back as good.  The index
    stores this sum; a stronger checksum would be a new index format."""
    return np.ascontiguousarray(vectors).view(np.uint32).sum(axis=1, dtype=np.uint64)


class EmbeddingStore:
    """Vectors for item ids under one key, ``width`` wide (None: unchecked); ``minus_inf``: -inf is a value, not damage."""

    def __init__(self, root: Path, kind: str, key: dict, width: int | None = None, minus_inf: bool = False):
        self.key = {"kind": kind, **key}
        self.width, self.minus_inf = width, minus_inf
        self.folder = Path(root) / kind / key_digest(self.key)
        self.unwritable: str | None = None  # why nothing is stored now (a write failed: ``UNWRITABLE``)
        self._unstored: dict[bytes, np.ndarray] = {}  # rows held in memory, never written: NaN or infinity, or unwritable
        key_file = self.folder / "key.json"
        stored = None
        if key_file.exists():
            try:
                stored = read_json_object(key_file)
            except StoredFileError as error:  # the folder is named by the key's digest: it can be written again
                set_aside(error, "written again")
        if stored is None:
            try:  # the atomic writer makes the folder, and names the file where it cannot
                atomic_write_bytes(key_file, json.dumps(self.key, indent=2, sort_keys=True).encode(), "the store's key")
            except WriteError as error:
                self._stop_storing(error)
        elif stored != json.loads(json.dumps(self.key)):
            raise CacheKeyMismatch(f"{key_file}: holds another key than the one its folder is named for (copied in, or "
                                   f"edited), so it is refused on every run until the folder goes: remove the folder "
                                   f"{self.folder} (what it holds is computed again), or run without the cache")
        self._shards: list[str] = []  # shard names, by number
        self._entries: dict[int, np.ndarray] = {}  # each usable shard's index entries
        self._maps: dict[int, np.ndarray] = {}  # each usable shard's vectors, memory-mapped
        self._stale = True  # the sorted _keys, their (shard number, row) _where and _checksums: made from _entries
        self.refresh()

    def _stop_storing(self, error: OSError) -> None:
        """After a write failing for want of space or permission (``UNWRITABLE``; another error is raised): say so once,
        and hold what is added from now on in memory (read back by this process, computed again by the next)."""
        if error.errno not in UNWRITABLE:
            raise error
        if self.unwritable is None:
            self.unwritable = str(error)
            warn(f"{error}; the run goes on without storing in {self.folder} (as --no-cache would): what it computes is "
                 "held in memory and computed again next time")

    def refresh(self) -> None:
        """Index the shards written since this one looked (by another process); one failing its checks is set aside."""
        seen = set(self._shards)
        for index_file in sorted(self.folder.glob(f"shard-*{INDEX}")):
            name = index_file.name[: -len(INDEX)]
            if name in seen:
                continue
            try:
                entries, vectors = self._read_shard_index(name)
            except StoredFileError as error:
                self._set_aside(name, error)
                continue
            self._shards.append(name)
            number = len(self._shards) - 1
            self._entries[number], self._maps[number], self._stale = entries, vectors, True

    def _read_shard_index(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        index_path, vectors_path = self.folder / f"{name}{INDEX}", self.folder / f"{name}{VECTORS}"
        entries = _load_npy(index_path)
        if entries.dtype != INDEX_DTYPE or entries.ndim != 1:
            raise StoredFileError(index_path, f"holds {entries.dtype} of shape {entries.shape}, not a shard index")
        if len(np.unique(entries["key"])) != len(entries):
            raise StoredFileError(index_path, "some of its ids repeat")
        vectors = _load_npy(vectors_path, mmap=True)
        if vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != len(entries):
            raise StoredFileError(vectors_path, f"holds {vectors.dtype} of shape {vectors.shape}, not float32 rows "
                                                f"for its {len(entries)} ids")
        if self.width is not None and vectors.shape[1] != self.width:
            raise StoredFileError(vectors_path, f"its vectors are {vectors.shape[1]} wide where this store's are {self.width}")
        stamp_path = self.folder / f"{name}{STAMP}"
        if not stamp_path.exists():
            raise StoredFileError(index_path, f"has no {stamp_path.name}: not written by this store (copied in, or older)")
        if read_json_object(stamp_path) != self._stamp(entries["key"]):
            raise StoredFileError(stamp_path, "names another store or other ids: the shard was not written by this store")
        return entries, vectors

    def _stamp(self, keys: np.ndarray) -> dict:
        return {"store": key_digest(self.key), "ids": hashlib.blake2b(np.ascontiguousarray(keys).tobytes()).hexdigest()}

    def _index(self) -> None:
        if not self._stale:
            return
        shards = sorted(self._entries.items())
        entries = np.concatenate([np.zeros(0, INDEX_DTYPE), *(e for _, e in shards)])
        where = np.concatenate([np.zeros((0, 2), np.int64),
                                *(np.stack([np.full(len(e), n), np.arange(len(e))], 1) for n, e in shards)])
        keys, first = np.unique(entries["key"], return_index=True)  # an item stored twice (two runs): its first copy
        self._keys, self._where, self._checksums, self._stale = keys, where[first], entries["checksum"][first], False

    def _set_aside(self, name: str, error: StoredFileError) -> None:
        set_aside(error, "its items are computed again")
        for suffix in (INDEX, VECTORS, STAMP):
            path = self.folder / f"{name}{suffix}"
            if path != error.path and path.exists():
                with contextlib.suppress(OSError):  # a store that cannot be written: the shard is not used all the same
                    os.replace(path, path.with_name(path.name + ".bad"))
        if name in self._shards:  # its items may still be in another shard
            number = self._shards.index(name)
            self._entries.pop(number, None)
            self._maps.pop(number, None)
            self._stale = True

    def __len__(self) -> int:
        self._index()
        return len(self._keys)

    def _positions(self, keys: np.ndarray) -> np.ndarray:
        self._index()
        positions = np.searchsorted(self._keys, keys)
        found = positions < len(self._keys)
        found[found] = self._keys[positions[found]] == keys[found]
        return np.where(found, positions, -1)

    def missing(self, ids) -> list[int]:
        """Positions in ``ids`` with no stored vector (nor one this process holds unstored)."""
        keys = item_keys(ids)
        absent = np.flatnonzero(self._positions(keys) < 0)
        return [int(i) for i in absent if keys[i] not in self._unstored]

    def get(self, ids) -> np.ndarray:
        """float32 (len(ids), width) vectors for stored ``ids``, each row checked as read (StoreDamaged if a shard fails)."""
        keys = item_keys(ids)
        positions = self._positions(keys)
        held = np.flatnonzero(positions < 0)
        if any(keys[i] not in self._unstored for i in held):
            raise KeyError(f"{len(self.missing(keys))} of {len(positions)} items are not in {self.folder}")
        if not len(positions):
            return np.zeros((0, self.width or 0), np.float32)
        width = self.width
        if width is None:  # that of the first row asked for (stored or held unstored)
            width = len(self._unstored[keys[0]]) if positions[0] < 0 else self._maps[int(self._where[positions[0], 0])].shape[1]
        out = np.empty((len(positions), width), np.float32)
        for i in held:
            out[i] = self._unstored[keys[i]]
        stored = np.flatnonzero(positions >= 0)
        shards = self._where[positions[stored], 0]
        for shard in np.unique(shards):
            here = stored[shards == shard]
            order = here[np.argsort(self._where[positions[here], 1])]  # ascending rows: the file is read front to back
            out[order] = self._checked_rows(int(shard), self._where[positions[order], 1], self._checksums[positions[order]])
        return out

    def blocks(self, ids, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every item of ``ids`` once, as ``(its positions in ids, ascending; their vectors)``, at most ``size`` rows
        a block, read in the order the rows lie on disk (each shard front to back, once), checked as read."""
        keys = item_keys(ids)
        positions = self._positions(keys)
        held = np.flatnonzero(positions < 0)
        if len(held):  # rows this process holds unstored (NaN), or missing: ``get`` says which
            yield held, self.get(keys[held])
        stored = np.flatnonzero(positions >= 0)
        shards, rows = self._where[positions[stored], 0], self._where[positions[stored], 1]
        by_place = np.lexsort((rows, shards))  # by shard, then row
        order, ordered_shards = stored[by_place], shards[by_place]
        for shard in np.unique(ordered_shards):  # unique sorts: the shards in the order written
            members = order[ordered_shards == shard]
            for start in range(0, len(members), size):
                piece = members[start:start + size]
                vectors = self._checked_rows(int(shard), self._where[positions[piece], 1], self._checksums[positions[piece]])
                if (piece[1:] < piece[:-1]).any():  # rows on disk out of the asked order (else as read: no copy)
                    by_position = np.argsort(piece, kind="stable")
                    piece, vectors = piece[by_position], vectors[by_position]
                yield piece, vectors

    def _read_rows(self, shard: int, rows: np.ndarray) -> np.ndarray | None:
        """Rows (ascending) of a shard, read from its file: through the memory map the RSS would grow with the store."""
        stored = self._maps[shard]  # the header only: shape and where the rows begin
        width, first, last = stored.shape[1], int(rows[0]), int(rows[-1]) + 1
        row_bytes = width * 4
        dense = last - first <= 2 * len(rows)
        with open(self.folder / f"{self._shards[shard]}{VECTORS}", "rb") as handle:
            if dense:
                handle.seek(stored.offset + first * row_bytes)
                data = bytearray((last - first) * row_bytes)  # read into, not copied from bytes: a writable array
                if handle.readinto(data) != len(data):
                    return None  # the file is shorter than its header says
            else:
                data = bytearray(b"".join(os.pread(handle.fileno(), row_bytes, stored.offset + int(row) * row_bytes) for row in rows))
                if len(data) != len(rows) * row_bytes:
                    return None
        read = np.frombuffer(data, dtype=np.float32).reshape(-1, width)
        if dense and not (len(rows) == last - first and (np.diff(rows) == 1).all()):  # a whole run of rows: as read
            read = read[rows - first]  # (a gap and a repeated row can leave the count equal: each row is checked)
        return read

    def _checked_rows(self, shard: int, rows: np.ndarray, checksums: np.ndarray) -> np.ndarray:
        try:
            vectors = self._read_rows(shard, rows)
        except FileNotFoundError:  # gone since this one indexed it (set aside by another process?): its items are missing
            vectors, problem = None, "it is gone since this store was opened"
        else:
            problem = self._damage(vectors, checksums)
        if problem:
            name = self._shards[shard]
            self._set_aside(name, StoredFileError(self.folder / f"{name}{VECTORS}", problem))
            raise StoreDamaged(f"{self.folder / name}{VECTORS}: {problem}")
        return vectors

    def _damage(self, vectors: np.ndarray | None, checksums: np.ndarray) -> str | None:
        if vectors is None:
            return "it is shorter than its header says"
        if (changed := int((row_checksums(vectors) != checksums).sum())):
            return f"{changed} of the rows read differ from what was written"
        if (invalid := int(self._invalid_rows(vectors).sum())):
            return f"{invalid} of the rows read hold NaN or infinity"
        return None

    def _invalid_rows(self, vectors: np.ndarray) -> np.ndarray:
        """Per row: whether it holds a value no shard may hold (NaN, +inf, and -inf unless it is a value here)."""
        invalid = ~np.isfinite(vectors.sum(axis=1))  # a NaN or infinity makes the row's sum one: the exact
        suspects = vectors[invalid]  # test reads those rows only (and clears a sum that merely overflowed)
        bad = np.isnan(suspects) | (suspects == np.inf)
        invalid[invalid] = (bad if self.minus_inf else bad | (suspects == -np.inf)).any(axis=1)
        return invalid

    def add(self, ids, vectors: np.ndarray) -> None:
        """Write one shard.  Rows holding NaN or infinity (a model's overflow) are not stored, with a warning."""
        keys = item_keys(ids)
        if len(keys) == 0:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.width is not None and vectors.shape[1:] != (self.width,):
            raise ValueError(f"vectors of shape {vectors.shape} for a store of width {self.width}")
        keep = ~self._invalid_rows(vectors)
        if not keep.all():
            warn(f"{int((~keep).sum())} of {len(keys)} results hold NaN or infinity: not stored in {self.folder}, "
                 "so they are computed again next time")
            self._unstored.update(zip(keys[~keep].tolist(), vectors[~keep], strict=True))
            keys, vectors = keys[keep], vectors[keep]
        first = np.sort(np.unique(keys, return_index=True)[1])  # an id given twice: its first row, in the order given
        if len(first) < len(keys):  # (a copy only then: a shard's rows can be hundreds of MB)
            keys, vectors = keys[first], vectors[first]
        if not len(keys):
            return
        if self.unwritable is None:
            try:
                self._write_shard(keys, vectors)
                return
            except WriteError as error:
                self._stop_storing(error)
        self._unstored.update(zip(keys.tolist(), vectors, strict=True))

    def _write_shard(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Write ``vectors`` as one shard (its index last: a shard without one is never read); a failed write removes
        what it wrote and raises (``WriteError``, naming the file)."""
        number = len(list(self.folder.glob(f"shard-*{INDEX}*")))  # set-aside shards count too: no name is reused
        name = f"shard-{number:06d}-{os.getpid()}-{os.urandom(3).hex()}"
        entries = np.empty(len(keys), INDEX_DTYPE)
        entries["key"], entries["checksum"] = keys, row_checksums(vectors)
        try:
            atomic_write_with(self.folder / f"{name}{VECTORS}", lambda handle: np.save(handle, vectors), "a shard's vectors")
            atomic_write_bytes(self.folder / f"{name}{STAMP}", json.dumps(self._stamp(keys)).encode(), "a shard's stamp")
            atomic_write_with(self.folder / f"{name}{INDEX}", lambda handle: np.save(handle, entries), "a shard's index")
        except BaseException:
            for suffix in (VECTORS, STAMP):
                with contextlib.suppress(OSError):
                    (self.folder / f"{name}{suffix}").unlink(missing_ok=True)
            raise
        self.refresh()  # indexed lazily: many adds in a row cost one sort, at the next lookup

    @contextmanager
    def locked(self) -> Iterator[EmbeddingStore]:
        """Hold the store's lock (waiting for another process's encoding), then refresh; a lock that cannot be made
        (``UNWRITABLE``) is a store that cannot be written: the block runs unlocked, storing nothing."""
        with contextlib.ExitStack() as stack:
            if self.unwritable is None:
                try:
                    stack.enter_context(folder_lock(self.folder, wait_message=f"waiting for another run encoding into {self.folder}"))
                except OSError as error:
                    self._stop_storing(error)
            self.refresh()
            yield self


def _load_npy(path: Path, mmap: bool = False) -> np.ndarray:
    """An ``.npy`` array (memory-mapped with ``mmap``), never unpickled; StoredFileError naming the file otherwise."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise StoredFileError(path, "missing (its shard is incomplete)") from None
    except Exception as error:  # whatever a damaged file raises (ValueError, EOFError, OSError, ...)
        if isinstance(error, ValueError) and "allow_pickle" in str(error):
            raise StoredFileError(path, "holds pickled Python objects, which are never loaded") from None
        text = " ".join(str(error).split())[:200]
        raise StoredFileError(path, f"not a readable .npy array ({type(error).__name__}: {text})") from None


def flush_seconds() -> float:
    """Seconds between part writes while items are pending: ``$DEER_STORE_FLUSH_SECONDS`` or 60."""
    value = os.environ.get(FLUSH_SECONDS_ENV, "").strip()
    try:
        return float(value) if value else 60.0
    except ValueError:
        raise ValueError(f"{FLUSH_SECONDS_ENV}={value!r} is not a number of seconds") from None


class PendingParts:
    """Finished items on their way into a store: a part is written when ``count`` are pending or ``seconds`` have
    passed since the last write, and on exit from the context, also when the block raises (Ctrl-C included).
    ``behind=True``: a part is written on a thread while the caller makes the next; its error is raised at the
    next ``add``, ``flush`` or exit, and the store must not be read until then."""

    def __init__(self, store: EmbeddingStore, count: int | None = None, seconds: float | None = None, clock=time.monotonic,
                 behind: bool = False):
        self.store = store
        self.count = count if count is not None else max(FLUSH_COUNT, FLUSH_BYTES // (4 * (store.width or 1)))
        self.seconds = flush_seconds() if seconds is None else seconds
        self.clock = clock
        self._keys: list[np.ndarray] = []
        self._vectors: list[np.ndarray] = []
        self._pending = 0
        self._last_write = clock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer") if behind else None
        self._writing: Future | None = None

    def __len__(self) -> int:
        return self._pending

    def add(self, ids, vectors: np.ndarray) -> None:
        """Queue rows for ``ids`` (strings or ``item_keys``)."""
        self._keys.append(item_keys(ids))
        self._vectors.append(np.asarray(vectors, dtype=np.float32))
        self._pending += len(self._keys[-1])
        if self._pending >= self.count or self.clock() - self._last_write >= self.seconds:
            self._write(wait=self._writer is None)

    def flush(self) -> None:
        """Write what is pending as one shard, and wait for it."""
        self._write(wait=True)

    def _write(self, wait: bool) -> None:
        if self._writing is not None:  # one part written at a time, in order
            writing, self._writing = self._writing, None
            writing.result()  # its error, raised here
        if self._pending:
            keys, vectors = np.concatenate(self._keys), np.concatenate(self._vectors)
            if wait:
                self.store.add(keys, vectors)
            else:
                self._writing = self._writer.submit(self.store.add, keys, vectors)
        self._keys, self._vectors, self._pending = [], [], 0
        self._last_write = self.clock()

    def __enter__(self) -> PendingParts:
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
