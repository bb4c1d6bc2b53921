"""DEER's streaming path on a 20,000-entity synthetic KG in Wikidata5M's shape: vectors written in many
shards, ranked block by block, give exactly the ranks of the in-memory reference (every cosine of the
whole matrix, ranked by the one kernel), for several shard and block sizes.  The vectors come from the
benchmark's hash backend (registered through the backend seam) so that the model is not the cost.
Also: `deer probe --kg` on a folder in Wikidata5M's published layout runs end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def synthetic_queries(tmp_path_factory):
    sys.path.insert(0, str(BENCHMARKS))
    from synthetic_kg import write_synthetic_kg

    from deer.backends import register_backend
    from kg_data.load import load_kg
    from kg_data.queries import build_queries

    register_backend("hash", "hash_backend:HashBackend")
    folder = tmp_path_factory.mktemp("kg20k") / "kg"
    write_synthetic_kg(folder, 20_000, seed=7)
    return build_queries(load_kg(folder), "test", exclude_head=True)


def _reference(result, queries):
    """Every cosine of the whole matrix, ranked by ``rank_chunk``."""
    from deer.platform.ranking import rank_chunk

    q = torch.nn.functional.normalize(torch.from_numpy(np.asarray(result.arrays["query_embeddings"])), dim=1)
    e = torch.nn.functional.normalize(torch.from_numpy(np.asarray(result.arrays["entity_embeddings"])), dim=1)
    as_tensor = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.int64)  # noqa: E731
    ranks, top, _ = rank_chunk(q @ e.T, as_tensor(queries.gold), queries.filter_tails, as_tensor(queries.excluded_positions()),
                               as_tensor(queries.head_positions()), 10)
    return ranks, top


@pytest.mark.parametrize("shard_rows, score_bytes", [(1_000, 1 << 22), (7_777, 1 << 26), (50_000, 1 << 28)])
def test_sharded_streamed_ranks_equal_the_in_memory_reference(synthetic_queries, tiny_clm, tmp_path, monkeypatch,
                                                             shard_rows, score_bytes):
    import deer.platform.cosine_ranking as cosine_ranking
    import deer.platform.stores as stores
    from deer.runner import run_probe

    monkeypatch.setattr(stores, "FLUSH_COUNT", shard_rows)
    monkeypatch.setattr(stores, "FLUSH_BYTES", shard_rows * 4 * 2048)
    monkeypatch.setattr(cosine_ranking, "SCORE_BYTES_PER_CHUNK", score_bytes)
    queries = synthetic_queries
    result = run_probe("deer", queries, tiny_clm, backend="hash", cache=True, cache_dir=tmp_path, show_progress=False, k_shot=2)
    shards = list(tmp_path.rglob("shard-*.index.npy"))
    assert len(shards) >= (3 if shard_rows < 20_000 else 2)  # entities over several shards (a batch of 4,096 at least each)
    ranks, top = _reference(result, queries)
    table = result.table
    assert np.array_equal(table["deer_rank_raw"].to_numpy(), ranks.raw)
    assert np.array_equal(table["deer_rank_filtered"].to_numpy(), ranks.filtered)
    names = queries.kg.entity_names
    assert table["deer_top10"].tolist() == [" | ".join(names[queries.candidates[c]] for c in row) for row in top]


def test_a_wikidata5m_folder_runs_end_to_end(tmp_path, tiny_clm_dir):
    from experiments.cli import main
    from tests.kg_folders import write_wikidata5m

    folder = write_wikidata5m(tmp_path / "w5m")
    result = CliRunner().invoke(main, ["probe", "--kg", str(folder), "--model", str(tiny_clm_dir), "--k-shot", "1",
                                       "--out", str(tmp_path / "out")], env={"DEER_CACHE_DIR": str(tmp_path / "cache")})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "ranks.parquet").exists() and "hit@10" in result.output.lower()


def test_the_time_left_counts_preparing_the_prompts_apart_from_encoding_them(monkeypatch):
    """A chunk is made and tokenized whole before its first batch.  Here 100,000 prompts of 10 tokens: a
    chunk of 32,768 prepared in 30 s, then 1,000 prompts encoded in 10 s.  Going on so, the rest takes
    99,000 x 10 s / 1,000 to encode plus 67,232 x 30 s / 32,768 to prepare = 1,052 s; one rate over both
    (the estimate before) said 66 min."""
    import re
    import warnings

    from deer import embedding_probe

    clock = iter([0.0, 40.0])
    monkeypatch.setattr(embedding_probe.time, "perf_counter", lambda: next(clock))
    forecast = embedding_probe.EncodingForecast(100_000, "entities", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        forecast.chunk([10] * embedding_probe.STREAM_CHUNK, preparing_seconds=30.0)
        forecast.batch_done(range(1000))
    said = [str(w.message) for w in caught if "min left" in str(w.message)]
    minutes = float(re.search(r"about ([\d.]+) min left", said[0]).group(1))
    chunk = embedding_probe.STREAM_CHUNK
    assert abs(minutes * 60 - (99_000 * 10 / 1000 + (100_000 - chunk) * 30 / chunk)) < 0.05 * 60 + 1  # shown to 0.1 min
