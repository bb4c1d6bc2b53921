"""The known-true filters of many queries: one array per query (the loop before issue 31) against the two
arrays of ``kg_data.queries.FilterTails`` (built without a loop per query), on triples in Wikidata5M's
proportions (4,594,485 entities, 822 relations, 20,614,279 train triples; no texts are needed).

Prints a table (seconds to build, bytes held, whether both give the same filters) and writes JSON.

    python benchmarks/bench_filters.py [--entities 4594485] [--queries 5133,100000,1000000] [--out results/bench_filters.json]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
import numpy as np

from kg_data.queries import other_true_tails

WIKIDATA5M = {"entities": 4_594_485, "relations": 822, "train_per_entity": 20_614_279 / 4_594_485}


class TriplesOnly:
    """What the filters read of a KG: its splits and relation count."""

    def __init__(self, n_entities: int, seed: int):
        rng = np.random.default_rng(seed)
        n_train = int(n_entities * WIKIDATA5M["train_per_entity"])
        heads = np.minimum((rng.pareto(1.2, n_train) * n_entities / 50).astype(np.int64), n_entities - 1)  # a heavy tail
        relations = rng.integers(0, WIKIDATA5M["relations"], n_train)
        tails = (relations * 5_591 + rng.integers(0, n_entities // 8, n_train)) % n_entities  # each relation its own range
        self.splits = {"train": np.stack([heads, relations, tails], axis=1)}
        self.n_relations, self.n_entities = WIKIDATA5M["relations"], n_entities


def filters_per_query(kg, triples: np.ndarray, position: np.ndarray) -> list[np.ndarray]:
    """The filters as built before: the same arrays, then a loop with one array per query."""
    width = max(kg.n_relations, 1)
    query_keys = triples[:, 0] * width + triples[:, 1]
    wanted = np.unique(query_keys)
    found = [s[np.isin(s[:, 0] * width + s[:, 1], wanted)] for s in kg.splits.values() if len(s)]
    known = np.concatenate(found) if found else np.zeros((0, 3), np.int64)
    known = known[np.lexsort((known[:, 2], known[:, 0] * width + known[:, 1]))]
    known_keys = known[:, 0] * width + known[:, 1]
    starts, stops = np.searchsorted(known_keys, query_keys, "left"), np.searchsorted(known_keys, query_keys, "right")
    filters = []
    for start, stop, tail in zip(starts.tolist(), stops.tolist(), triples[:, 2].tolist(), strict=True):
        others = position[np.unique(known[start:stop, 2])]
        filters.append(np.sort(others[(others >= 0) & (others != position[tail])]).astype(np.int64))
    return filters


def held_bytes(filters) -> int:
    if isinstance(filters, list):
        return sys.getsizeof(filters) + sum(sys.getsizeof(f) for f in filters)  # an ndarray's size includes its data
    return filters.offsets.nbytes + filters.positions.nbytes


@click.command()
@click.option("--entities", type=int, default=WIKIDATA5M["entities"], show_default=True)
@click.option("--queries", "query_counts", default="5133,100000,1000000", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default="results/bench_filters.json", show_default=True)
def main(entities, query_counts, seed, out):
    started = time.perf_counter()
    kg = TriplesOnly(entities, seed)
    print(f"{len(kg.splits['train']):,} train triples over {entities:,} entities made in {time.perf_counter() - started:.1f}s")
    position = np.arange(entities, dtype=np.int64)  # every entity a candidate
    rows = []
    for n in (int(x) for x in query_counts.split(",")):
        triples = kg.splits["train"][np.random.default_rng(seed + n).choice(len(kg.splits["train"]), n, replace=False)]
        timings = {}
        for name, build in (("per query", filters_per_query), ("two arrays", other_true_tails)):
            began = time.perf_counter()
            timings[name] = (build(kg, triples, position), time.perf_counter() - began)
        (loop, loop_seconds), (arrays, array_seconds) = timings["per query"], timings["two arrays"]
        rows.append({"queries": n, "known_true_tails": int(len(arrays.positions)), "per_query_seconds": round(loop_seconds, 3),
                     "two_arrays_seconds": round(array_seconds, 3), "speedup": round(loop_seconds / array_seconds, 2),
                     "per_query_bytes": held_bytes(loop), "two_arrays_bytes": held_bytes(arrays), "same_filters": arrays == loop})
    print(f"{'queries':>9} {'tails':>10} {'loop s':>8} {'arrays s':>9} {'x':>6} {'loop MB':>9} {'arrays MB':>10} same")
    for r in rows:
        print(f"{r['queries']:>9,} {r['known_true_tails']:>10,} {r['per_query_seconds']:>8.2f} {r['two_arrays_seconds']:>9.2f} "
              f"{r['speedup']:>6.1f} {r['per_query_bytes'] / 1e6:>9.1f} {r['two_arrays_bytes'] / 1e6:>10.1f} {r['same_filters']}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({"benchmark": "known-true filters", "entities": entities, "seed": seed,
                                     "train_triples": int(len(kg.splits["train"])), "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
