"""The one task type: queries over named candidate sets, each with its gold answer's position in its set.  LAMA and
BEAR have many small sets (``kg_data.cloze``); a KG's queries share one large set (``CandidateSet.streamed``) and
carry their known answers as arrays (``KnownAnswers``: the other true tails to filter, a position to exclude).  A KG's
queries and labels are made on access, so a task of millions of candidates holds none of their texts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kg_data.queries import FilterTails


@dataclasses.dataclass(frozen=True)
class CandidateSet:
    """Answer labels (and descriptions) a query is ranked over; ``ids`` and ``source``, where known, name an answer.
    ``streamed``: too large to hold its texts or scores at once (a KG's entities): a probe makes, scores and stores
    it a chunk at a time, and DEER's vectors of it are ranked by the streamed cosine."""

    labels: Sequence[str]
    descriptions: Sequence[str] | None = None
    ids: Sequence[str] | None = None
    source: str | None = None
    streamed: bool = False

    def __len__(self) -> int:
        return len(self.labels)


@dataclasses.dataclass(frozen=True)
class ClozeQuery:
    """A sentence with the answer slot ``[Y]``.  ``row``: the instance's row (BEAR), file line (LAMA) or query index
    (a KG); ``template_index``: -1 for a template-free sentence (a masked evidence sentence)."""

    source: str
    relation: str
    fact: str
    row: int
    mode: str
    template_index: int
    template: str
    subject: str
    answer: str
    candidates: str
    gold: int


@dataclasses.dataclass(frozen=True)
class KnownAnswers:
    """What queries over one shared candidate set know beyond their gold, as arrays (n_queries,): ``gold``, its
    position; ``filter_tails``, the other known-true positions (left out of filtered ranks); ``excluded``, the one
    position that is no candidate (-1: none); ``heads``, the query's head's position (-1: none), which may outrank the
    gold.  ``candidates``: how many there are."""

    gold: np.ndarray
    filter_tails: FilterTails
    excluded: np.ndarray
    heads: np.ndarray
    candidates: int

    def __len__(self) -> int:
        return len(self.gold)

    def take(self, rows) -> KnownAnswers:
        """Those of query ``rows`` (int64 indices), in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        return KnownAnswers(self.gold[rows], self.filter_tails.take(rows), self.excluded[rows], self.heads[rows], self.candidates)

    # the names the rank kernels read (``deer.platform.ranking``)
    def excluded_positions(self) -> np.ndarray:
        return self.excluded

    def head_positions(self) -> np.ndarray:
        return self.heads


@dataclasses.dataclass
class Task:
    """Queries over named candidate sets; ``locate``: a query's 'FILE:LINE'; ``known``: the known answers of queries
    over one shared set (a KG's); ``texts``: how the probes' texts are made of it where not from its queries' templates
    (``deer.platform.task_texts``)."""

    name: str
    queries: Sequence[ClozeQuery]
    candidate_sets: Mapping[str, CandidateSet]
    info: dict
    locate: Callable[[ClozeQuery], str] | None = dataclasses.field(default=None, repr=False, compare=False)
    known: KnownAnswers | None = dataclasses.field(default=None, repr=False, compare=False)
    texts: Any = dataclasses.field(default=None, repr=False, compare=False)

    def candidate_set(self, query: ClozeQuery) -> CandidateSet:
        return self.candidate_sets[query.candidates]

    def rows_by_set(self) -> dict[str, list[int]]:
        """{set name: its queries' indices}, in the order the sets first appear; a task over one shared set (``known``,
        a KG's) without making its queries."""
        if self.known is not None and len(self.candidate_sets) == 1:
            return {next(iter(self.candidate_sets)): list(range(len(self.queries)))}
        sets: dict[str, list[int]] = {}
        for i, query in enumerate(self.queries):
            sets.setdefault(query.candidates, []).append(i)
        return sets

    def subset(self, rows: Sequence[int]) -> Task:
        """The queries at ``rows`` (in that order) with the candidate sets they use and their known answers."""
        queries = [self.queries[i] for i in rows]
        names = dict.fromkeys(q.candidates for q in queries)
        known = None if self.known is None else self.known.take(rows)
        return Task(self.name, queries, {name: self.candidate_sets[name] for name in names}, self.info, self.locate, known)

    def describe(self, query: ClozeQuery) -> str:
        """Where a query's fact is and what it is, for a message: 'FILE:LINE: source/relation fact F (subject ...)'."""
        where = f"{self.locate(query)}: " if self.locate is not None else ""
        return f"{where}{query.source}/{query.relation} fact {query.fact} (subject {shorten(query.subject)!r})"


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters for a message ('...' marks a cut)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
