"""Every text a probe feeds the model fits it, checked once per run before the first forward pass (or, with
``long_prompts="truncate-descriptions"``, a description that makes a tail prompt too long is cut to fit).
Only texts that could be too long are tokenised: a text of B bytes (``byte_bound``) has at most B + ``SLACK`` tokens.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from kg_data.cloze import shorten, statement
from kg_data.kg import TextualKG
from kg_data.queries import QuerySet
from kg_data.task import CandidateSet, Task

SLACK = 8  # special tokens and a SentencePiece word-start piece, beyond one token per byte
LONG_PROMPT_MODES = ("error", "truncate-descriptions")
CHUNK = 65_536  # texts made and counted at a time: a KG's every prompt is never held
NAME_HINT = "shorten the names in the KG (few-shot examples repeat train triples' names)"
DESCRIPTION_HINT = "shorten its description, or cut descriptions to fit with --long-prompts truncate-descriptions"
FACT_HINT = "shorten the subject label (or the sentence)"
ANSWER_HINT = "shorten the answer label"


class PromptTooLongError(ValueError):
    """A prompt or statement is longer than the model's maximum positions."""


def byte_bound(text: str) -> int:
    """UTF-8 bytes of ``text`` or of its NFKD form, the larger: an NFKC normaliser (XLM-R's, ALBERT's) feeds the
    compatibility form, which may be longer (the ligature U+FDFA, 3 bytes, is 18 letters)."""
    size = len(text.encode("utf-8"))
    return size if text.isascii() else max(size, len(unicodedata.normalize("NFKD", text).encode("utf-8")))


def over_limit(backend, texts: Sequence[str], limit: int, special_tokens: str = "bos") -> dict[int, int]:
    """{index: token count} of the texts over ``limit`` tokens, as the backend counts them."""
    suspects = [i for i, text in enumerate(texts) if byte_bound(text) + SLACK > limit]
    if not suspects:
        return {}
    counts = backend.token_counts([texts[i] for i in suspects], special_tokens)
    return {i: n for i, n in zip(suspects, counts, strict=True) if n > limit}


def too_long(what: str, kind: str, n_tokens: int, limit: int, more: int, hint: str) -> PromptTooLongError:
    """The guard's error: what does not fit, by how much, and what to shorten."""
    others = f" ({more} more too long)" if more else ""
    return PromptTooLongError(f"{what}: its {kind} is {n_tokens} tokens, more than the model's {limit} positions{others}; {hint}")


@dataclasses.dataclass(frozen=True)
class LengthCheck:
    """``count`` texts a probe feeds the model, made by ``texts(start, stop)`` ``CHUNK`` at a time, fed with
    ``special_tokens`` ("bos", or "tokenizer": its own).  One that does not fit is named by ``name(index)``, with
    ``hint`` (or ``hint(index)``).  ``cut`` (``truncate-descriptions``): ({index: tokens}, limit, report, backend) ->
    the task with those texts cut."""

    kind: str
    count: int
    texts: Callable[[int, int], Sequence[str]]
    name: Callable[[int], str]
    hint: str | Callable[[int], str]
    special_tokens: str = "bos"
    cut: Callable | None = None

    @classmethod
    def of(cls, kind: str, texts: Sequence[str], name: Callable[[int], str], hint: str,
           special_tokens: str = "bos") -> LengthCheck:
        """A check of texts already made."""
        return cls(kind, len(texts), lambda start, stop: texts[start:stop], name, hint, special_tokens)

    def too_long(self, backend, limit: int) -> dict[int, int]:
        """{index: tokens} of the texts over ``limit``."""
        return {start + i: n for start in range(0, self.count, CHUNK)
                for i, n in over_limit(backend, self.texts(start, min(start + CHUNK, self.count)), limit,
                                       self.special_tokens).items()}


@dataclasses.dataclass
class LengthReport:
    """What the guard checked and changed (``metadata["length_guard"]``)."""

    max_positions: int | None
    mode: str
    truncated_descriptions: dict = dataclasses.field(default_factory=dict)

    def to_metadata(self) -> dict:
        return {"max_positions": self.max_positions, "long_prompts": self.mode,
                "truncated_descriptions": dict(self.truncated_descriptions)}


def guard_lengths(task: Task, probes: Sequence, backend, templates=None, mode: str = "error") -> tuple[Task, LengthReport]:
    """Check every text each of ``probes`` feeds the model (its ``length_checks``, if any) against the backend's
    ``max_positions``; return the task (in ``truncate-descriptions`` mode with the texts that have a ``cut`` cut to
    fit) and a report.  Raises PromptTooLongError naming the first text that does not fit."""
    if mode not in LONG_PROMPT_MODES:
        raise ValueError(f"long_prompts must be one of {LONG_PROMPT_MODES}, got '{mode}'")
    limit = backend.max_positions
    report = LengthReport(limit, mode)
    if limit is None:
        return task, report
    if mode == "truncate-descriptions":
        for check in _checks(task, probes, templates, backend):
            if check.cut is not None and (found := check.too_long(backend, limit)):
                task = check.cut(found, limit, report, backend)
    refuse_too_long(_checks(task, probes, templates, backend), backend)
    return task, report


def refuse_too_long(checks: Iterable[LengthCheck], backend) -> None:
    """Raise PromptTooLongError for the first text of ``checks`` longer than the backend's ``max_positions``."""
    limit = backend.max_positions
    for check in checks if limit is not None else ():
        if found := check.too_long(backend, limit):
            first = min(found)
            hint = check.hint if isinstance(check.hint, str) else check.hint(first)
            raise too_long(check.name(first), check.kind, found[first], limit, len(found) - 1, hint)


def _checks(task: Task, probes: Sequence, templates, backend) -> Iterator[LengthCheck]:
    for probe in probes:
        yield from getattr(probe, "length_checks", lambda *_: ())(task, templates, backend)


def statement_checks(backend, stems: Sequence[str], answers: Sequence[str], stem_name: Callable[[int], str],
                     answer_name: Callable[[int], str], answer_kind: str, hints: tuple[str, str],
                     fill: Callable[[int, str], str]) -> Iterator[LengthCheck]:
    """The checks of the statements ``fill(i, answer)``: each answer by itself, then (once they fit) each stem's longest
    statement in tokens, with the special tokens the scorer feeds (a causal LM's BOS; a masked LM's own, as PLL feeds
    them).  ``hints``: (the stems', the answers')."""
    yield LengthCheck.of(answer_kind, answers, answer_name, hints[1], "tokenizer")
    if not answers or backend.max_positions is None:
        return
    specials = "tokenizer" if backend.is_masked_lm else "bos"
    # A stem whose statements all fit by bytes is not filled; the others' statements are each counted (an answer's
    # tokens alone are not its tokens in the sentence: "Validator" is one token, " Validator" three).
    answer_bytes = max(map(byte_bound, answers)) + 2 * SLACK

    def longest(i: int) -> str:
        if byte_bound(stems[i]) + answer_bytes <= backend.max_positions:
            return stems[i]  # every statement of it fits, and so does the stem
        statements = [fill(i, answer) for answer in answers]
        return statements[int(np.argmax(backend.token_counts(statements, specials)))]

    yield LengthCheck("longest statement", len(stems), lambda start, stop: [longest(i) for i in range(start, stop)],
                      stem_name, hints[0], specials)


def _shorten(text: str) -> str:
    return shorten(text.replace("\n", " "))  # a name on one line of the message


def entity_label(kg: TextualKG, entity: int) -> str:
    return f"entity '{kg.entity_ids[entity]}' ({_shorten(kg.entity_names[entity])!r})"


def query_label(kg: TextualKG, triple) -> str:
    head, relation, tail = (int(x) for x in triple)
    return (f"query ({kg.entity_ids[head]}, {kg.relation_ids[relation]}, {kg.entity_ids[tail]}) "
            f"with head {_shorten(kg.entity_names[head])!r}")


def query_hint(templates) -> str:
    """The authors' style's query holds the head's description, the paper's only names."""
    return DESCRIPTION_HINT if templates.style == "authors" else NAME_HINT


def query_check(queries: QuerySet, templates, kind: str, text: Callable) -> LengthCheck:
    """Each KG query's ``text(kg, triple)`` (a query prompt, a query context)."""
    kg, triples = queries.kg, queries.triples
    return LengthCheck(kind, len(triples), lambda start, stop: [text(kg, tuple(t)) for t in triples[start:stop].tolist()],
                       lambda i: query_label(kg, triples[i]), query_hint(templates), templates.prompt_special_tokens)


def kg_statement_checks(queries: QuerySet, templates, backend) -> Iterator[LengthCheck]:
    """A KG's statements: each query's context closed by each candidate's continuation."""
    kg = queries.kg
    stems = [templates.query_context(kg, tuple(t)) for t in queries.triples.tolist()]
    continuations = [templates.continuation(kg, e) for e in queries.candidates]
    yield from statement_checks(backend, stems, continuations, lambda i: query_label(kg, queries.triples[i]),
                                lambda i: entity_label(kg, int(queries.candidates[i])), "statement continuation",
                                (query_hint(templates), NAME_HINT), lambda i, continuation: stems[i] + continuation)


def entity_prompt_check(kg: TextualKG, entities: np.ndarray, templates) -> LengthCheck:
    """Each of ``entities``' tail prompt, as DEER encodes it."""
    def hint(position: int) -> str:
        entity = int(entities[position])
        return "shorten its name" if len(kg.entity_names[entity]) > len(kg.entity_descriptions[entity]) else DESCRIPTION_HINT

    return LengthCheck("tail prompt", len(entities),
                       lambda start, stop: [templates.tail_prompt(kg, e) for e in entities[start:stop].tolist()],
                       lambda i: entity_label(kg, int(entities[i])), hint, templates.prompt_special_tokens)


def tail_prompt_check(queries: QuerySet, templates, task_of: Callable[[QuerySet], Task]) -> LengthCheck:
    """Each candidate's tail prompt; in ``truncate-descriptions`` mode a description too long is cut to fit: the
    queries with it cut, as a task (``task_of``)."""
    def cut(found: dict[int, int], limit: int, report: LengthReport, backend) -> Task:
        return task_of(cut_descriptions(queries, backend, templates, found, limit, report))

    return dataclasses.replace(entity_prompt_check(queries.kg, queries.candidates, templates), cut=cut)


def cut_descriptions(queries: QuerySet, backend, templates, long_tails: dict[int, int], limit: int,
                     report: LengthReport) -> QuerySet:
    """The queries with the ``long_tails``' descriptions cut at a token boundary to fit, each cut in the report."""
    kg = queries.kg
    tokenizer = backend.tokenizer
    descriptions = list(kg.entity_descriptions)
    for position, n_tokens in long_tails.items():
        entity = int(queries.candidates[position])
        description_ids = tokenizer(descriptions[entity], add_special_tokens=False)["input_ids"]
        keep = len(description_ids) - (n_tokens - limit) - SLACK
        while keep > 0:
            cut = tokenizer.decode(description_ids[:keep]).strip()
            trial = dataclasses.replace(kg, entity_descriptions=[*descriptions[:entity], cut, *descriptions[entity + 1:]])
            if not over_limit(backend, [templates.tail_prompt(trial, entity)], limit, templates.prompt_special_tokens):
                break
            keep -= SLACK
        if keep <= 0:
            raise too_long(entity_label(kg, entity), "tail prompt without its description", n_tokens - len(description_ids),
                           limit, len(long_tails) - 1, NAME_HINT)
        descriptions[entity] = cut
        report.truncated_descriptions[kg.entity_ids[entity]] = {"tokens_before": n_tokens, "description_tokens_kept": keep}
    return dataclasses.replace(queries, kg=dataclasses.replace(kg, entity_descriptions=descriptions))


def fact_namer(task: Task) -> Callable[[int], str]:
    """Names a benchmark query by its file, line, fact and template."""
    def name(index: int) -> str:
        q = task.queries[index]
        return f"{task.describe(q)}, {'template ' + str(q.template_index) if q.template_index >= 0 else 'masked sentence'}"
    return name


def answer_namer(candidates: CandidateSet, set_name: str) -> Callable[[int], str]:
    """Names an answer by the file and entry listing it where the data says (BEAR's metadata_relations.json)."""
    def name(index: int) -> str:
        label = shorten(candidates.labels[index])
        if candidates.source is None or candidates.ids is None:
            return f"answer {label!r} of candidate set {set_name}"
        return f"{candidates.source}, answer {candidates.ids[index]} ({label!r})"
    return name


def set_statement_checks(task: Task, rows: Sequence[int], backend) -> Iterator[LengthCheck]:
    """The statements of the benchmark queries at ``rows``, each set's answers in its queries' templates."""
    groups: dict[str, list[int]] = {}
    for i in rows:
        groups.setdefault(task.queries[i].candidates, []).append(i)
    for set_name, members in groups.items():
        candidates = task.candidate_sets[set_name]
        yield from statement_checks(backend, [statement(task.queries[i], "") for i in members], candidates.labels,
                                    lambda i, members=members: fact_namer(task)(members[i]), answer_namer(candidates, set_name),
                                    "text", (FACT_HINT, ANSWER_HINT),
                                    lambda i, label, members=members: statement(task.queries[members[i]], label))
