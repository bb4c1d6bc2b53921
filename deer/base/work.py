"""One counter for the work a forward-pass loop does (encoder, scorers), reported in metadata."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class WorkCounter:
    """Named counts (one never added reads as 0), seconds in forward passes and the attention back-end they ran
    under; ``as_dict()`` is what metadata records."""

    def __init__(self, *names: str) -> None:
        self._counts: dict[str, int] = dict.fromkeys(names, 0)  # listed in as_dict() even while 0, in this order
        self.forward_seconds = 0.0
        self.attention = ""

    def add(self, **counts: int) -> None:
        for name, value in counts.items():
            self._counts[name] = self._counts.get(name, 0) + int(value)

    @contextmanager
    def forward(self) -> Iterator[None]:
        """Time the enclosed forward pass(es) into ``forward_seconds``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.forward_seconds += time.perf_counter() - started

    def __getattr__(self, name: str) -> int:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._counts.get(name, 0)

    def as_dict(self) -> dict:
        work: dict = {**self._counts, "forward_seconds": self.forward_seconds}
        if self.attention:
            work["attention"] = self.attention
        return work


def summed_work(works) -> dict:
    """Several ``as_dict()`` records added up, key by key (nested too; a text kept from the first that has it)."""
    total: dict = {}
    for work in works:
        for name, value in work.items():
            if isinstance(value, dict):
                total[name] = summed_work([total.get(name, {}), value])
            elif isinstance(value, (int, float)):
                total[name] = total.get(name, 0) + value
            else:
                total.setdefault(name, value)
    return total
