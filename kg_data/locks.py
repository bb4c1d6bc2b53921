"""The one cross-process lock (``filelock``): fetches, model conversions, run folders and stores use it.

The lock file is removed by its holder while still holding it, so nothing is left behind, and that
is safe: a process that opened the file before and then locks it finds it unlinked (filelock
checks ``st_nlink``) and starts over on the new file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held_lock(path: Path, wait_message: str | None = None) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` while the block runs, waiting for another holder.

    The kernel's lock (flock), released however the holder exits, so a killed run never leaves a
    stale lock.  If another process holds it, ``wait_message`` (when given) is printed to stderr once
    with the holder's pid (written into the lock file while held), and the call waits.
    """
    from filelock import FileLock, Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, thread_local=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if wait_message:
            try:
                holder = path.read_text().strip()
            except OSError:
                holder = ""
            print(f"{wait_message} (pid {holder or '?'})", file=sys.stderr, flush=True)
        lock.acquire()
    try:
        path.write_text(str(os.getpid()))  # for the next one's wait message (shown, never trusted)
        yield
    finally:
        path.unlink(missing_ok=True)  # while held: see the module docstring
        lock.release()
