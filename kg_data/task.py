"""The one task type: queries over named candidate sets, each with its gold answer's position in its set.  LAMA and
BEAR have many sets (``kg_data.cloze``); a KG's queries are one large set whose task also carries the ``QuerySet``
(``kg_queries``), which a probe may read to score it its own way.  A KG's queries and labels are made on access, so a
task of millions of candidates holds none of their texts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class CandidateSet:
    """Answer labels (and descriptions) a query is ranked over; ``ids`` and ``source``, where known, name an answer."""

    labels: Sequence[str]
    descriptions: Sequence[str] | None = None
    ids: Sequence[str] | None = None
    source: str | None = None

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


@dataclasses.dataclass
class Task:
    """Queries over named candidate sets; ``locate``: a query's 'FILE:LINE'; ``kg_queries``: a KG's ``QuerySet``."""

    name: str
    queries: Sequence[ClozeQuery]
    candidate_sets: Mapping[str, CandidateSet]
    info: dict
    locate: Callable[[ClozeQuery], str] | None = dataclasses.field(default=None, repr=False, compare=False)
    kg_queries: Any = dataclasses.field(default=None, repr=False, compare=False)

    def candidate_set(self, query: ClozeQuery) -> CandidateSet:
        return self.candidate_sets[query.candidates]

    def subset(self, rows: Sequence[int]) -> Task:
        """The queries at ``rows`` (in that order) with the candidate sets they use (a KG's ``kg_queries`` stay behind)."""
        queries = [self.queries[i] for i in rows]
        names = dict.fromkeys(q.candidates for q in queries)
        return Task(self.name, queries, {name: self.candidate_sets[name] for name in names}, self.info, self.locate)

    def describe(self, query: ClozeQuery) -> str:
        """Where a query's fact is and what it is, for a message: 'FILE:LINE: source/relation fact F (subject ...)'."""
        where = f"{self.locate(query)}: " if self.locate is not None else ""
        return f"{where}{query.source}/{query.relation} fact {query.fact} (subject {shorten(query.subject)!r})"


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters for a message ('...' marks a cut)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
