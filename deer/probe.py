"""The DEER probe: embed queries and described candidate tails once each, rank by cosine.

Work is |queries| + |candidates| forward passes.  Embeddings go through resumable stores
(``deer.cache``), so a second run -- or a resumed one -- encodes only what is missing.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from tqdm.auto import tqdm

from deer.attention import configured_backend
from deer.cache import EmbeddingStore
from deer.encoder import PromptEOLEncoder
from deer.models import cache_root, load_model, model_fingerprint, tokenizer_fingerprint
from deer.ranking import cosine_gold_ranks, faiss_top_k
from deer.results import run_metadata, save_probe_results
from deer.templates import PromptTemplates
from deer.tokenization import bos_policy
from kg_data.kg import TextualKG
from kg_data.queries import QuerySet

ENCODER_VERSION = "prompteol-last-token-v1"


@dataclasses.dataclass
class LoadedModel:
    """A model ready for probing, with what identifies it in caches and metadata."""

    name: str
    model: object
    tokenizer: object
    source: str
    fingerprint: str
    tokenizer_fingerprint: str
    dtype: str
    device: str
    load_seconds: float

    def metadata(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "class": type(self.model).__name__,
            "dtype": self.dtype,
            "device": self.device,
            "parameters": int(sum(p.numel() for p in self.model.parameters())),
            "bos": bos_policy(self.tokenizer),
            # Configured back-end; custom-mask passes may run another (scorers record it under "work").
            "attention": configured_backend(self.model),
            "load_seconds": round(self.load_seconds, 2),
        }


def open_model(name: str, dtype: str = "float32", device: str = "auto") -> LoadedModel:
    started = time.perf_counter()
    model, tokenizer, resolved = load_model(name, dtype=dtype, device=device)
    return LoadedModel(
        name, model, tokenizer, resolved.source, model_fingerprint(model), tokenizer_fingerprint(tokenizer),
        dtype, str(next(model.parameters()).device), time.perf_counter() - started,
    )


def _store_key(loaded: LoadedModel, kg: TextualKG) -> dict:
    return {
        "encoder": ENCODER_VERSION,
        "model_fingerprint": loaded.fingerprint,
        "tokenizer_fingerprint": loaded.tokenizer_fingerprint,
        "dtype": loaded.dtype,
        "bos": bos_policy(loaded.tokenizer),
        "kg": kg.name,
        "kg_fingerprint": kg.fingerprint(),
    }


def entity_store(loaded: LoadedModel, kg: TextualKG, templates: PromptTemplates, root: Optional[Path] = None) -> EmbeddingStore:
    key = {**_store_key(loaded, kg), "tail_template": templates.tail_template_key()}
    return EmbeddingStore(root or cache_root() / "embeddings", "entities", key)


def query_store(loaded: LoadedModel, kg: TextualKG, templates: PromptTemplates, root: Optional[Path] = None) -> EmbeddingStore:
    key = {**_store_key(loaded, kg), "query_templates": templates.to_metadata()}
    return EmbeddingStore(root or cache_root() / "embeddings", "queries", key)


def encode_through_store(
    encoder: PromptEOLEncoder,
    store: Optional[EmbeddingStore],
    ids: Sequence[str],
    texts: Sequence[str],
    description: str,
    chunk_size: int = 2048,
) -> tuple[np.ndarray, int]:
    """Vectors for ``ids``: stored ones reused, missing ones encoded chunk by chunk and stored.

    Returns (vectors in ``ids`` order, number of prompts encoded now).
    """
    if store is None:
        return encoder.encode(texts, description=description).embeddings, len(texts)
    missing = store.missing(ids)
    with tqdm(total=len(missing), desc=description, unit="prompt", disable=not encoder.show_progress or not missing) as bar:
        for start in range(0, len(missing), chunk_size):
            chunk = missing[start : start + chunk_size]
            vectors = encoder.encode([texts[i] for i in chunk], progress=bar).embeddings
            store.add([ids[i] for i in chunk], vectors)
    return store.get(ids), len(missing)


def query_prompts(queries: QuerySet, templates: PromptTemplates) -> list[str]:
    """DEER query texts, one per query (few-shot examples + open query line)."""
    return [templates.query_prompt(queries.kg, tuple(triple)) for triple in queries.triples.tolist()]


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


def query_item_ids(queries: QuerySet) -> list[str]:
    kg = queries.kg
    return [f"{kg.entity_ids[h]}\t{kg.relation_ids[r]}\t{kg.entity_ids[t]}" for h, r, t in queries.triples.tolist()]


@dataclasses.dataclass
class DeerRun:
    """Everything a DEER run produced (also written to the output folder)."""

    metrics: dict
    metadata: dict
    query_embeddings: np.ndarray
    entity_embeddings: np.ndarray


def run_deer_probe(
    queries: QuerySet,
    loaded: LoadedModel,
    templates: PromptTemplates,
    out_dir: Path,
    token_budget: int = 8192,
    use_cache: bool = True,
    cache_dir: Optional[Path] = None,
    show_progress: bool = True,
) -> DeerRun:
    """Run DEER on ``queries``; write ranks table, metrics.json, metadata.json to ``out_dir``."""
    kg = queries.kg
    encoder = PromptEOLEncoder(loaded.model, loaded.tokenizer, token_budget=token_budget, show_progress=show_progress,
                               special_tokens=templates.prompt_special_tokens)
    timings: dict = {}

    started = time.perf_counter()
    entities = entity_store(loaded, kg, templates, cache_dir) if use_cache else None
    entity_ids = [kg.entity_ids[e] for e in queries.candidates]
    entity_texts = [templates.tail_prompt(kg, e) for e in queries.candidates]
    entity_vectors, entities_encoded = encode_through_store(encoder, entities, entity_ids, entity_texts, "entities")
    timings["entities_seconds"] = time.perf_counter() - started
    entity_stats = encoder.stats.as_dict()

    started = time.perf_counter()
    query_cache = query_store(loaded, kg, templates, cache_dir) if use_cache else None
    query_texts = query_prompts(queries, templates)
    query_vectors, queries_encoded = encode_through_store(encoder, query_cache, query_item_ids(queries), query_texts, "queries")
    timings["queries_seconds"] = time.perf_counter() - started

    started = time.perf_counter()
    ranks = cosine_gold_ranks(query_vectors, entity_vectors, queries.gold, queries.filter_tails)
    _, top = faiss_top_k(query_vectors, entity_vectors, 10)
    timings["ranking_seconds"] = time.perf_counter() - started

    stats = encoder.stats.as_dict()
    encode_seconds = stats["forward_seconds"]
    metadata = {
        **run_metadata("deer", queries, loaded, templates),
        "example_query_prompt": query_texts[0] if query_texts else None,
        "example_tail_prompt": entity_texts[0] if entity_texts else None,
        "token_budget": token_budget,
        "cache": {
            "entities_encoded_now": entities_encoded,
            "entities_from_cache": len(entity_ids) - entities_encoded,
            "queries_encoded_now": queries_encoded,
            "queries_from_cache": len(query_texts) - queries_encoded,
            "entity_store": str(entities.folder) if entities else None,
        },
        "work": {
            **stats,
            "entity_tokens": entity_stats["tokens"],
            "query_tokens": stats["tokens"] - entity_stats["tokens"],
            "tokens_per_second": stats["tokens"] / encode_seconds if encode_seconds else None,
        },
        "timings": dict(timings),  # perf_counter seconds, unrounded (compute-time scales them up)
    }
    metrics = save_probe_results(out_dir, "deer", queries, ranks, top, metadata, tokenizer=loaded.tokenizer)
    return DeerRun(metrics, metadata, query_vectors, entity_vectors)
