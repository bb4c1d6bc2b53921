"""Benchmark (issue 21): where FAISS earns its place in the cosine ranking, on the CPU.

Exact ranks need every score of a query's row, so the ranking makes each (queries x entities)
chunk of cosines once and takes the ranks and the top 10 from it (``deer.platform.cosine_ranking.rank_cosine``).
The path before issue 21 made the matrix twice: numpy chunks for the ranks, then a FAISS
``IndexFlatIP`` search over all queries for the top 10.  This times, in one run and interleaved:

- ``rank_cosine``: the one-chunk kernel (ranks + top 10 + head flags);
- ``matmul only``: the chunk products alone (the floor any exact-rank method pays);
- ``faiss top-10``: FAISS's exact search alone (what the old path paid on top of its matrix).

Random unit vectors of the model's width (SmolLM2: 576) against WN18RR's 40,943 entities.

    python benchmarks/bench_ranking.py --queries 1000 --entities 40943 --dim 576 --rounds 3
"""

from __future__ import annotations

import os
import statistics
import time

import click
import numpy as np
import torch
from faiss_peer import import_faiss

from deer.base.files import package_versions, write_json
from deer.base.vectors import normalize_rows
from deer.platform.cosine_ranking import rank_cosine


class _NoFilters:
    def __init__(self, n: int, n_entities: int, seed: int):
        self.gold = np.random.default_rng(seed).integers(0, n_entities, n)
        self.filter_tails = np.array([np.zeros(0, dtype=np.int64)] * n, dtype=object)

    def excluded_positions(self):
        return np.full(len(self.gold), -1)

    head_positions = excluded_positions


@click.command()
@click.option("--queries", "n_queries", default=1000, show_default=True)
@click.option("--entities", "n_entities", default=40943, show_default=True)
@click.option("--dim", default=576, show_default=True)
@click.option("--rounds", default=3, show_default=True, help="Interleaved rounds; the median is reported.")
@click.option("--out", "out_path", default="results/bench_ranking.json", show_default=True)
def main(n_queries, n_entities, dim, rounds, out_path):
    faiss = import_faiss()

    load_at_start = os.getloadavg()
    rng = np.random.default_rng(0)
    query_vectors = rng.normal(size=(n_queries, dim)).astype(np.float32)
    entity_vectors = rng.normal(size=(n_entities, dim)).astype(np.float32)
    queries = _NoFilters(n_queries, n_entities, 1)
    chunk = max(1, (1 << 28) // (4 * n_entities))

    def matmul_only():
        q, e = torch.from_numpy(normalize_rows(query_vectors)), torch.from_numpy(normalize_rows(entity_vectors))
        for start in range(0, n_queries, chunk):
            q[start:start + chunk] @ e.T

    def faiss_top10():
        index = faiss.IndexFlatIP(dim)
        index.add(normalize_rows(entity_vectors))
        index.search(normalize_rows(query_vectors), 10)

    methods = {"rank_cosine": lambda: rank_cosine(query_vectors, entity_vectors, queries, k=10),
               "matmul only": matmul_only, "faiss top-10": faiss_top10}
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(rounds):
        for name, method in methods.items():
            started = time.perf_counter()
            method()
            seconds[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    click.echo(f"{n_queries} queries x {n_entities} entities x {dim} dims, torch threads {torch.get_num_threads()}, "
               f"faiss threads {faiss.omp_get_max_threads()}, {rounds} rounds, load average at start {load_at_start[0]:.2f}")
    click.echo(f"{'method':<14}{'median s':>10}{'x matmul':>10}   rounds")
    for name, median in medians.items():
        click.echo(f"{name:<14}{median:>10.3f}{median / medians['matmul only']:>10.2f}   " + " ".join(f"{v:.3f}" for v in seconds[name]))
    old_path = medians["matmul only"] + medians["faiss top-10"]
    click.echo(f"before issue 21 (matrix twice: ranks + FAISS top-10) >= {old_path:.3f} s; one chunk: {medians['rank_cosine']:.3f} s")
    write_json(out_path, {"n_queries": n_queries, "n_entities": n_entities, "dim": dim, "rounds": rounds,
                          "load_average_at_start": load_at_start[0], "seconds": seconds, "median_seconds": medians,
                          "old_path_lower_bound_seconds": old_path, "versions": package_versions()})


if __name__ == "__main__":
    main()
