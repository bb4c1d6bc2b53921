"""BEAR on a KG: scores equal whole-statement scoring, ranks equal plain ranks, outputs, resume, CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import bear_ref
from bear_ref.kg_probe import streamed_scores
from deer.backends.models import open_model
from deer.backends.statement_scorer import StatementScorer
from deer.backends.tokenization import batch_token_ids
from deer.platform.result import find_ranks_table
from deer.platform.stores import EmbeddingStore
from deer.platform.task_texts import KG_CANDIDATE_SET, kg_benchmark_task
from deer.platform.templates import PromptTemplates
from experiments.cli import main
from kg_data import build_queries, load_kg
from tests.ranking_oracle import rank_of
from tests.tiny_models import whole_sequence_logprob


def kg_scores(queries, scorer, templates, store=None):
    """(n_queries, n_candidates) BEAR scores of a KG's queries (``streamed_scores`` of its task) and how many were scored now."""
    rows, scored_now = streamed_scores(kg_benchmark_task(queries, templates), KG_CANDIDATE_SET, list(range(len(queries))), scorer, store,
                                       show_progress=False)
    return np.stack([rows[q] for q in range(len(queries))]), scored_now


@pytest.fixture()
def tiny_setup(tiny_kg_dir, tiny_clm_dir):
    kg = load_kg(str(tiny_kg_dir))
    return build_queries(kg, "test"), open_model(str(tiny_clm_dir)), PromptTemplates(k_shot=2)


def test_kg_scores_equal_plain_statements(tiny_setup):
    queries, loaded, templates = tiny_setup
    scores, scored_now = kg_scores(queries, StatementScorer(loaded.model, loaded.tokenizer), templates)
    assert scored_now == len(queries) and scores.shape == (len(queries), len(queries.candidates))
    kg = queries.kg
    continuations = [templates.continuation(kg, t) for t in queries.candidates]
    for q, triple in enumerate(queries.triples.tolist()):
        # BEAR's score is the whole statement's summed log-likelihood (one plain pass per statement).
        context = templates.query_context(kg, tuple(triple))
        plain = [whole_sequence_logprob(loaded.model, ids) for ids in batch_token_ids(loaded.tokenizer, [context + c for c in continuations])]
        np.testing.assert_allclose(scores[q], plain, atol=1e-4)


def test_run_writes_ranks_and_resumes(tiny_setup, tmp_path):
    queries, loaded, templates = tiny_setup
    out = tmp_path / "run"
    result = bear_ref.bear(queries, loaded, templates=templates, out=out, cache=True, cache_dir=tmp_path / "cache", show_progress=False)
    metadata = result.metadata
    table = pd.read_parquet(find_ranks_table(out)) if find_ranks_table(out).suffix == ".parquet" else pd.read_csv(find_ranks_table(out))
    assert {"bear_rank_raw", "bear_rank_filtered", "bear_top10"} <= set(table.columns)
    assert metadata["cache"]["queries_scored_now"] == len(queries)
    assert json.loads((out / "metrics.json").read_text())["bear"]["raw"]["n"] == len(queries)
    # Ranks agree with a plain rank computation on the stored scores.
    scores, _ = kg_scores(queries, StatementScorer(loaded.model, loaded.tokenizer), templates)
    expected = [rank_of(scores[q], queries.gold[q], queries.filter_tails[q]) for q in range(len(queries))]
    np.testing.assert_allclose(table["bear_rank_filtered"], expected)
    again = bear_ref.bear(queries, loaded, templates=templates, out=out, cache=True, cache_dir=tmp_path / "cache",
                          show_progress=False).metadata
    assert again["cache"]["queries_scored_now"] == 0 and again["cache"]["queries_from_cache"] == len(queries)


def test_cli_bear_kg_and_dataset(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    from tests.benchmark_folders import write_dataset

    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    runner = CliRunner()
    result = runner.invoke(main, ["probe", "--probe", "bear", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot", "2", "--out", str(tmp_path / "kg")])
    assert result.exit_code == 0, result.output
    assert "bear" in result.output and (tmp_path / "kg" / "metadata.json").exists()
    folder = write_dataset(tmp_path / "data" / "BEARmini")
    result = runner.invoke(main, ["bear-dataset", "--dataset", str(folder), "--model", str(tiny_clm_dir), "--relations", "P36,P37",
                                  "--max-instances", "2", "--out", str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    assert "BEAR score" in result.output
    metrics = json.loads((tmp_path / "ds" / "metrics.json").read_text())["bear"]
    assert set(metrics["per_relation"]) == {"P36", "P37"} and set(metrics["per_cardinality"]) == {"1:1", "N:1"}
    assert len(list((tmp_path / "ds").glob("instances.*"))) == 1
    summary = (tmp_path / "ds" / "summary.md").read_text()
    assert f"**{metrics['overall']['accuracy_mean']:.4f}**" in summary and "| P37 |" in summary and "| N:1 |" in summary
    monkeypatch.chdir(tmp_path)  # default folder: runs/DATASET[-RELATIONS]-dataset-MAX_INSTANCES|all-MODEL
    result = runner.invoke(main, ["bear-dataset", "--dataset", str(folder), "--model", str(tiny_clm_dir), "--relations", "P36", "--max-instances", "1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / f"BEARmini-P36-dataset-1-{tiny_clm_dir.name}" / "metrics.json").exists()
    result = runner.invoke(main, ["bear-dataset", "--dataset", str(folder), "--model", str(tiny_clm_dir), "--relations", "P5"])
    assert result.exit_code != 0 and "P5" in result.output and "Traceback" not in result.output


def test_bear_kg_score_rows_are_stored_apart_per_backend_store_key(shifted, tiny_kg_dir, tiny_clm_dir, tmp_path):
    """A2: a caching backend whose scores differ read the hf backend's stored BEAR rows (same key)."""
    from bear_ref.kg_probe import score_store
    from deer.backends.models import open_model
    from deer.runner import run_kg

    queries = build_queries(load_kg(tiny_kg_dir), "test")
    loaded = open_model(str(tiny_clm_dir))
    cache = tmp_path / "cache"

    def run(**options):
        return run_kg(["bear"], queries, loaded, show_progress=False, **options)

    run(backend="hf", cache=True, cache_dir=cache)
    fresh = run(backend="shifted", cache=False)
    cached = run(backend="shifted", cache=True, cache_dir=cache)
    assert cached.metadata_of("bear")["cache"]["queries_from_cache"] == 0
    assert cached.ranks("filtered", "bear").tolist() == fresh.ranks("filtered", "bear").tolist()
    # the model's own scores (store_key {}): the store as before
    templates = PromptTemplates()
    texts, width = kg_benchmark_task(queries, templates).texts, len(queries.candidates)
    assert score_store(loaded, texts, width, "m", cache).folder == score_store(loaded, texts, width, "m", cache, {}).folder


# -- rows scored before an interrupt are kept ------------------------------------------------------


class InterruptedScorer:
    """Scores two queries, then is interrupted (Ctrl-C) on the third."""

    def __init__(self):
        self.calls = 0

    def score(self, context, continuations):
        self.calls += 1
        if self.calls == 3:
            raise KeyboardInterrupt
        return np.full(len(continuations), float(self.calls), dtype=np.float32)


def test_bear_keeps_the_rows_scored_before_an_interrupt(tmp_path, tiny_kg_dir):
    from deer.platform.templates import PromptTemplates
    from kg_data import build_queries
    from kg_data.textual import load_textual_kg

    queries, templates = build_queries(load_textual_kg(tiny_kg_dir), "test"), PromptTemplates(k_shot=2)
    store = EmbeddingStore(tmp_path, "bear", {"model": "m"})
    with pytest.raises(KeyboardInterrupt):
        kg_scores(queries, InterruptedScorer(), templates, store)
    reopened = EmbeddingStore(tmp_path, "bear", {"model": "m"})
    assert reopened.missing(queries.item_ids()) == [2, 3]
    scorer = InterruptedScorer()
    scorer.calls = 10  # the resumed run scores only queries 2 and 3
    scores, scored_now = kg_scores(queries, scorer, templates, reopened)
    assert scored_now == 2 and scores[:, 0].tolist() == [1, 2, 11, 12]
