"""The DEER probe: embed queries and described candidate tails once each, rank by cosine.

The texts are the task's (``deer.platform.task_texts``): on a KG the few-shot prompt (h, r, ?) and each entity's name
and description, on a cloze benchmark the text before the answer and each answer's.  With a store root, only the
prompts missing from the model's ``prompt_store`` are encoded.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

import deer
from deer.backends.models import LoadedModel
from deer.base.vectors import normalize_rows
from deer.platform.distributed import ShardedEncoder
from deer.platform.rank_step import DistinctVectors
from deer.platform.run_spec import model_identity
from deer.platform.stores import KEY_DTYPE, READ_ATTEMPTS, EmbeddingStore, PendingParts, StoreDamaged, item_keys
from deer.platform.task_texts import KG_CANDIDATE_SET, texts_of
from deer.platform.validate import OptionError, warn
from deer.probes import OptionValues, ProbeRequest, ProbeScores

ENCODER_VERSION = "prompteol-last-token-v1"
LARGE_ENCODING = 2000  # prompts: an encoding of more is announced (count, tokens, then a time estimate)
STREAM_CHUNK = 32_768  # prompts made, tokenized and encoded at a time: no stage holds a KG's every prompt
ESTIMATE_AFTER_SECONDS = 3.0


def prompt_store(loaded: LoadedModel, root: Path | None, special_tokens: str = "bos", width: int | None = None,
                 backend_key: dict | None = None) -> EmbeddingStore | None:
    """Vectors keyed by their prompt's text alone (``prompt_id``), one store per model, tokenizer, dtype and
    special tokens, shared by every task encoding the prompt (None without a ``root``).  ``width``: the encoder's
    ``output_size`` every stored vector must have; ``backend_key``: the backend's ``store_key``."""
    if root is None:
        return None
    key = {"encoder": ENCODER_VERSION, "toolkit": deer.__version__,  # another version may encode otherwise: made again
           **model_identity(loaded), "special_tokens": special_tokens, **(backend_key or {})}
    return EmbeddingStore(Path(root) / "embeddings", "prompts", key, width=width)


def prompt_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class EncodingForecast:
    """For an encoding of more than ``LARGE_ENCODING`` prompts: a warning of the prompts and tokens before the first
    forward pass, and after ``ESTIMATE_AFTER_SECONDS`` one of the time left: preparing (making, tokenizing) and encoding
    are timed apart, as a chunk is prepared whole before its first batch and one rate would overstate the time left."""

    def __init__(self, total: int, description: str, store: EmbeddingStore | None):
        self.total, self.description, self.store = total, description, store
        self.active, self.announced = total > LARGE_ENCODING, False
        self.started = time.perf_counter()
        self.prompts_done = self.tokens_done = self.prepared = 0
        self.preparing_seconds = 0.0
        self.lengths: list[int] = []

    def chunk(self, lengths: list[int], preparing_seconds: float = 0.0) -> None:
        """The next chunk's token counts and the seconds making and tokenizing it took; the first announces the encoding."""
        self.lengths = lengths
        self.prepared += len(lengths)
        self.preparing_seconds += preparing_seconds
        if not self.active or self.announced:
            return
        exact = len(lengths) == self.total
        tokens = sum(lengths) if exact else round(sum(lengths) / len(lengths) * self.total)
        kept = (f"each finished batch is stored in {self.store.folder} (an interrupted run keeps it)" if self.store is not None
                else "nothing is stored: a rerun encodes them again (cache=True in Python, or drop --no-cache, keeps them)")
        warn(f"{self.description}: {self.total:,} prompts ({'' if exact else 'about '}{tokens:,} tokens) to encode; {kept}")
        self.announced = True

    def batch_done(self, rows) -> None:
        if not self.active:
            return
        self.tokens_done += sum(self.lengths[r] for r in rows)
        self.prompts_done += len(rows)
        elapsed = time.perf_counter() - self.started
        if elapsed >= ESTIMATE_AFTER_SECONDS and self.prompts_done < self.total:
            rate = self.tokens_done / max(elapsed - self.preparing_seconds, 1e-9)  # tokens encoded per second
            tokens_left = self.tokens_done / self.prompts_done * (self.total - self.prompts_done)
            preparing_left = self.preparing_seconds / self.prepared * (self.total - self.prepared)
            warn(f"{self.description}: about {(tokens_left / rate + preparing_left) / 60:.1f} min left "
                 f"({rate:,.0f} tokens/s through the model)")
            self.active = False


def prompt_keys(texts: Sequence[str]) -> np.ndarray:
    """The store's keys of prompts: their texts' digests (``prompt_id``)."""
    return item_keys([prompt_id(text) for text in texts])


def encode_chunked(encoder, texts_of: Callable[[np.ndarray], list[str]], rows: np.ndarray, description: str,
                   store: EmbeddingStore | None, on_vectors: Callable[[np.ndarray, np.ndarray], None]) -> None:
    """Encode the prompts ``texts_of(rows)`` ``STREAM_CHUNK`` at a time, each batch handed to ``on_vectors(rows, vectors)``."""
    forecast = EncodingForecast(len(rows), description, store)
    with tqdm(total=len(rows), desc=description, unit="prompt", disable=not encoder.show_progress or not len(rows)) as bar:
        for start in range(0, len(rows), STREAM_CHUNK):
            chunk = rows[start:start + STREAM_CHUNK]
            preparing = time.perf_counter()
            token_lists = encoder.tokenize(texts_of(chunk))
            forecast.chunk([len(ids) for ids in token_lists], time.perf_counter() - preparing)

            def keep(positions, vectors, chunk=chunk):
                on_vectors(chunk[positions], vectors)
                forecast.batch_done(positions)

            encoder.encode_ids(token_lists, progress=bar, on_batch=keep)


def all_prompt_keys(texts_of: Callable[[np.ndarray], list[str]], n: int, chunk: int = STREAM_CHUNK) -> np.ndarray:
    """The store keys of prompts ``texts_of(0..n-1)``, the texts made ``chunk`` at a time."""
    return np.concatenate([np.zeros(0, KEY_DTYPE)] + [prompt_keys(texts_of(np.arange(s, min(s + chunk, n))))
                                                       for s in range(0, n, chunk)])


def encode_prompts(encoder, store: EmbeddingStore | None, texts_of: Callable[[np.ndarray], list[str]], n: int,
                   description: str) -> tuple[np.ndarray | StoredPrompts, int]:
    """(vectors of prompts ``texts_of(0..n-1)``, prompts encoded now): kept in the store, or in memory without one."""
    if store is not None:
        stored = StoredPrompts(encoder, store, texts_of, n, description)
        return stored, stored.encoded
    vectors = np.zeros((n, encoder.output_size), dtype=np.float32)  # the width a store would require of them
    encode_chunked(encoder, texts_of, np.arange(n), description, None, vectors.__setitem__)
    return vectors, n


def encode_through_store(encoder, store: EmbeddingStore | None, texts: Sequence[str], description: str) -> tuple[np.ndarray, int]:
    """(vectors of ``texts`` in order, prompts encoded now): ``encode_prompts``, read back whole."""
    vectors, encoded = encode_prompts(encoder, store, lambda rows: [texts[i] for i in rows], len(texts), description)
    read = np.asarray(vectors)  # a damaged shard met reading is encoded again: counted then
    return read, getattr(vectors, "encoded", encoded)


class StoredPrompts:
    """The vectors of ``n`` prompts kept in a store, never all in memory (``blocks``, ``rows``, ``np.asarray``); a
    shard failing its checks when read is set aside, its prompts encoded again and the read repeated.  ``encoded``:
    prompts encoded now."""

    def __init__(self, encoder, store: EmbeddingStore, texts_of: Callable[[np.ndarray], list[str]], n: int, description: str):
        self.encoder, self.store, self.texts_of, self.description = encoder, store, texts_of, description
        self.keys = all_prompt_keys(texts_of, n)
        self.encoded = 0
        self.on_encoded: Callable[[], None] = lambda: None  # told when a later read encodes a damaged shard's prompts again
        self.encode_missing()

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.keys), self.store.width

    def encode_missing(self) -> None:
        """Encode the prompts the store lacks, storing them as they finish, under its lock (a parallel run waits)."""
        if not self.store.missing(self.keys):
            return
        with self.store.locked(), PendingParts(self.store, behind=True) as pending:  # a part written while the next is encoded
            missing = np.asarray(self.store.missing(self.keys), dtype=np.int64)  # less if another run stored some as this waited
            encode_chunked(self.encoder, self.texts_of, missing, self.description, self.store,
                           lambda rows, vectors: pending.add(self.keys[rows], vectors))
        self.encoded += len(missing)
        self.on_encoded()

    def rows(self, positions) -> np.ndarray:
        keys = self.keys[np.asarray(positions, dtype=np.int64)]
        for _ in range(READ_ATTEMPTS):
            try:
                return self.store.get(keys)
            except StoreDamaged:  # set aside by the store, with a warning naming it
                self.encode_missing()
        return self.store.get(keys)

    def blocks(self, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(positions, vectors)`` blocks of at most ``size`` rows, in the order the store holds them."""
        done = np.zeros(len(self.keys), dtype=bool)
        for _ in range(READ_ATTEMPTS + 1):
            todo = np.flatnonzero(~done)
            try:
                for positions, vectors in self.store.blocks(self.keys[todo], size):
                    done[todo[positions]] = True
                    yield todo[positions], vectors
                return
            except StoreDamaged:  # set aside by the store, with a warning naming it
                self.encode_missing()
        raise StoreDamaged(f"{self.store.folder}: its shards kept failing their checks when read")

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        vectors = self.rows(np.arange(len(self.keys)))
        return vectors if dtype is None else vectors.astype(dtype)


def check_query_embeddings(given, queries: int, backend=None) -> None:
    """``query_embeddings`` (where given) has one row per query and, once the backend is open, its vectors' width."""
    if given is None:
        return
    rows, columns = np.shape(given)
    shape = f"{rows}x{columns} array"
    if rows != queries:
        raise OptionError("query_embeddings", shape, f"{rows} rows for {queries} queries (one row per query, in their order)")
    if backend is not None and columns != backend.output_size:
        raise OptionError("query_embeddings", shape, f"{columns} columns; this model's vectors have {backend.output_size}")


class DeerProbe:
    """DEER: PromptEOL vectors of each query and each described candidate tail, ranked by cosine.  Option:
    ``query_embeddings``, the queries' vectors already computed (LAMA's pass makes them)."""

    name = "deer"
    summary = "PromptEOL embeddings of queries and described tails, cosine ranking"
    options = {"query_embeddings": None}
    option_values = {"query_embeddings": OptionValues("vectors", optional=True)}
    causal_lm_only = True  # PromptEOL reads a causal LM's last state
    reads_lm_head = False  # so a causal checkpoint without its head runs (``check_model_kind``)

    def check_before_loading(self, options, queries, templates) -> None:
        check_query_embeddings(options["query_embeddings"], len(queries))

    def length_checks(self, task, templates, backend):
        """The texts DEER encodes: each query's prompt and each candidate's."""
        texts = texts_of(task)
        yield from texts.candidate_checks()
        yield texts.query_check(texts.query_kind)

    def score(self, request: ProbeRequest) -> ProbeScores:
        """The query vectors and each candidate set's (its distinct prompts encoded once; a streamed set's a chunk at
        a time, into the store where there is one), ranked by the runner's cosine."""
        task, given, texts = request.task, request.options["query_embeddings"], texts_of(request.task)
        check_query_embeddings(given, len(task.queries), request.backend)  # before any encoding
        encoder = request.backend.encoder(texts.special_tokens)
        if request.options.get("distributed"):
            encoder = ShardedEncoder(encoder)
        store = prompt_store(request.loaded, request.store_root, texts.special_tokens, encoder.output_size,
                             request.backend.store_key)
        started = time.perf_counter()
        candidates, encoded, prompts = {}, {}, {}  # encoded now and prompts, by set (or "candidates": the small sets')
        for name, candidate_set in task.candidate_sets.items():
            if candidate_set.streamed:  # a KG's entities: made, encoded and stored a chunk at a time, never all held
                candidates[name], encoded[name] = encode_prompts(encoder, store, functools.partial(texts.candidate_prompts, name),
                                                                 len(candidate_set), "entities")
                prompts[name] = len(candidate_set)
        small = {name: candidate_set for name, candidate_set in task.candidate_sets.items() if not candidate_set.streamed}
        if small:
            distinct, prompts["candidates"], encoded["candidates"] = encode_distinct(encoder, store, texts, small)
            candidates.update(distinct)
        timings = {"entities_seconds": time.perf_counter() - started}
        candidate_tokens = encoder.stats.tokens

        started = time.perf_counter()
        query_texts = texts.query_prompts()
        if given is not None:
            query_vectors, queries_encoded = np.asarray(given, dtype=np.float32), 0
        else:
            query_vectors, queries_encoded = encode_through_store(encoder, store, query_texts, "queries")
        timings["queries_seconds"] = time.perf_counter() - started
        first_set = next(iter(task.candidate_sets), None)
        metadata = {
            "example_query_prompt": query_texts[0] if query_texts else None,
            "example_tail_prompt": texts.candidate_prompts(first_set, np.arange(1))[0]
            if first_set is not None and len(task.candidate_sets[first_set]) else None,
            "token_budget": encoder.token_budget,
            "max_batch_size": encoder.max_batch_size,
        }

        def count_work():  # again where ranking reads a damaged shard and its entities are encoded again
            now = sum(getattr(candidates.get(name), "encoded", count) for name, count in encoded.items())
            stats = encoder.stats.as_dict()
            metadata["cache"] = {
                "entities_encoded_now": now,  # candidate prompts (a KG's entities)
                "entities_from_cache": sum(prompts.values()) - now,
                "queries_encoded_now": queries_encoded,
                "queries_from_cache": 0 if given is not None else len(query_texts) - queries_encoded,
                "entity_store": str(store.folder) if store is not None else None,  # the prompt store: candidates and queries
                "store_not_written": store.unwritable if store is not None else None,  # why, where a write to it failed
                "query_embeddings_given": given is not None,
            }
            query_tokens = stats["tokens"] - candidate_tokens
            metadata["work"] = {
                **stats,
                "entity_tokens": stats["tokens"] - query_tokens,
                "query_tokens": query_tokens,
                "tokens_per_second": stats["tokens"] / stats["forward_seconds"] if stats["forward_seconds"] else None,
            }
            metadata["timings"] = timings  # perf_counter seconds, unrounded (compute-time scales them up)
            if "candidates" in prompts:  # the small sets' distinct prompts
                now = encoded["candidates"]
                metadata["candidate_prompts"] = {"prompts": prompts["candidates"], "encoded_now": now,
                                                 "from_store": prompts["candidates"] - now,
                                                 "store": None if store is None else str(store.folder),
                                                 "store_not_written": None if store is None else store.unwritable}

        count_work()
        for vectors in candidates.values():
            if isinstance(vectors, StoredPrompts):
                vectors.on_encoded = count_work
        arrays = {"query_embeddings": query_vectors}
        if KG_CANDIDATE_SET in candidates and task.candidate_sets[KG_CANDIDATE_SET].streamed:
            arrays["entity_embeddings"] = candidates[KG_CANDIDATE_SET]
        return ProbeScores(query_vectors=query_vectors, candidate_vectors=candidates, metadata=metadata, arrays=arrays)


def encode_distinct(encoder, store: EmbeddingStore | None, texts, sets: dict) -> tuple[dict, int, int]:
    """({set name: ``DistinctVectors``} of ``sets``, distinct prompts, prompts encoded now): every distinct prompt
    among the sets encoded once."""
    set_prompts = {name: texts.candidate_prompts(name, np.arange(len(candidates))) for name, candidates in sets.items()}
    row_of = {prompt: row for row, prompt in enumerate(dict.fromkeys(p for ps in set_prompts.values() for p in ps))}
    vectors, encoded = encode_through_store(encoder, store, list(row_of), "candidates")  # (0, width) for none
    vectors = normalize_rows(vectors)
    distinct = {}
    for name, prompts in set_prompts.items():
        rows, inverse = np.unique(np.asarray([row_of[p] for p in prompts], np.int64), return_inverse=True)
        distinct[name] = DistinctVectors(vectors[rows], inverse)
    return distinct, len(row_of), encoded
