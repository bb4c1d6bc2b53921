"""The one rank step of every run: a probe's answer over a task (``deer.probes.ProbeScores``) -> each query's gold
ranks, raw and filtered, its top candidates and the gold's score, by ``rank_chunk``'s rule
(``deer.platform.ranking``), the task's known answers filtering (``kg_data.task.KnownAnswers``).

Scores are ranked a chunk of same-set queries at a time; vectors are first made scores: a small set's cosines
(``DistinctVectors``: a prompt two candidates share is one vector, so they tie exactly), while a streamed set's (a KG's
entities, perhaps in a store on disk) are ranked by the streamed cosine (``rank_cosine``) and never made a matrix.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

import numpy as np

from deer.base.vectors import normalize_rows
from deer.platform.cosine_ranking import rank_cosine
from deer.platform.ranking import GoldRanks, Ranking, rank_rows
from kg_data.queries import FilterTails
from kg_data.task import KnownAnswers, Task

TOP_K = 10


@dataclasses.dataclass
class DistinctVectors:
    """A small candidate set's vectors, one per distinct prompt (``vectors``, normalised), and each candidate's row of
    them (``inverse``): a prompt that two candidates share is scored once, so they tie exactly."""

    vectors: np.ndarray
    inverse: np.ndarray

    def __len__(self) -> int:
        return len(self.inverse)


@dataclasses.dataclass
class TaskRanking:
    """Per query of a task (NaN, -1 or False where a query was not ranked): ``ranks``; ``top`` (n, k), positions in
    its set, best first, -1 past its end; ``head_above_gold``; ``gold_scores`` (NaN where ranked by the streamed
    cosine, which keeps no score); ``ranked``; ``where``: what ranked it (for the metadata)."""

    ranks: GoldRanks
    top: np.ndarray
    head_above_gold: np.ndarray
    gold_scores: np.ndarray
    ranked: np.ndarray
    where: str = "torch on cpu"
    seconds: float = 0.0

    @classmethod
    def empty(cls, n: int, k: int) -> TaskRanking:
        return cls(GoldRanks(*(np.full(n, np.nan) for _ in dataclasses.fields(GoldRanks))), np.full((n, k), -1, np.int64),
                   np.zeros(n, dtype=bool), np.full(n, np.nan), np.zeros(n, dtype=bool))

    def put(self, rows: np.ndarray, part: Ranking, gold_scores: np.ndarray | None = None) -> None:
        """The ranking of query ``rows`` (its top as wide as their set allows)."""
        for field in dataclasses.fields(GoldRanks):
            getattr(self.ranks, field.name)[rows] = getattr(part.ranks, field.name)
        self.top[np.ix_(rows, np.arange(part.top.shape[1]))] = part.top
        self.head_above_gold[rows] = part.head_above_gold
        if gold_scores is not None:
            self.gold_scores[rows] = gold_scores
        self.ranked[rows] = True


def rank_task(task: Task, scored, probe: str = "", k: int = TOP_K, device="cpu", show_progress: bool = False,
              chunk_rows: int | None = None) -> TaskRanking:
    """Rank every query ``scored`` (``probe``'s answer) covers: its scores, ``chunk_rows`` of a set at a time (None: as
    many as ``SCORE_BYTES_PER_CHUNK`` holds), or its vectors by cosine (on ``device``)."""
    started = time.perf_counter()
    ranking = TaskRanking.empty(len(task.queries), k)
    sets = task.rows_by_set()
    scores = scored.scores
    for given, shape in ((scores, "{query index: scores over its candidate set}"),
                         (getattr(scored, "candidate_vectors", None), "{candidate set name: its vectors}")):
        if given is not None and not isinstance(given, Mapping):  # a KG's score matrix was taken before 0.2
            raise TypeError(f"probe {probe!r} returned {type(given).__name__}; a probe returns {shape}")
    if scores is None:
        query_vectors = np.asarray(scored.query_vectors)
        scores = {}
        for name, vectors in scored.candidate_vectors.items():
            rows = np.asarray(sets.get(name, []), dtype=np.int64)
            if isinstance(vectors, DistinctVectors):
                scores.update(_cosine_rows(query_vectors, rows, vectors))
            elif len(rows):  # a streamed set's: never a score matrix of all its candidates
                known = _known(task, rows, len(vectors))
                ranking.put(rows, rank_cosine(query_vectors[rows], vectors, known, k=k, device=device, show_progress=show_progress))
                ranking.where = f"torch on {device}"
    for name, rows in sets.items():
        _rank_scores(task, name, [i for i in rows if i in scores], scores, ranking, k, probe, chunk_rows)
    ranking.seconds = time.perf_counter() - started
    return ranking


def _known(task: Task, rows: np.ndarray, n_candidates: int) -> KnownAnswers:
    """The known answers of query ``rows``: the task's, or (none known) their golds alone."""
    if task.known is not None:
        return task.known.take(rows)
    none = np.full(len(rows), -1, dtype=np.int64)
    gold = np.asarray([task.queries[i].gold for i in rows.tolist()], dtype=np.int64)
    return KnownAnswers(gold, FilterTails.of([()] * len(rows)), none, none, n_candidates)


def _cosine_rows(query_vectors: np.ndarray, rows: np.ndarray, vectors: DistinctVectors) -> dict[int, np.ndarray]:
    """{query: float64 cosines over its set}, each query's product with the set's distinct vectors taken alone."""
    normalised = normalize_rows(np.asarray(query_vectors[rows], dtype=np.float32))
    return {int(i): (vectors.vectors @ q)[vectors.inverse].astype(np.float64) for i, q in zip(rows.tolist(), normalised, strict=True)}


def _rank_scores(task: Task, name: str, rows: list[int], scores: dict, ranking: TaskRanking, k: int, probe: str,
                 chunk_rows: int | None) -> None:
    """Rank the scored queries of set ``name`` (``rank_rows``: a chunk of them at a time), keeping each gold's score; a
    row of another width than the set is refused."""
    width = len(task.candidate_sets[name])
    for i in rows:
        if len(scores[i]) != width:  # ranked so, the gold's rank would count the wrong candidates
            query = task.queries[i]
            raise ValueError(f"probe {probe!r}, query {i} ({task.describe(query)}): {len(scores[i])} scores for the {width} "
                             f"candidates of its set {name!r}; a probe scores each candidate once, in the set's order")
    if not rows:
        return
    rows = np.asarray(rows, dtype=np.int64)
    known = _known(task, rows, width)
    gold_scores = np.array([scores[i][g] for i, g in zip(rows.tolist(), known.gold.tolist(), strict=True)], dtype=np.float64)
    ranked = rank_rows(lambda at: np.stack([scores[i] for i in rows[at].tolist()]), len(rows), width, known, k, chunk_rows)
    ranking.put(rows, ranked, gold_scores)
