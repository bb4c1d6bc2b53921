"""DEER on a cloze benchmark (the BEAR data set, LAMA): one embedding per query, one per candidate.

The query's embedding is the last-layer state at the end of ``kg_data.cloze.deer_query_text``
(the statement up to the answer slot, or the fill-in-the-blank prompt when the answer comes
first); a candidate's is PromptEOL over its name and description (``TAIL_TEMPLATE``), or its
name alone (``NAME_TAIL_TEMPLATE``) where the data has no description.  Candidates are ranked by
cosine.  Every distinct prompt is encoded once, whichever query or candidate set it serves; with a
prompt store (``deer.embedding_probe.prompt_store``) the candidates' vectors are kept, keyed by their
text, and reused by every later task with the same model (LAMA's vocabulary is encoded once, whatever
the relations or the number of facts).

The same forward pass gives LAMA's next-token log-probabilities (``next_token_ids``): for a
query scored "next-token", DEER's text is exactly LAMA's context.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from deer.core.ranking import normalize_rows
from deer.core.stores import EmbeddingStore
from deer.core.templates import NAME_TAIL_TEMPLATE, TAIL_TEMPLATE
from deer.embedding_probe import encode_through_store, prompt_id
from kg_data.cloze import ClozeTask, deer_query_text


def candidate_prompt(label: str, description: str | None = None) -> str:
    if description:
        return TAIL_TEMPLATE.format(name=label, description=description)
    return NAME_TAIL_TEMPLATE.format(name=label)


@dataclasses.dataclass
class ClozeEncoding:
    """Unit-length vectors: ``query_vectors`` (n_queries, d); ``candidate_vectors`` per set name.
    ``next_token_logprobs``: (n_queries, len(next_token_ids)) when asked for.  ``candidate_prompts``:
    how many distinct candidate prompts there were, how many were encoded now and how many came from the store."""

    query_vectors: np.ndarray
    candidate_vectors: dict[str, np.ndarray]
    next_token_logprobs: np.ndarray | None
    seconds: dict
    candidate_prompts: dict = dataclasses.field(default_factory=dict)

    def cosine(self, task: ClozeTask, index: int) -> np.ndarray:
        query = task.queries[index]
        return self.candidate_vectors[query.candidates] @ self.query_vectors[index]


def encode_cloze(task: ClozeTask, encoder, next_token_ids: np.ndarray | None = None,
                 with_candidates: bool = True, store: EmbeddingStore | None = None) -> ClozeEncoding:
    """Embed every query (and, with ``with_candidates``, every candidate set) of ``task``; candidate
    vectors come from ``store`` where it has them, and the others go into it as they finish."""
    started = time.perf_counter()
    output = encoder.encode([deer_query_text(q) for q in task.queries], next_token_ids=next_token_ids, description="queries")
    queries_done = time.perf_counter()
    candidate_vectors, counts = {}, {}
    if with_candidates:
        set_prompts = {name: [candidate_prompt(label, description) for label, description
                              in zip(s.labels, s.descriptions or (None,) * len(s), strict=True)]
                       for name, s in task.candidate_sets.items()}
        row_of = {prompt: row for row, prompt in enumerate(dict.fromkeys(p for ps in set_prompts.values() for p in ps))}
        vectors, encoded = None, 0
        if row_of:
            vectors, encoded = encode_through_store(encoder, store, [prompt_id(p) for p in row_of], list(row_of), "candidates")
            vectors = normalize_rows(vectors)
        counts = {"prompts": len(row_of), "encoded_now": encoded, "from_store": len(row_of) - encoded,
                  "store": None if store is None else str(store.folder)}
        for name, prompts in set_prompts.items():
            rows = [row_of[p] for p in prompts]
            candidate_vectors[name] = vectors[rows] if rows else np.zeros((0, output.embeddings.shape[1]), dtype=np.float32)
    seconds = {"queries": round(queries_done - started, 3), "candidates": round(time.perf_counter() - queries_done, 3)}
    return ClozeEncoding(normalize_rows(output.embeddings), candidate_vectors, output.next_token_logprobs, seconds, counts)
