"""LAMA: rank candidates by the log-probability of their first token after the query, read in DEER's
query pass (its query embeddings are kept: a LAMA + DEER run reads every query once).  The first token is
the whole statement's; one straddling the query text's end is read after the tokens before it."""

from __future__ import annotations

import dataclasses
import re
import time

import numpy as np
from tqdm.auto import tqdm

from bear_ref.cloze_scoring import answer_slot, answer_token_ids, count_statements, mask_slot, statement_scores
from deer.backends.boundary import split_statements
from deer.backends.tokenization import batch_token_ids, bos_id
from deer.platform.cloze_texts import deer_query_text, lama_rules, mask_sentence
from deer.platform.kg_result import tail_token_lengths
from deer.platform.length_guard import FACT_HINT, LengthCheck, fact_namer
from deer.platform.task_texts import texts_of
from deer.platform.templates import PromptTemplates
from deer.probes import OptionValues, ProbeRequest, ProbeScores, check_model_kind
from kg_data.queries import QuerySet

# The whitespace before the last word: Python's less the separators \x1c-\x1f, which Unicode, and
# so every tokenizer's pre-tokenizer, counts as punctuation.
_LAST_WORD = re.compile(r"[^\S\x1c-\x1f]*[\S\x1c-\x1f]*\Z")


def boundary_region(context: str) -> tuple[bool, str, str]:
    """The end of ``context`` that decides how a continuation is tokenised: (whether it is the whole text,
    the whitespace run before the last word and the word, the trailing whitespace).  No BPE, SentencePiece
    or WordPiece token spans whitespace into the next word, so tokens before it do not depend on the continuation."""
    stripped = context.rstrip()
    match = _LAST_WORD.search(stripped)
    return match.start() == 0, match.group(), context[len(stripped):]


def first_tokens_after(tokenizer, context: str, continuations: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each continuation's first token after ``context`` as the statement has it, and how many context tokens it replaces."""
    split = split_statements(tokenizer, context, continuations)
    return (np.asarray([first[0] for first in split.continuation_ids], dtype=np.int64),
            np.asarray([len(split.context_ids) - shared for shared in split.shared_lengths], dtype=np.int64))


def restrict_to_single_token(queries: QuerySet, tokenizer) -> QuerySet:
    """Candidates whose name is one token where the tail stands; the queries whose gold tail is one of them."""
    names = [queries.kg.entity_names[e] for e in queries.candidates]
    keep = tail_token_lengths(tokenizer, names) == 1
    if not keep.any():
        raise ValueError("no candidate name is a single token for this tokenizer")
    new_position = np.full(len(queries.candidates), -1, dtype=np.int64)
    new_position[keep] = np.arange(int(keep.sum()))
    rows = np.flatnonzero(keep[queries.gold])
    if len(rows) == 0:
        raise ValueError("no query has a single-token gold tail")
    return dataclasses.replace(queries, triples=queries.triples[rows], candidates=queries.candidates[keep],
                               gold=new_position[queries.gold[rows]], filter_tails=queries.filter_tails.take(rows).remap(new_position))


def check_query_end(templates: PromptTemplates) -> None:
    """LAMA reads the tail's first token where DEER's query ends: at the comma, with no trailing space."""
    if templates.query_trailing_space:
        raise ValueError("LAMA needs the query to end at the comma, but this DEER query prompt ends with ', ' "
                         "(--query-trailing-space or --template-style authors): use the paper style without it")


def score_straddling(encoder, tokenizer, scores, rows, contexts: list[str], first_ids: list[np.ndarray],
                     drops: list[np.ndarray], where) -> int:
    """Put into ``scores[rows[i]]`` the log-probability of each of ``first_ids[i]`` that straddles the end of
    ``contexts[i]`` (``drops[i]``: how many of its last tokens each replaces), read after the text's tokens
    less those.  Each such prefix must tokenise back to exactly those tokens (a ValueError naming ``where(i)``
    otherwise).  Returns the number of prefixes read."""
    if not contexts:
        return 0
    contexts = [context.rstrip() for context in contexts]
    encoded = tokenizer(contexts, add_special_tokens=False, return_offsets_mapping=True)
    bos = [] if bos_id(tokenizer) is None else [bos_id(tokenizer)]
    prefixes, expected, targets = [], [], []  # targets: (text, its candidates with this cut)
    for i, (context, ids, offsets) in enumerate(zip(contexts, encoded["input_ids"], encoded["offset_mapping"], strict=True)):
        for drop in np.unique(drops[i][drops[i] > 0]).tolist():
            kept = len(ids) - drop  # context tokens before the first token, BOS aside
            prefixes.append(context[: offsets[kept - 1][1]] if kept > 0 else "")
            expected.append(bos + list(ids[:kept]))
            targets.append((i, np.flatnonzero(drops[i] == drop)))
    for prefix, ids, got, (i, _) in zip(prefixes, expected, batch_token_ids(tokenizer, prefixes), targets, strict=True):
        if got != ids:
            raise ValueError(f"LAMA: a candidate's first token straddles the end of {where(i)}, and the text before it, "
                             f"{prefix[-40:]!r}, does not tokenise to the tokens it stands for")
    wanted = np.unique(np.concatenate([first_ids[i][columns] for i, columns in targets]))
    logprobs = encoder.encode(prefixes, next_token_ids=wanted, description="straddling prefixes").next_token_logprobs
    for row, (i, columns) in enumerate(targets):
        scores[rows[i]][columns] = logprobs[row, np.searchsorted(wanted, first_ids[i][columns])]
    return len(prefixes)


def slot_first_tokens(tokenizer, task, rows) -> tuple[dict[int, tuple], dict[tuple, np.ndarray], dict[tuple, np.ndarray]]:
    """Each candidate's first token after each row's query text as the statement has it (``first_tokens_after``
    of the text up to the slot, the label and what follows it up to the next whitespace), once per candidate
    set and context region: (each row's key, each key's ids, each key's drops).  A context that is not the
    statement's start (fill-in-the-blank) is followed by " label"."""
    keys, ids, drops, continuations = {}, {}, {}, {}
    for i in rows:
        query = task.queries[i]
        context = deer_query_text(query)
        slot_context, gap, after = answer_slot(query)
        if context and slot_context == context:
            after = re.match(r"\S*", after).group()
        else:
            gap, after = " ", ""
        key = (query.candidates, boundary_region(context), gap, after)
        if key not in ids:  # a set's continuations made once (a KG's one set: every region of its queries shares them)
            texts = (query.candidates, gap, after)
            if texts not in continuations:
                continuations[texts] = [gap + label + after for label in task.candidate_set(query).labels]
            ids[key], drops[key] = first_tokens_after(tokenizer, context, continuations[texts])
        keys[i] = key
    return keys, ids, drops


def describe_query(task, i: int) -> str:
    """Query ``i`` of ``task`` for a message: its file and line where the task locates it, else its index."""
    return task.locate(task.queries[i]) if task.locate is not None else f"query {i}"


class LamaProbe:
    """LAMA: rank by log p(first token of " t_name)") after each query text; ``single_token``: LAMA's protocol.
    The pass's query vectors are kept as ``arrays["query_embeddings"]`` for ``deer.probe(..., query_embeddings=...)``."""

    name = "lama"
    summary = "log-probability of the tail's first token after the query"
    options = {"single_token": False}
    option_values = {"single_token": OptionValues(bool)}
    causal_lm_only_on_kg = True  # the next token after a KG's query text; a benchmark's masked LM fills its mask

    def check_before_loading(self, options, queries, templates) -> None:
        check_query_end(templates)

    def length_checks(self, task, templates, backend):
        """The texts LAMA reads; a masked LM on a KG is refused here, before any pass."""
        check_model_kind(self, backend, task)
        texts = texts_of(task)
        masked = backend.is_masked_lm
        if masked:
            yield LengthCheck.of("masked sentence", [mask_sentence(backend.tokenizer, q) for q in task.queries], fact_namer(task),
                                 FACT_HINT, "tokenizer")
        else:
            yield texts.query_check("query text")
        rules = lama_rules(task, masked)
        yield from texts.statement_checks([i for i, rule in enumerate(rules) if rule == "statement"], backend)

    @staticmethod
    def folder_suffix(options) -> str:
        """The single-token protocol ranks fewer queries: its ranks go to a run folder of their own."""
        return "-single-token" if options["single_token"] else ""

    @staticmethod
    def queries_ranked(queries: QuerySet, options, tokenizer) -> QuerySet:
        """The KG queries LAMA ranks: with ``single_token``, those ``restrict_to_single_token`` keeps (the runner asks
        before it builds the task)."""
        return restrict_to_single_token(queries, tokenizer) if options["single_token"] else queries

    def score(self, request: ProbeRequest) -> ProbeScores:
        """Each query's candidates by its ``lama_rules``: the first token's log-probability after the query text (in
        the pass that gives DEER its query vectors), at a masked LM's mask, or the whole statement's score."""
        task, loaded, backend = request.task, request.loaded, request.backend
        check_model_kind(self, backend, task)  # where no length guard ran (a backend without max_positions)
        started = time.perf_counter()
        texts = texts_of(task)
        masked = backend.is_masked_lm
        rules = lama_rules(task, masked)
        read = [i for i, rule in enumerate(rules)
                if rule in ("mask-fill", "next-token") and len(task.candidate_set(task.queries[i]))]
        arrays, work, straddling = {}, {}, 0
        if masked:  # each query's answer tokens as its sentence has them at the mask (``mask_slot``), per set and slot
            sentences = [mask_sentence(loaded.tokenizer, q) for q in task.queries]
            keys = {i: (task.queries[i].candidates, mask_slot(loaded.tokenizer, sentences[i])) for i in read}
            answer_ids = {(name, slot): answer_token_ids(loaded.tokenizer, task.candidate_sets[name].labels, masked, slot)
                          for name, slot in dict.fromkeys(keys.values())}
        else:  # each query's answer tokens as its statement has them after the query text (``slot_first_tokens``)
            keys, answer_ids, drops = slot_first_tokens(loaded.tokenizer, task, read)
        token_ids = np.unique(np.concatenate(list(answer_ids.values()))) if answer_ids else np.zeros(0, dtype=np.int64)
        if masked:
            logprobs = backend.mask_filler().logprobs(sentences, token_ids)
        else:
            encoder = backend.encoder(texts.special_tokens)
            contexts = [deer_query_text(q) for q in task.queries]  # the texts the first tokens are read after
            output = encoder.encode(contexts, next_token_ids=token_ids, description="queries")
            logprobs = output.next_token_logprobs
            if contexts == texts.query_prompts():  # DEER's own query prompts (not so where they end in a space)
                arrays["query_embeddings"] = output.embeddings
        columns = {key: np.searchsorted(token_ids, ids) for key, ids in answer_ids.items()}
        scores = {i: logprobs[i, columns[keys[i]] if i in keys else []].astype(np.float64)
                  for i, rule in enumerate(rules) if rule in ("mask-fill", "next-token")}
        if not masked:
            rows = [i for i, key in keys.items() if drops[key].any()]
            straddling = score_straddling(encoder, loaded.tokenizer, scores, rows,
                                          [deer_query_text(task.queries[i]) for i in rows],
                                          [answer_ids[keys[i]] for i in rows], [drops[keys[i]] for i in rows],
                                          lambda i: f"the query text of {describe_query(task, rows[i])}")
            work = encoder.stats.as_dict()
        statement_rows = [i for i, rule in enumerate(rules) if rule == "statement"]
        if statement_rows:
            scorer = backend.statement_scorer()
            with tqdm(total=count_statements(task, statement_rows), desc="LAMA statements", unit="stmt",
                      disable=not request.show_progress) as bar:
                scores.update(statement_scores(scorer, task, statement_rows, bar.update))
            work["statements"] = scorer.work()
        metadata = {"single_token": request.options["single_token"], "distinct_first_tokens": int(len(token_ids)),
                    "work": work, "statement_rows": len(statement_rows),
                    "timings": {"seconds": round(time.perf_counter() - started, 3)}}
        if not masked:
            metadata["straddling_prefixes"] = straddling
        return ProbeScores(scores=scores, metadata=metadata, arrays=arrays, columns={"lama_rule": rules})
