"""The DEER probe: embed queries and described candidate tails once each, rank by cosine.

On a KG the query is the few-shot prompt (h, r, ?) and a candidate its entity's name and
description (``deer.platform.templates``); on a cloze benchmark (``kg_data.cloze.ClozeTask``) the
query is ``deer_query_text`` and a candidate its answer's name and description, each query ranking
its own candidate set.  With a store root, embeddings go through the model's prompt store
(``prompt_store``: resumable, keyed by each prompt's text), so only what is missing is encoded.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from deer.backends.encoder import PromptEOLEncoder, output_size
from deer.platform.distributed import ShardedEncoder
from deer.platform.models import LoadedModel
from deer.platform.ranking import normalize_rows
from deer.platform.run_spec import model_identity
from deer.platform.stores import EmbeddingStore, PendingParts
from deer.platform.templates import candidate_prompts, query_prompts
from deer.platform.validate import OptionError, warn
from deer.probes import OptionValues, ProbeRequest, ProbeScores
from kg_data.cloze import deer_query_text

ENCODER_VERSION = "prompteol-last-token-v1"
LARGE_ENCODING = 2000  # prompts: an encoding of more is announced (count, tokens, then a time estimate)
ESTIMATE_AFTER_SECONDS = 3.0


def prompt_store(loaded: LoadedModel, root: Path, special_tokens: str = "bos", width: int | None = None) -> EmbeddingStore:
    """Vectors keyed by their prompt's text alone (``prompt_id``), one store per model, tokenizer,
    dtype and special tokens: every task that encodes the same prompt shares it.  ``width``: the
    encoder's ``output_size``, which every stored vector must have (None: not checked)."""
    key = {"encoder": ENCODER_VERSION, **model_identity(loaded), "special_tokens": special_tokens}
    return EmbeddingStore(Path(root) / "embeddings", "prompts", key, width=width)


def prompt_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class EncodingForecast:
    """For an encoding of more than ``LARGE_ENCODING`` prompts: a warning before the first forward
    pass, and another after ``ESTIMATE_AFTER_SECONDS``: the time left at the token rate seen so far."""

    def __init__(self, encoder, texts: Sequence[str], description: str, store: EmbeddingStore | None):
        self.active = len(texts) > LARGE_ENCODING
        if not self.active:
            return
        self.description = description
        self.lengths = [len(ids) for ids in encoder.tokenize(texts)]
        self.tokens_left = sum(self.lengths)
        kept = (f"each finished batch is stored in {store.folder} (an interrupted run keeps it)" if store is not None
                else "nothing is stored: a rerun encodes them again (cache=True in Python, or drop --no-cache, keeps them)")
        warn(f"{description}: {len(texts):,} prompts ({self.tokens_left:,} tokens) to encode; {kept}")
        self.started, self.tokens_done = time.perf_counter(), 0

    def batch_done(self, rows) -> None:
        if not self.active:
            return
        done = sum(self.lengths[r] for r in rows)
        self.tokens_done, self.tokens_left = self.tokens_done + done, self.tokens_left - done
        elapsed = time.perf_counter() - self.started
        if elapsed >= ESTIMATE_AFTER_SECONDS and self.tokens_left > 0:
            rate = self.tokens_done / elapsed
            warn(f"{self.description}: about {self.tokens_left / rate / 60:.1f} min left at {rate:,.0f} tokens/s")
            self.active = False


def encode_through_store(encoder: PromptEOLEncoder, store: EmbeddingStore | None, ids: Sequence[str], texts: Sequence[str],
                         description: str) -> tuple[np.ndarray, int]:
    """(vectors in ``ids`` order, prompts encoded now): stored ones reused, missing ones encoded
    in one ``encode`` call and stored as they finish (``PendingParts``), under the store's lock, so a
    parallel run waits and then encodes only what is still missing.  Without a store nothing is kept.
    """
    if store is None:
        if len(texts) <= LARGE_ENCODING:
            return encoder.encode(texts, description=description).embeddings, len(texts)
        forecast, vectors = EncodingForecast(encoder, texts, description, None), None

        def keep(rows, batch):
            nonlocal vectors
            if vectors is None:
                vectors = np.zeros((len(texts), batch.shape[1]), dtype=np.float32)
            vectors[rows] = batch
            forecast.batch_done(rows)

        encoder.encode(texts, description=description, on_batch=keep)
        return vectors, len(texts)
    missing = store.missing(ids)
    if missing:
        with store.locked():
            missing = store.missing(ids)  # less if another run stored some while this one waited
            todo = [texts[i] for i in missing]
            forecast = EncodingForecast(encoder, todo, description, store)

            def keep(rows, vectors):
                pending.add([ids[missing[r]] for r in rows], vectors)
                forecast.batch_done(rows)

            with (
                tqdm(total=len(missing), desc=description, unit="prompt", disable=not encoder.show_progress or not missing) as bar,
                PendingParts(store) as pending,
            ):
                encoder.encode(todo, progress=bar, on_batch=keep)
    return store.get(ids), len(missing)


def check_query_embeddings(given, queries: int, loaded: LoadedModel | None = None) -> None:
    """``query_embeddings`` (where given) has one row per query and, once the model is known (``loaded``),
    its vectors' width; else an OptionError, before any prompt is encoded."""
    if given is None:
        return
    rows, columns = np.shape(given)
    shape = f"{rows}x{columns} array"
    if rows != queries:
        raise OptionError("query_embeddings", shape, f"{rows} rows for {queries} queries (one row per query, in their order)")
    if loaded is not None and columns != output_size(loaded.model):
        raise OptionError("query_embeddings", shape, f"{columns} columns; this model's vectors have {output_size(loaded.model)}")


class DeerProbe:
    """DEER: PromptEOL vectors of each query and each described candidate tail, ranked by cosine.

    Options: ``query_embeddings``, (n_queries, d) vectors already computed for these queries with
    these templates (LAMA's pass makes them).  With ``distributed`` (set by the runner) the forward
    passes are shared between the processes of a torch.distributed job (``ShardedEncoder``).
    """

    name = "deer"
    summary = "PromptEOL embeddings of queries and described tails, cosine ranking"
    options = {"query_embeddings": None}
    option_values = {"query_embeddings": OptionValues("vectors", optional=True)}
    text_kind = "prompts"
    causal_lm_only = True  # PromptEOL reads a causal LM's last state

    def check_before_loading(self, options, queries, templates) -> None:
        check_query_embeddings(options["query_embeddings"], len(queries))

    def score(self, request: ProbeRequest) -> ProbeScores:
        queries, loaded, templates = request.queries, request.loaded, request.templates
        query_embeddings, store_root = request.options["query_embeddings"], request.store_root
        check_query_embeddings(query_embeddings, len(queries), loaded)  # before any encoding
        kg = queries.kg
        encoder = request.backend.encoder(templates.prompt_special_tokens)
        if request.options.get("distributed"):
            encoder = ShardedEncoder(encoder)
        timings: dict = {}

        started = time.perf_counter()
        store = (prompt_store(loaded, store_root, templates.prompt_special_tokens, encoder.output_size)
                 if store_root is not None else None)
        entity_texts = [templates.tail_prompt(kg, e) for e in queries.candidates]
        entity_ids = [prompt_id(text) for text in entity_texts]
        entity_vectors, entities_encoded = encode_through_store(encoder, store, entity_ids, entity_texts, "entities")
        timings["entities_seconds"] = time.perf_counter() - started
        entity_stats = encoder.stats.as_dict()

        started = time.perf_counter()
        query_texts = query_prompts(queries, templates)
        if query_embeddings is not None:
            query_vectors, queries_encoded = np.asarray(query_embeddings, dtype=np.float32), 0
        else:
            query_ids = [prompt_id(text) for text in query_texts]
            query_vectors, queries_encoded = encode_through_store(encoder, store, query_ids, query_texts, "queries")
        timings["queries_seconds"] = time.perf_counter() - started

        stats = encoder.stats.as_dict()
        encode_seconds = stats["forward_seconds"]
        metadata = {
            "example_query_prompt": query_texts[0] if query_texts else None,
            "example_tail_prompt": entity_texts[0] if entity_texts else None,
            "token_budget": encoder.token_budget,
            "max_batch_size": encoder.max_batch_size,
            "cache": {
                "entities_encoded_now": entities_encoded,
                "entities_from_cache": len(entity_ids) - entities_encoded,
                "queries_encoded_now": queries_encoded,
                "queries_from_cache": len(query_texts) - queries_encoded,
                "entity_store": str(store.folder) if store else None,  # the prompt store: entities and queries
                "query_embeddings_given": query_embeddings is not None,
            },
            "work": {
                **stats,
                "entity_tokens": entity_stats["tokens"],
                "query_tokens": stats["tokens"] - entity_stats["tokens"],
                "tokens_per_second": stats["tokens"] / encode_seconds if encode_seconds else None,
            },
            "timings": dict(timings),  # perf_counter seconds, unrounded (compute-time scales them up)
        }
        return ProbeScores(query_vectors=query_vectors, candidate_vectors=entity_vectors, metadata=metadata,
                           arrays={"query_embeddings": query_vectors, "entity_embeddings": entity_vectors})

    def score_benchmark(self, request: ProbeRequest) -> ProbeScores:
        """Every distinct candidate prompt of every set encoded once, each query ranked by cosine over its own set."""
        task, given = request.queries, request.options["query_embeddings"]
        check_query_embeddings(given, len(task.queries), request.loaded)
        encoder = request.backend.encoder()
        started = time.perf_counter()
        if given is None:
            given = encoder.encode([deer_query_text(q) for q in task.queries], description="queries").embeddings
        query_vectors = normalize_rows(np.asarray(given, dtype=np.float32))
        queries_done = time.perf_counter()
        set_prompts = {name: candidate_prompts(candidates) for name, candidates in task.candidate_sets.items()}
        row_of = {prompt: row for row, prompt in enumerate(dict.fromkeys(p for ps in set_prompts.values() for p in ps))}
        store = (prompt_store(request.loaded, request.store_root, width=encoder.output_size)
                 if request.store_root is not None else None)
        vectors, encoded = np.zeros((0, query_vectors.shape[1]), dtype=np.float32), 0
        if row_of:
            vectors, encoded = encode_through_store(encoder, store, [prompt_id(p) for p in row_of], list(row_of), "candidates")
            vectors = normalize_rows(vectors)
        set_vectors = {name: vectors[[row_of[p] for p in prompts]] for name, prompts in set_prompts.items()}
        scores = {i: (set_vectors[q.candidates] @ query_vectors[i]).astype(np.float64) for i, q in enumerate(task.queries)}
        metadata = {
            "candidate_prompts": {"prompts": len(row_of), "encoded_now": encoded, "from_store": len(row_of) - encoded,
                                  "store": None if store is None else str(store.folder)},
            "query_embeddings_given": request.options["query_embeddings"] is not None,
            "work": encoder.stats.as_dict(),
            "timings": {"queries_seconds": round(queries_done - started, 3),
                        "candidates_seconds": round(time.perf_counter() - queries_done, 3)},
        }
        return ProbeScores(scores=scores, metadata=metadata)
