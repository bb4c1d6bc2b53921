"""LAMA on a KG: rank candidates by log p(first token of " t_name)") after the query text.

The log-probabilities come from the forward pass that DEER's query encoder makes
(``encode_queries_with_next_token``); the result keeps that pass's query embeddings
(``arrays["query_embeddings"]``), which DEER takes as they are (``deer.probe(...,
query_embeddings=...)``), so a LAMA + DEER run reads every query once.  ``single_token`` keeps,
as LAMA does, only candidates whose name is one token (and the queries whose gold tail is one).
"""

from __future__ import annotations

import dataclasses
import re
import time

import numpy as np

from deer.backends.boundary import split_statements
from deer.backends.encoder import PromptEOLEncoder
from deer.core.result import tail_token_lengths
from deer.core.templates import PromptTemplates, query_prompts
from deer.probes import ProbeRequest, ProbeScores
from kg_data.queries import QuerySet


def first_token_ids(tokenizer, queries: QuerySet, templates: PromptTemplates) -> np.ndarray:
    """int64 (n_queries, n_candidates): each candidate's first token after each query's text, by the
    whole-statement boundary (``deer.backends.boundary``; a token may straddle it).

    The boundary depends on the context's last word only -- tokens never span whitespace in byte-level
    BPE or SentencePiece vocabularies -- so it is split once per distinct last word, not per query.
    """
    kg = queries.kg
    continuations = [templates.continuation(kg, t) for t in queries.candidates]
    ids = np.zeros((len(queries.triples), len(continuations)), dtype=np.int64)
    by_last_word: dict[str, np.ndarray] = {}
    for q, triple in enumerate(queries.triples.tolist()):
        context = templates.query_context(kg, tuple(triple))
        last_word = re.search(r"\S*\s*$", context).group()
        if last_word not in by_last_word:
            split = split_statements(tokenizer, context, continuations)
            by_last_word[last_word] = np.asarray([first[0] for first in split.continuation_ids], dtype=np.int64)
        ids[q] = by_last_word[last_word]
    return ids


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


def encode_queries_with_next_token(
    encoder: PromptEOLEncoder, queries: QuerySet, templates: PromptTemplates, next_token_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One forward pass per query giving both the DEER embedding and log p(next token).

    ``next_token_ids``: token ids whose log-probabilities are wanted at the position after the
    query text (LAMA).  Requires ``query_trailing_space=False`` so both read the same position.
    Returns (embeddings (n, d), log-probabilities (n, len(next_token_ids))).
    """
    if templates.query_trailing_space:
        raise ValueError("LAMA needs the query to end at the comma, but this DEER query prompt ends with ', ' "
                         "(--query-trailing-space or --template-style authors): use the paper style without it")
    output = encoder.encode(query_prompts(queries, templates), next_token_ids=next_token_ids, description="queries")
    return output.embeddings, output.next_token_logprobs



def lama_scores_from_logprobs(logprobs: np.ndarray, first_ids: np.ndarray, unique_ids: np.ndarray) -> np.ndarray:
    """(n_queries, n_candidates) scores: ``logprobs`` (n_queries, len(unique_ids)) at each query's
    candidates' first tokens ``first_ids`` (n_queries, n_candidates)."""
    return np.take_along_axis(logprobs, np.searchsorted(unique_ids, first_ids), axis=1)


class LamaProbe:
    """LAMA on a KG: rank by log p(first token of " t_name)") after each query text.

    Option ``single_token``: LAMA's protocol (see :func:`restrict_to_single_token`); the ranked
    queries are then the restricted ones.  The pass's query vectors are kept as
    ``arrays["query_embeddings"]`` for ``deer.probe(..., query_embeddings=...)``.
    """

    name = "lama"
    summary = "log-probability of the tail's first token after the query"
    options = {"single_token": False}
    text_kind = "contexts"

    def score(self, request: ProbeRequest) -> ProbeScores:
        queries, loaded, templates = request.queries, request.loaded, request.templates
        started = time.perf_counter()
        single_token = request.options["single_token"]
        if single_token:
            queries = restrict_to_single_token(queries, loaded.tokenizer)
        first_ids = first_token_ids(loaded.tokenizer, queries, templates)
        unique_ids = np.unique(first_ids)
        encoder = request.backend.encoder()
        embeddings, logprobs = encode_queries_with_next_token(encoder, queries, templates, unique_ids)
        metadata = {
            "single_token": single_token,
            "distinct_first_tokens": int(len(unique_ids)),
            "work": encoder.stats.as_dict(),
            "timings": {"seconds": round(time.perf_counter() - started, 3)},
        }
        return ProbeScores(scores=lama_scores_from_logprobs(logprobs, first_ids, unique_ids), metadata=metadata,
                           arrays={"query_embeddings": embeddings}, queries=queries)
