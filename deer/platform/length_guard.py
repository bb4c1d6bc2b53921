"""Every prompt and statement fits the model, checked before the first forward pass (or, with
``long_prompts="truncate-descriptions"``, a description that makes a prompt too long is cut to fit).

Only texts that could be too long are tokenised: a token covers at least one byte of UTF-8 in every
tokenizer family here, so a text of B bytes has at most B + ``SLACK`` tokens with its special tokens.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

from deer.platform.cloze_texts import deer_query_text, lama_rules, mask_sentence
from deer.platform.templates import candidate_prompts
from kg_data.cloze import LARGE_SET, shorten, statement
from kg_data.kg import TextualKG
from kg_data.queries import QuerySet
from kg_data.task import CandidateSet, Task

SLACK = 8  # special tokens and a SentencePiece word-start piece, beyond one token per byte
LONG_PROMPT_MODES = ("error", "truncate-descriptions")


class PromptTooLongError(ValueError):
    """A prompt or statement is longer than the model's maximum positions."""


def over_limit(backend, texts: Sequence[str], limit: int, special_tokens: str = "bos", extra: int = 0) -> dict[int, int]:
    """{index: token count} of the texts that exceed ``limit`` tokens (``extra`` added to each), as the
    backend counts them (``token_counts``: the tokens its encoder and scorers feed)."""
    suspects = [i for i, text in enumerate(texts) if len(text.encode("utf-8")) + SLACK + extra > limit]
    if not suspects:
        return {}
    counts = [n + extra for n in backend.token_counts([texts[i] for i in suspects], special_tokens)]
    return {i: n for i, n in zip(suspects, counts, strict=True) if n > limit}


@dataclasses.dataclass
class LengthReport:
    """What the guard checked and changed (``metadata["length_guard"]``)."""

    max_positions: int | None
    mode: str
    truncated_descriptions: dict = dataclasses.field(default_factory=dict)

    def to_metadata(self) -> dict:
        return {"max_positions": self.max_positions, "long_prompts": self.mode,
                "truncated_descriptions": dict(self.truncated_descriptions)}


def _shorten(text: str) -> str:
    return shorten(text.replace("\n", " "))  # a name on one line of the message


def _entity_label(kg: TextualKG, entity: int) -> str:
    return f"entity '{kg.entity_ids[entity]}' ({_shorten(kg.entity_names[entity])!r})"


def _query_label(kg: TextualKG, triple) -> str:
    head, relation, tail = (int(x) for x in triple)
    return (f"query ({kg.entity_ids[head]}, {kg.relation_ids[relation]}, {kg.entity_ids[tail]}) "
            f"with head {_shorten(kg.entity_names[head])!r}")


def long_statements(backend, stems: Sequence[str], answers: Sequence[str], limit: int) -> tuple[dict[int, int], dict[int, int]]:
    """The statements that cannot fit ``limit`` positions: ({answer index: tokens} of the answers too
    long by themselves, {stem index: tokens} of the stems -- statements with an empty answer slot --
    too long with the longest answer, BOS and a masked LM's [CLS] and [SEP])."""
    long_answers = over_limit(backend, answers, limit, "tokenizer")
    if long_answers or not answers:
        return long_answers, {}
    tokenizer = backend.tokenizer
    longest = max(len(ids) for ids in tokenizer(list(answers), add_special_tokens=False)["input_ids"])
    return {}, over_limit(backend, stems, limit, "bos", longest + (2 if tokenizer.bos_token_id is None else 0))


def too_long(what: str, kind: str, n_tokens: int, limit: int, more: int, hint: str) -> PromptTooLongError:
    """The guard's error: what does not fit, by how much, and what to shorten."""
    others = f" ({more} more too long)" if more else ""
    return PromptTooLongError(f"{what}: its {kind} is {n_tokens} tokens, more than the model's {limit} positions{others}; {hint}")


def _refuse_first(found: dict[int, int], limit: int, what: Callable[[int], str], kind: str, hint: str) -> None:
    """Raise :func:`too_long` for the first of ``found`` ({index: tokens}), named by ``what(index)``."""
    if found:
        first = min(found)
        raise too_long(what(first), kind, found[first], limit, len(found) - 1, hint)


NAME_HINT = "shorten the names in the KG (few-shot examples repeat train triples' names)"
DESCRIPTION_HINT = "shorten its description, or cut descriptions to fit with --long-prompts truncate-descriptions"


def guard_prompt_lengths(queries: QuerySet, backend, templates, text_kind, mode: str = "error") -> tuple[QuerySet, LengthReport]:
    """Check the texts of the probes' ``text_kind`` (one, or several: each checked): "prompts" (query and
    tail prompts, DEER), "contexts" (query texts, LAMA), "statements" (query text + longest continuation,
    BEAR) or None (nothing to check) against the backend's model (its ``max_positions``, its
    ``token_counts``); return the queries (descriptions cut in ``truncate-descriptions`` mode) and a
    report.  Raises PromptTooLongError naming the first entity or query that does not fit."""
    if mode not in LONG_PROMPT_MODES:
        raise ValueError(f"long_prompts must be one of {LONG_PROMPT_MODES}, got '{mode}'")
    limit = backend.max_positions
    report = LengthReport(limit, mode)
    given = [text_kind] if text_kind is None or isinstance(text_kind, str) else list(text_kind)
    kinds = sorted({kind for kind in given if kind is not None})
    if limit is None or not kinds:
        return queries, report
    if mode == "truncate-descriptions" and "prompts" in kinds:
        queries = _truncate_tail_descriptions(queries, backend, templates, limit, report)
    for kind in kinds:
        _check(queries, backend, templates, kind, limit)
    return queries, report


def long_tail_prompts(queries: QuerySet, backend, templates, limit: int, chunk: int = 65_536) -> dict[int, int]:
    """{candidate position: tokens} of the tail prompts over ``limit`` tokens, made a chunk at a time
    (a KG's every prompt is never held)."""
    found = {}
    for start in range(0, len(queries.candidates), chunk):
        tails = [templates.tail_prompt(queries.kg, e) for e in queries.candidates[start:start + chunk].tolist()]
        found.update({start + i: n for i, n in over_limit(backend, tails, limit, templates.prompt_special_tokens).items()})
    return found


def _check(queries: QuerySet, backend, templates, text_kind: str, limit: int) -> None:
    kg = queries.kg
    special = templates.prompt_special_tokens
    if text_kind == "prompts":
        long_tails = long_tail_prompts(queries, backend, templates, limit)
        if long_tails:
            first = min(long_tails)
            entity = int(queries.candidates[first])
            long_name = len(kg.entity_names[entity]) > len(kg.entity_descriptions[entity])
            raise too_long(_entity_label(kg, entity), "tail prompt", long_tails[first], limit, len(long_tails) - 1,
                          "shorten its name" if long_name else DESCRIPTION_HINT)
    query_text = templates.query_prompt if text_kind == "prompts" else templates.query_context
    texts = [query_text(kg, tuple(t)) for t in queries.triples.tolist()]
    if text_kind == "statements":  # the statement: the query context, then the longest candidate continuation
        continuations = [templates.continuation(kg, e) for e in queries.candidates]
        long_names, long_texts = long_statements(backend, texts, continuations, limit)
        _refuse_first(long_names, limit, lambda i: _entity_label(kg, queries.candidates[i]), "statement continuation", NAME_HINT)
    else:
        long_texts = over_limit(backend, texts, limit, special)
    kind = {"prompts": "query prompt", "contexts": "query text", "statements": "longest statement"}[text_kind]
    hint = DESCRIPTION_HINT if templates.style == "authors" else NAME_HINT
    _refuse_first(long_texts, limit, lambda i: _query_label(kg, queries.triples[i]), kind, hint)


def _truncate_tail_descriptions(queries: QuerySet, backend, templates, limit: int, report: LengthReport) -> QuerySet:
    """Cut the descriptions whose tail prompts exceed ``limit``, at a token boundary, to fit."""
    kg = queries.kg
    special = templates.prompt_special_tokens
    long_tails = long_tail_prompts(queries, backend, templates, limit)
    if not long_tails:
        return queries
    tokenizer = backend.tokenizer  # the description is cut at one of its own token boundaries
    descriptions = list(kg.entity_descriptions)
    for position, n_tokens in long_tails.items():
        entity = int(queries.candidates[position])
        description_ids = tokenizer(descriptions[entity], add_special_tokens=False)["input_ids"]
        keep = len(description_ids) - (n_tokens - limit) - SLACK
        while keep > 0:
            cut = tokenizer.decode(description_ids[:keep]).strip()
            trial = dataclasses.replace(kg, entity_descriptions=[*descriptions[:entity], cut, *descriptions[entity + 1:]])
            if not over_limit(backend, [templates.tail_prompt(trial, entity)], limit, special):
                break
            keep -= SLACK
        if keep <= 0:
            raise too_long(_entity_label(kg, entity), "tail prompt without its description", n_tokens - len(description_ids),
                          limit, len(long_tails) - 1, NAME_HINT)
        descriptions[entity] = cut
        report.truncated_descriptions[kg.entity_ids[entity]] = {"tokens_before": n_tokens, "description_tokens_kept": keep}
    return dataclasses.replace(queries, kg=dataclasses.replace(kg, entity_descriptions=descriptions))


FACT_HINT = "shorten the subject label (or the sentence)"
ANSWER_HINT = "shorten the answer label"


def _fact(task: Task, index: int) -> str:
    q = task.queries[index]
    return f"{task.describe(q)}, {'template ' + str(q.template_index) if q.template_index >= 0 else 'masked sentence'}"


def _answer(candidates: CandidateSet, name: str, index: int) -> str:
    """An answer, named by the file and entry listing it where the data says (BEAR's metadata_relations.json)."""
    label = shorten(candidates.labels[index])
    if candidates.source is None or candidates.ids is None:
        return f"answer {label!r} of candidate set {name}"
    return f"{candidates.source}, answer {candidates.ids[index]} ({label!r})"


def guard_benchmark_lengths(task: Task, backend, text_kinds: set) -> None:
    """The benchmark counterpart of ``guard_prompt_lengths`` for the probes' ``text_kinds`` -- "prompts"
    (DEER: query texts and answer prompts), "contexts" (LAMA: query texts, masked sentences, or whole
    statements where ``lama_rules`` says so), "statements" (BEAR) -- against the backend's model's positions.
    Raises PromptTooLongError naming the first fact (file and line) or answer that does not fit."""
    limit, masked = backend.max_positions, backend.is_masked_lm
    if limit is None:
        return
    tokenizer = backend.tokenizer
    texts = {}
    if not masked and {"prompts", "contexts"} & text_kinds:
        texts["query text"] = over_limit(backend, [deer_query_text(q) for q in task.queries], limit, "bos")
    if masked and "contexts" in text_kinds:
        texts["masked sentence"] = over_limit(backend, [mask_sentence(tokenizer, q) for q in task.queries], limit, "tokenizer")
    for kind, long_texts in texts.items():
        _refuse_first(long_texts, limit, functools.partial(_fact, task), kind, FACT_HINT)
    if "prompts" in text_kinds:
        for name, candidates in task.candidate_sets.items():
            long_prompts = over_limit(backend, candidate_prompts(candidates), limit, "bos")
            _refuse_first(long_prompts, limit, functools.partial(_answer, candidates, name), "DEER prompt", ANSWER_HINT)
    rules = lama_rules(task, masked) if "contexts" in text_kinds else [None] * len(task.queries)
    groups: dict[str, list[int]] = {}  # the statements scored, per candidate set
    for i, (q, rule) in enumerate(zip(task.queries, rules, strict=True)):
        if rule == "statement" or ("statements" in text_kinds and q.candidates != LARGE_SET):
            groups.setdefault(q.candidates, []).append(i)
    for name, rows in groups.items():
        candidates = task.candidate_sets[name]
        long_answers, long_stems = long_statements(backend, [statement(task.queries[i], "") for i in rows], candidates.labels, limit)
        _refuse_first(long_answers, limit, functools.partial(_answer, candidates, name), "text", ANSWER_HINT)
        _refuse_first({rows[i]: n for i, n in long_stems.items()}, limit, functools.partial(_fact, task), "longest statement",
                      FACT_HINT)
