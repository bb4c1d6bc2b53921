"""DEER, LAMA and BEAR side by side on a cloze benchmark (LAMA, the BEAR data set).

``run_cloze(task, loaded, probes)`` scores every query of a ``kg_data.cloze.ClozeTask`` with the
chosen probes and returns one table row per query: the query's fields, and per probe the gold
answer's realistic rank (1 + #higher + #tied/2 among the query's candidates; a non-finite
score never beats the gold), the argmax prediction (first candidate on a tie) and whether it is
the gold (LAMA's P@1, BEAR's accuracy).  A probe that does not score a query leaves NaN:

* LAMA on a "statement" query (answer slot not at the end of the template) and BEAR rank the
  whole statements, so they run on the relation's candidates only, never on LAMA's common
  vocabulary (|vocabulary| statements per fact: 12k+ forward positions each);
* DEER needs a causal LM (PromptEOL); a masked LM gets LAMA (mask filling) and BEAR (PLL).

The model runs behind the backend seam (``deer.backends``): 'hf' (batched kernels) or 'plain'
(one whole forward pass per prompt, statement or masked sentence: a cross-check).

With ``out``, each finished probe is stored (``parts/<key>/<probe>.parquet``) under a key of
model, tokenizer, dtype and the task's queries and candidates, so a stopped run resumes and a
stored probe is reused only for the same inputs.  With ``store_root``, DEER's candidate vectors go
into the model's prompt store (``deer.embedding_probe.prompt_store``) as they are encoded and are
reused by every later task on the same candidates (the plain backend stores nothing).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from bear_ref.cloze_scoring import answer_token_ids, count_statements, mask_fill_logprobs, mask_sentence, statement_scores
from deer.backends import DEFAULT_BACKEND, backend_class, open_backend
from deer.cloze_probe import candidate_prompt, encode_cloze
from deer.core.benchmark_rows import RANK_RULE, query_frame, ranks_from_scores, task_digest
from deer.core.files import package_versions, read_table, write_json, write_table
from deer.core.length_guard import PromptTooLongError, long_statements, max_positions, token_counts, too_long
from deer.core.models import LoadedModel, is_masked_lm
from deer.embedding_probe import prompt_store
from kg_data.cloze import ClozeTask, deer_query_text, shorten, statement

PROBES = ("deer", "lama", "bear")
LARGE_SET = "common-vocab"  # scored by DEER and next-token LAMA only (see the module doc)


@dataclasses.dataclass
class ClozeResult:
    table: pd.DataFrame
    metadata: dict

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_table(folder / "queries.parquet", self.table)
        write_json(folder / "metadata.json", self.metadata)
        return folder


def lama_rules(task: ClozeTask, masked: bool) -> list[str]:
    """How LAMA scores each query (see the module doc)."""
    if masked:
        return ["mask-fill"] * len(task.queries)
    return [q.lama_scoring if q.lama_scoring == "next-token" or q.candidates != LARGE_SET
            else "statement (not scored on the common vocabulary)" for q in task.queries]


def lama_answer_ids(task: ClozeTask, loaded: LoadedModel, masked: bool) -> dict[str, np.ndarray]:
    """Per candidate set, each answer's first token (``answer_token_ids``), tokenised once."""
    return {name: answer_token_ids(loaded.tokenizer, s.labels, masked) for name, s in task.candidate_sets.items() if len(s)}


def next_token_columns(answer_ids: dict[str, np.ndarray]) -> np.ndarray:
    """The distinct answer tokens whose log-probabilities the query pass (or mask filling) reads."""
    return np.unique(np.concatenate(list(answer_ids.values()))) if answer_ids else np.zeros(0, dtype=np.int64)


def _lama_scores(task: ClozeTask, loaded: LoadedModel, logprobs: np.ndarray | None, answer_ids: dict[str, np.ndarray],
                 rules: list[str], masked: bool, scorer, mask_token_budget: int, progress) -> dict[int, np.ndarray]:
    """LAMA scores per query, by the rule ``lama_rules`` gave it."""
    token_ids = next_token_columns(answer_ids)
    if masked:
        sentences = [mask_sentence(loaded.tokenizer, q) for q in task.queries]
        logprobs = mask_fill_logprobs(loaded.model, loaded.tokenizer, sentences, token_ids, mask_token_budget)
    columns = {name: np.searchsorted(token_ids, ids) for name, ids in answer_ids.items()}
    scores = {i: logprobs[i, columns.get(q.candidates, [])].astype(np.float64)
              for i, (q, rule) in enumerate(zip(task.queries, rules, strict=True)) if rule in ("mask-fill", "next-token")}
    statement_rows = [i for i, rule in enumerate(rules) if rule == "statement"]
    if statement_rows:
        scores.update(statement_scores(scorer, task, statement_rows, progress))
    return scores


def checked_probes(probes) -> list[str]:
    """``probes`` in the order of ``PROBES``; unknown ones (or none) are a ValueError."""
    unknown = sorted(set(probes) - set(PROBES))
    if unknown or not set(probes) & set(PROBES):
        raise ValueError(f"probes must be some of {', '.join(PROBES)}; got {', '.join(unknown) or 'none'}")
    return [p for p in PROBES if p in probes]


def _fit(task: ClozeTask, index: int, kind: str, n_tokens: int, limit: int, more: int, hint: str) -> PromptTooLongError:
    q = task.queries[index]
    what = f"{task.describe(q)}, {'template ' + str(q.template_index) if q.template_index >= 0 else 'masked sentence'}"
    return too_long(what, kind, n_tokens, limit, more, hint)


def guard_lengths(task: ClozeTask, loaded: LoadedModel, probes, masked: bool) -> None:
    """Every text the probes will feed fits the model's positions, checked before the first forward
    pass: DEER's and LAMA's query texts, DEER's answer prompts, the masked sentences and the whole
    statements BEAR (and statement-scored LAMA) score.  A PromptTooLongError names the first fact
    (file and line) or answer that does not fit."""
    limit = max_positions(loaded.model)
    if limit is None:
        return
    tokenizer = loaded.tokenizer
    hint = "shorten the subject label (or the sentence)"
    if not masked and {"deer", "lama"} & set(probes):
        long_texts = token_counts(tokenizer, [deer_query_text(q) for q in task.queries], limit, "bos")
        if long_texts:
            first = min(long_texts)
            raise _fit(task, first, "query text", long_texts[first], limit, len(long_texts) - 1, hint)
    if masked and "lama" in probes:
        long_texts = token_counts(tokenizer, [mask_sentence(tokenizer, q) for q in task.queries], limit, "tokenizer")
        if long_texts:
            first = min(long_texts)
            raise _fit(task, first, "masked sentence", long_texts[first], limit, len(long_texts) - 1, hint)
    if "deer" in probes:
        for name, candidates in task.candidate_sets.items():
            prompts = [candidate_prompt(label, description) for label, description
                       in zip(candidates.labels, candidates.descriptions or (None,) * len(candidates), strict=True)]
            long_prompts = token_counts(tokenizer, prompts, limit, "bos")
            if long_prompts:
                first = min(long_prompts)
                raise too_long(f"answer {shorten(candidates.labels[first])!r} of candidate set {name}", "DEER prompt",
                               long_prompts[first], limit, len(long_prompts) - 1, "shorten the answer label")
    rules = lama_rules(task, masked) if "lama" in probes else [None] * len(task.queries)
    groups: dict[str, list[int]] = {}  # the statements scored, per candidate set
    for i, (q, rule) in enumerate(zip(task.queries, rules, strict=True)):
        if rule == "statement" or ("bear" in probes and q.candidates != LARGE_SET):
            groups.setdefault(q.candidates, []).append(i)
    for name, rows in groups.items():
        labels = task.candidate_sets[name].labels
        long_answers, long_stems = long_statements(tokenizer, [statement(task.queries[i], "") for i in rows], labels, limit)
        if long_answers:
            first = min(long_answers)
            raise too_long(f"answer {shorten(labels[first])!r} of candidate set {name}", "text", long_answers[first], limit,
                           len(long_answers) - 1, "shorten the answer label")
        if long_stems:
            first = min(long_stems)
            raise _fit(task, rows[first], "longest statement", long_stems[first], limit, len(long_stems) - 1, hint)


def run_cloze(task: ClozeTask, loaded: LoadedModel, probes=PROBES, out: str | Path | None = None,
              token_budget: int | None = None, statement_token_budget: int = 512, show_progress: bool = True,
              backend: str = DEFAULT_BACKEND, store_root: str | Path | None = None) -> ClozeResult:
    """Score ``task`` with ``probes`` (some of deer, lama, bear) on ``backend``; see the module doc.  A
    task without queries, or with a text longer than the model's positions (``guard_lengths``), is
    refused before anything is scored or written."""
    probes = checked_probes(probes)
    backend_class(backend)  # an unknown backend fails before any work
    plain = backend != DEFAULT_BACKEND
    masked = is_masked_lm(loaded.model)
    if masked and "deer" in probes:
        raise ValueError(f"DEER embeds with a causal LM (PromptEOL); {loaded.name} is a masked LM: run lama,bear")
    if not task.queries:
        counts = list(task.info.get("counts", {}).values())  # LAMA's: why facts gave no query
        why = "" if not counts else (f" ({sum(c['object_not_in_vocabulary'] for c in counts)} of {sum(c['facts'] for c in counts)} "
                                     "facts have an object that is not one token for this model, "
                                     f"{sum(c['no_usable_sentence'] for c in counts)} no usable masked sentence)")
        raise ValueError(f"{task.name}: no query to score{why}")
    guard_lengths(task, loaded, probes, masked)
    digest = task_digest(task)
    key = {"model": loaded.fingerprint, "tokenizer": loaded.tokenizer_fingerprint, "dtype": str(loaded.dtype),
           "task": digest, "rank_rule": RANK_RULE}
    parts = None
    if out is not None and not plain:  # created with the first finished probe (``_store``): a failed start leaves nothing behind
        parts = Path(out) / "parts" / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    frames, timings, resumed = {}, {}, []
    for probe in probes:
        if parts is not None and (parts / f"{probe}.parquet").exists():
            frames[probe] = read_table(parts / f"{probe}.parquet")
            resumed.append(probe)
    todo = [p for p in probes if p not in frames]
    scorer = None
    if {"lama", "bear"} & set(todo):
        scorer = open_backend(backend, loaded, token_budget=statement_token_budget).statement_scorer()
    encoding = None
    answer_ids = lama_answer_ids(task, loaded, masked) if "lama" in todo else {}
    if {"deer", "lama"} & set(todo) and not masked:
        token_ids = next_token_columns(answer_ids) if "lama" in todo else None
        encoder = open_backend(backend, loaded, token_budget=token_budget, show_progress=show_progress).encoder()
        started = time.perf_counter()
        store = prompt_store(loaded, store_root) if store_root is not None and not plain and "deer" in todo else None
        encoding = encode_cloze(task, encoder, next_token_ids=token_ids, with_candidates="deer" in todo, store=store)
        timings["deer_lama_pass_seconds"] = round(time.perf_counter() - started, 3)
        timings["encoding"] = encoding.seconds
        timings["encoder_work"] = encoder.stats.as_dict()
        timings["note"] = "one query pass serves DEER and LAMA: its seconds count in deer_seconds and in lama_seconds"
    if "deer" in todo:
        started = time.perf_counter()
        scores = {i: encoding.cosine(task, i).astype(np.float64) for i in range(len(task.queries))}
        frames["deer"] = _store(parts, "deer", ranks_from_scores(task, scores, "deer"), key)
        timings["deer_seconds"] = round(encoding.seconds["queries"] + encoding.seconds["candidates"] + time.perf_counter() - started, 3)
    if "lama" in todo:
        started = time.perf_counter()
        rules = lama_rules(task, masked)
        statement_rows = [i for i, rule in enumerate(rules) if rule == "statement"]
        with tqdm(total=count_statements(task, statement_rows), desc="LAMA statements", unit="stmt", disable=not show_progress) as bar:
            scores = _lama_scores(task, loaded, None if encoding is None else encoding.next_token_logprobs, answer_ids, rules,
                                  masked, scorer, 1 if plain else token_budget or 4096, bar.update)  # 1: a sentence a pass
        frame = ranks_from_scores(task, scores, "lama")
        frame["lama_rule"] = rules
        frames["lama"] = _store(parts, "lama", frame, key)
        timings["lama_seconds"] = round(time.perf_counter() - started + (encoding.seconds["queries"] if encoding else 0), 3)
    if "bear" in todo:
        started = time.perf_counter()
        rows = [i for i, q in enumerate(task.queries) if q.candidates != LARGE_SET]
        timings["bear_statements"] = count_statements(task, rows)
        with tqdm(total=timings["bear_statements"], desc="BEAR statements", unit="stmt", disable=not show_progress) as bar:
            scores = statement_scores(scorer, task, rows, bar.update)
        frames["bear"] = _store(parts, "bear", ranks_from_scores(task, scores, "bear"), key)
        timings["bear_seconds"] = round(time.perf_counter() - started, 3)
        timings["bear_work"] = scorer.work()
    table = pd.concat([query_frame(task)] + [frames[p] for p in probes], axis=1)
    metadata = {
        "task": {"name": task.name, "queries": len(task.queries), "digest": digest, **task.info},
        "model": loaded.metadata(),
        "probes": probes,
        "backend": backend,
        "rank_rule": RANK_RULE,
        "resumed_probes": resumed,
        "candidate_prompts": encoding.candidate_prompts if encoding is not None else {},  # DEER's: encoded now / from the store
        "timings": timings,
        "versions": package_versions(),
    }
    result = ClozeResult(table, metadata)
    if out is not None:
        result.save(out)
    return result


def _store(parts: Path | None, probe: str, frame: pd.DataFrame, key: dict) -> pd.DataFrame:
    if parts is not None:
        if not (parts / "key.json").exists():
            write_json(parts / "key.json", key)
        write_table(parts / f"{probe}.parquet", frame)
    return frame
