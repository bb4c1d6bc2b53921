"""Benchmark (issue 30): exact ranking at scale, the streamed torch kernel against FAISS, on this machine.

DEER needs each query's exact gold rank (a count over every candidate's score) and its top k.  The
entities arrive as blocks of a sharded store; per block of candidates this times, in one run:

- ``matmul floor``: the block products alone (the least any exact-rank method pays);
- ``streamed kernel``: ``deer.platform.cosine_ranking.rank_cosine_blocks`` (ranks, ties, filters,
  head flags and the top 10 from the same products);
- ``faiss top-10``: FAISS's exact search (``IndexFlatIP`` per block, results merged), which gives the
  top k only: an exact rank would still need the products (FAISS's range search takes one radius for
  all queries, a rank needs each query's own), so a FAISS path costs this *plus* the floor.

Random unit vectors (float32), as many queries as Wikidata5M's test split; on a GPU (``--device
cuda``) the torch kernel runs there and FAISS too where ``faiss`` has GPU support.

    python benchmarks/bench_scale_ranking.py --entities 1000000 --dim 2048 --queries 5133 --block 65536
"""

from __future__ import annotations

import os
import time

import click
import numpy as np
import torch
from faiss_peer import import_faiss

from deer.base.files import package_versions, write_json
from deer.platform.cosine_ranking import rank_cosine_blocks
from deer.platform.tables import text_table


class _Queries:
    """What the kernel reads of a QuerySet: gold positions, a few filtered tails, no heads."""

    def __init__(self, n: int, n_entities: int, seed: int):
        rng = np.random.default_rng(seed)
        self.gold = rng.integers(0, n_entities, n)
        self.filter_tails = [np.sort(rng.choice(n_entities, 3, replace=False)) for _ in range(n)]
        self.filter_tails = [f[f != g] for f, g in zip(self.filter_tails, self.gold, strict=True)]

    def excluded_positions(self):
        return np.full(len(self.gold), -1)

    head_positions = excluded_positions


def _unit_rows(rng, n, dim):
    rows = rng.standard_normal((n, dim), dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@click.command()
@click.option("--entities", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--dim", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--queries", type=click.IntRange(min=1), default=5133, show_default=True)
@click.option("--block", type=click.IntRange(min=1), default=65536, show_default=True, help="Candidates per block (shard read).")
@click.option("--device", default="cpu", show_default=True)
@click.option("--out", default="results/scale/ranking.json", show_default=True)
def main(entities, dim, queries, block, device, out):
    """Time the matmul floor, the streamed kernel and FAISS's top 10 over the same blocks."""
    faiss = import_faiss()

    rng = np.random.default_rng(0)
    entity_vectors = _unit_rows(rng, entities, dim)
    query_vectors = _unit_rows(rng, queries, dim)
    problem = _Queries(queries, entities, 1)
    blocks = [(start, entity_vectors[start:start + block]) for start in range(0, entities, block)]
    flop = 2.0 * queries * entities * dim
    timings = {}

    started = time.perf_counter()
    q = torch.from_numpy(query_vectors).to(device)
    with torch.inference_mode():
        for _, vectors in blocks:
            scores = q @ torch.from_numpy(vectors).to(device).T
            del scores
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    timings["matmul floor"] = time.perf_counter() - started

    started = time.perf_counter()
    ranking = rank_cosine_blocks(query_vectors, entity_vectors[problem.gold], blocks, entities, problem, k=10,
                                 query_block=queries, device=device)  # one pass over the candidates, as rank_cosine does
    timings["streamed kernel (ranks + top 10)"] = time.perf_counter() - started

    started = time.perf_counter()
    best_values = np.full((queries, 0), -np.inf, np.float32)
    best_positions = np.zeros((queries, 0), np.int64)
    for start, vectors in blocks:
        index = faiss.IndexFlatIP(dim)
        index.add(vectors)
        values, positions = index.search(query_vectors, 10)
        best_values = np.concatenate([best_values, values], 1)
        best_positions = np.concatenate([best_positions, positions + start], 1)
        order = np.argsort(-best_values, axis=1, kind="stable")[:, :10]
        best_values, best_positions = np.take_along_axis(best_values, order, 1), np.take_along_axis(best_positions, order, 1)
    timings["faiss top-10 (IndexFlatIP per block)"] = time.perf_counter() - started
    top_agree = float(np.mean(best_positions[:, 0] == ranking.top[:, 0]))

    rows = [{"method": name, "seconds": seconds, "gflops": flop / seconds / 1e9, "vs floor": seconds / timings["matmul floor"]}
            for name, seconds in timings.items()]
    click.echo(text_table(rows, (("method", "<38"), ("seconds", ">9.1f"), ("gflops", ">8.1f", "gflops"),
                                 ("x floor", ">8.2f", "vs floor"))))
    click.echo(f"FAISS's best candidate = the kernel's for {top_agree:.1%} of queries")
    write_json(out, {"entities": entities, "dim": dim, "queries": queries, "block": block, "device": device,
                     "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "faiss_threads": faiss.omp_get_max_threads(),
                     "seconds": timings, "faiss_top1_agreement": top_agree, "versions": {**package_versions(), "faiss": faiss.__version__}})


if __name__ == "__main__":
    main()
