"""The texts the built-in probes make of a task, the same calls for every task: each query's prompt (DEER's vector,
LAMA's next token), each candidate's DEER prompt, BEAR's statements, and the length checks of each.

A cloze benchmark's come from its queries' templates (``ClozeTexts``); a KG's from the DEER templates
(``KGTexts``: few-shot query prompts, described tail prompts), built with its task by ``kg_benchmark_task``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Iterator, Sequence

import numpy as np

from deer.platform.benchmark_rows import task_digest
from deer.platform.cloze_texts import deer_query_text
from deer.platform.kg_result import relation_labels
from deer.platform.length_guard import (
    ANSWER_HINT,
    FACT_HINT,
    LengthCheck,
    answer_namer,
    fact_namer,
    kg_statement_checks,
    query_check,
    set_statement_checks,
    tail_prompt_check,
)
from deer.platform.templates import CONTINUATION, PromptTemplates, candidate_prompts, query_prompts
from kg_data.bear import ANSWER, SUBJECT
from kg_data.cloze import CandidateSet, ClozeQuery
from kg_data.task import KnownAnswers, Task

KG_CANDIDATE_SET = "entities"  # the one candidate set of a KG's task


class ClozeTexts:
    """A task's texts made of its queries' templates and its candidate sets' labels and descriptions."""

    special_tokens = "bos"  # the BOS policy (``deer.backends.tokenization``)
    query_kind = "query text"  # what a query's prompt is called in a message

    def __init__(self, task: Task):
        self.task = task

    def query_prompts(self) -> list[str]:
        """Each query's text: DEER embeds its last state, LAMA reads the next token after it."""
        return [deer_query_text(q) for q in self.task.queries]

    def candidate_prompts(self, name: str, rows: np.ndarray) -> list[str]:
        """DEER's prompts of the candidates at ``rows`` of set ``name``."""
        return candidate_prompts(self.task.candidate_sets[name], np.asarray(rows, dtype=np.int64).tolist())

    def identity(self) -> dict:
        """What the task's texts and candidates are, for a store's key."""
        return {"task": task_digest(self.task)}

    def row_ids(self) -> list[str]:
        """A key per query, unique within the task (a store's row keys)."""
        return [str(i) for i in range(len(self.task.queries))]

    def query_check(self, kind: str) -> LengthCheck:
        return LengthCheck.of(kind, self.query_prompts(), fact_namer(self.task), FACT_HINT, self.special_tokens)

    def candidate_checks(self) -> Iterator[LengthCheck]:
        """DEER's candidate prompts, set by set."""
        for name, candidates in self.task.candidate_sets.items():
            yield LengthCheck.of("DEER prompt", candidate_prompts(candidates), answer_namer(candidates, name), ANSWER_HINT)

    def statement_checks(self, rows: Sequence[int], backend) -> Iterator[LengthCheck]:
        """BEAR's statements of the queries at ``rows``."""
        return set_statement_checks(self.task, rows, backend)


class KGTexts(ClozeTexts):
    """A KG's texts, from the DEER ``templates``: the few-shot query prompt, each entity's described tail prompt and
    the statement "query context + ' t_name)'" (``queries``: the ``QuerySet``, made a chunk at a time)."""

    def __init__(self, task: Task, queries, templates: PromptTemplates):
        super().__init__(task)
        self.queries, self.templates = queries, templates
        self.special_tokens = templates.prompt_special_tokens
        self.query_kind = "query prompt"

    def query_prompts(self) -> list[str]:
        return query_prompts(self.queries, self.templates)

    def candidate_prompts(self, name: str, rows: np.ndarray) -> list[str]:
        kg, entities = self.queries.kg, self.queries.candidates
        return [self.templates.tail_prompt(kg, e) for e in entities[np.asarray(rows, dtype=np.int64)].tolist()]

    def identity(self) -> dict:
        candidates = hashlib.sha256(np.ascontiguousarray(self.queries.candidates, dtype=np.int64).tobytes()).hexdigest()[:16]
        return {"kg_fingerprint": self.queries.kg.fingerprint(), "templates": self.templates.to_metadata(),
                "candidates": candidates}

    def row_ids(self) -> list[str]:
        return self.queries.item_ids()

    def query_check(self, kind: str) -> LengthCheck:
        return query_check(self.queries, self.templates, kind, self.templates.query_prompt)

    def candidate_checks(self) -> Iterator[LengthCheck]:
        """The tail prompts; in ``truncate-descriptions`` mode a description too long is cut to fit (a new task)."""
        yield tail_prompt_check(self.queries, self.templates, lambda queries: kg_benchmark_task(queries, self.templates))

    def statement_checks(self, rows: Sequence[int], backend) -> Iterator[LengthCheck]:
        rows, queries = np.asarray(rows, dtype=np.int64), self.queries
        picked = dataclasses.replace(queries, triples=queries.triples[rows], gold=queries.gold[rows],
                                     filter_tails=queries.filter_tails.take(rows))
        return kg_statement_checks(picked, self.templates, backend)


def texts_of(task: Task) -> ClozeTexts:
    """The task's texts: its own (a KG's), else made of its queries' templates."""
    return task.texts if task.texts is not None else ClozeTexts(task)


class _Picked(Sequence):
    """``values[indices[i]]`` for each i, read on access."""

    def __init__(self, values: Sequence, indices: np.ndarray):
        self.values, self.indices = values, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.values[j] for j in self.indices[i].tolist()]
        return self.values[int(self.indices[i])]


class _KGQueries(Sequence):
    """A KG's queries as ``ClozeQuery``s (template ``query_context + " [Y])"``), each made when read."""

    def __init__(self, queries, templates: PromptTemplates):
        self.queries, self.templates = queries, templates

    @functools.cached_property
    def ids(self) -> list[str]:
        return self.queries.item_ids()

    @functools.cached_property
    def relations(self) -> list[str]:
        return relation_labels(self.queries.kg)

    def __len__(self) -> int:
        return len(self.queries)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        kg, (head, relation, tail) = self.queries.kg, self.queries.triples[i].tolist()
        context = self.templates.query_context(kg, (head, relation, tail))
        if SUBJECT in context or ANSWER in context:
            raise ValueError(f"query {self.ids[i]!r}: its text holds {SUBJECT} or {ANSWER}, which a task reads "
                             "as a slot; this probe needs a KG without them")
        return ClozeQuery(kg.name, self.relations[relation], self.ids[i], int(i), "template", 0,
                          context + CONTINUATION.format(tail=ANSWER), kg.entity_names[head], kg.entity_names[tail],
                          KG_CANDIDATE_SET, int(self.queries.gold[i]))


def kg_benchmark_task(queries, templates: PromptTemplates) -> Task:
    """A KG's queries (a ``QuerySet``) as the one task type: one streamed candidate set, the known answers as arrays,
    the texts of the DEER ``templates``; queries and labels made when read."""
    kg = queries.kg
    candidates = CandidateSet(_Picked(kg.entity_names, queries.candidates), _Picked(kg.entity_descriptions, queries.candidates),
                              streamed=True)
    known = KnownAnswers(np.asarray(queries.gold, dtype=np.int64), queries.filter_tails, queries.excluded_positions(),
                         queries.head_positions(), len(queries.candidates))
    task = Task(kg.name, _KGQueries(queries, templates), {KG_CANDIDATE_SET: candidates},
                {"from_kg": kg.name, "split": queries.split}, known=known)
    task.texts = KGTexts(task, queries, templates)
    return task
