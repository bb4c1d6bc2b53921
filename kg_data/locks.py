"""The one cross-process lock (``filelock``): fetches, model conversions, run folders and stores use it.

The holder removes the lock file while still holding it, so nothing is left behind; that is safe because
a process that then locks the old file finds it unlinked (filelock checks ``st_nlink``) and starts over.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


@contextmanager
def held_lock(path: Path, wait_message: str | None = None) -> Iterator[None]:
    """Hold an exclusive lock (flock: a killed run leaves no stale lock) on ``path`` while the block runs; while waiting
    for another process, ``wait_message`` is printed once with the holder's pid."""
    from filelock import FileLock, Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, thread_local=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if wait_message:
            holder = ""
            with suppress(OSError):
                holder = path.read_text().strip()
            print(f"{wait_message} (pid {holder or '?'})", file=sys.stderr, flush=True)
        lock.acquire()
    try:
        with suppress(OSError):  # for the next one's wait message (shown, never trusted): a full disk loses only that
            path.write_text(str(os.getpid()))
        yield
    finally:
        path.unlink(missing_ok=True)  # while held: see the module docstring
        lock.release()
