"""A Ray encoding worker that dies for real: the first batch any worker takes ends its process
(``tests/test_ray_runs.py``).  The marker file makes it once in all, across restarts and workers."""

from __future__ import annotations

import os
from pathlib import Path

from experiments.ray_runs import _EncodingWorker


class KillingWorker(_EncodingWorker):
    marker = ""  # set by the test (a path in its temporary folder)

    def encode(self, texts, keys):
        if not Path(self.marker).exists():
            Path(self.marker).touch()
            os._exit(1)  # as a killed process: no exception, no cleanup, nothing written
        return super().encode(texts, keys)
