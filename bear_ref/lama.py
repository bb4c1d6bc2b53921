"""LAMA on a KG: rank candidates by log p(first token of " t_name)") after the query text.

The log-probabilities come from the forward pass that DEER's query encoder makes
(``deer.probe.encode_queries_with_next_token``); with ``with_deer`` its query embeddings are
handed to DEER through the query store, so the pass is not run twice.  ``single_token`` keeps,
as LAMA does, only candidates whose name is one token (and the queries whose gold tail is one).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

from bear_ref.boundary import split_statements
from deer.encoder import PromptEOLEncoder
from deer.probe import LoadedModel, encode_queries_with_next_token, query_item_ids, query_store, run_deer_probe
from deer.ranking import gold_ranks_from_scores, top_k_from_scores
from deer.results import run_metadata, save_probe_results, tail_token_lengths
from deer.templates import PromptTemplates
from kg_data.queries import QuerySet


def first_token_ids(tokenizer, queries: QuerySet, templates: PromptTemplates) -> np.ndarray:
    """int64 (n_candidates,): each candidate's first token after the query, by the whole-statement boundary."""
    kg = queries.kg
    context = templates.query_context(kg, tuple(queries.triples[0].tolist()))
    continuations = [templates.continuation(kg, t) for t in queries.candidates]
    split = split_statements(tokenizer, context, continuations)
    return np.asarray([ids[0] for ids in split.continuation_ids], dtype=np.int64)


def restrict_to_single_token(queries: QuerySet, tokenizer) -> QuerySet:
    """Candidates whose name is one token (as " name"); queries whose gold tail is one of them."""
    names = [queries.kg.entity_names[e] for e in queries.candidates]
    keep = tail_token_lengths(tokenizer, names) == 1
    if not keep.any():
        raise ValueError("no candidate name is a single token for this tokenizer")
    new_position = np.full(len(queries.candidates), -1, dtype=np.int64)
    new_position[keep] = np.arange(int(keep.sum()))
    rows = np.flatnonzero(keep[queries.gold])
    if len(rows) == 0:
        raise ValueError("no query has a single-token gold tail")
    filters = [new_position[f][new_position[f] >= 0] for f in (queries.filter_tails[r] for r in rows)]
    return dataclasses.replace(
        queries, triples=queries.triples[rows], candidates=queries.candidates[keep], gold=new_position[queries.gold[rows]], filter_tails=filters
    )


def lama_scores_from_logprobs(logprobs: np.ndarray, first_ids: np.ndarray, unique_ids: np.ndarray) -> np.ndarray:
    """(n_queries, n_candidates) scores from log-probs over ``unique_ids`` columns."""
    return logprobs[:, np.searchsorted(unique_ids, first_ids)]


def run_lama_probe(
    queries: QuerySet,
    loaded: LoadedModel,
    templates: PromptTemplates,
    out_dir: Path,
    single_token: bool = False,
    with_deer: bool = False,
    token_budget: int = 8192,
    use_cache: bool = True,
    cache_dir: Optional[Path] = None,
    show_progress: bool = True,
) -> dict:
    """Run LAMA (and DEER from the same query pass); return {probe: metrics}."""
    started = time.perf_counter()
    if single_token:
        queries = restrict_to_single_token(queries, loaded.tokenizer)
    first_ids = first_token_ids(loaded.tokenizer, queries, templates)
    unique_ids = np.unique(first_ids)
    encoder = PromptEOLEncoder(loaded.model, loaded.tokenizer, token_budget=token_budget, show_progress=show_progress)
    embeddings, logprobs = encode_queries_with_next_token(encoder, queries, templates, unique_ids)
    scores = lama_scores_from_logprobs(logprobs, first_ids, unique_ids)
    ranks = gold_ranks_from_scores(scores, queries.gold, queries.filter_tails)
    metadata = {
        **run_metadata("lama", queries, loaded, templates),
        "single_token": single_token,
        "distinct_first_tokens": int(len(unique_ids)),
        "work": encoder.stats.as_dict(),
        "timings": {"seconds": round(time.perf_counter() - started, 3)},
    }
    results = {"lama": save_probe_results(out_dir, "lama", queries, ranks, top_k_from_scores(scores, 10), metadata, tokenizer=loaded.tokenizer)}
    if with_deer:
        with tempfile.TemporaryDirectory() as scratch:
            root = cache_dir if use_cache else Path(scratch)
            # DEER finds these query embeddings in its store and encodes only the entities.
            store = query_store(loaded, queries.kg, templates, root)
            ids = query_item_ids(queries)
            missing = store.missing(ids)
            store.add([ids[i] for i in missing], embeddings[missing])
            run = run_deer_probe(queries, loaded, templates, out_dir, token_budget=token_budget, use_cache=True, cache_dir=root, show_progress=show_progress)
        results["deer"] = run.metrics
    return results
