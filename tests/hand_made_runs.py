"""Runs made by hand (no model): a ``RunResult`` built from given ranks, as ``experiments.runs.load_run`` reads one
from its folder; the experiments' numbers are checked on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from deer.platform.result import RunResult
from deer.platform.run_spec import RunSpec


def make_run(label: str, ranks: dict[str, list[float]], queries: str = "q", metadata: dict | None = None,
             folder: Path | None = None) -> RunResult:
    """A KG run of ``label`` whose probes have these gold ranks (raw = filtered), on the query set ``queries``."""
    n = len(next(iter(ranks.values())))
    table = pd.DataFrame({"query": np.arange(n), "head_id": [f"h{i}" for i in range(n)], "relation_id": ["r"] * n,
                          "tail_id": [f"t{i}" for i in range(n)], "relation": ["r"] * n, "tail_tokens": np.ones(n, int)})
    for probe, values in ranks.items():
        table[f"{probe}_rank_raw"] = table[f"{probe}_rank_filtered"] = np.asarray(values, dtype=np.float64)
    spec = RunSpec(f"weights-{label}", "tok", "float32", "kg", "test", None, None, queries, {}, {})
    run = RunResult(table, {p: {} for p in ranks}, metadata or {p: {} for p in ranks}, spec=spec)
    run.label, run.folder = label, folder or Path(f"runs/{label}")
    return run
