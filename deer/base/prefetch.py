"""Items of an iterable made on a thread one step ahead of their use: a store's next block is read
(file reads and checksums release the GIL) while the caller's matrix product runs on this one."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable, Iterator

_DONE = object()


def read_ahead(items: Iterable, depth: int = 1) -> Iterator:
    """The items of ``items`` in order, each made on a worker thread while the previous one is used (at most
    ``depth`` waiting); the iterable's exception is raised here, and stopping early stops the worker."""
    waiting: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry) -> bool:
        while not stop.is_set():
            with contextlib.suppress(queue.Full):
                waiting.put(entry, timeout=0.1)
                return True
        return False

    def work():
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as error:  # handed to the caller, raised there
            put((None, error))
            return
        put((_DONE, None))

    worker = threading.Thread(target=work, name="read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            item, error = waiting.get()
            if error is not None:
                raise error
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()
        worker.join()
