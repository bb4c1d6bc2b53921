"""Queries (h, r, ?) with their gold tail, candidate sets, and the known-true filter."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from kg_data.errors import KGSplitError, check_integer
from kg_data.kg import TextualKG


class FilterTails(Sequence):
    """Per query, the sorted candidate positions of its other known-true tails as two arrays (CSR:
    ``positions[offsets[i]:offsets[i + 1]]``), so millions of queries cost two arrays, not an array each.
    Read as a sequence of int64 arrays; a slice or an array of rows gives the filters of those queries."""

    def __init__(self, offsets: np.ndarray, positions: np.ndarray):
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.positions = np.asarray(positions, dtype=np.int64)
        if self.offsets.ndim != 1 or len(self.offsets) < 1 or self.offsets[0] != 0 or self.offsets[-1] != len(self.positions) \
                or np.any(np.diff(self.offsets) < 0):
            raise ValueError("filter offsets must start at 0, never decrease and end at the number of positions")

    @classmethod
    def of(cls, rows) -> FilterTails:
        """``rows`` (one array of candidate positions per query) as filters."""
        if isinstance(rows, FilterTails):
            return rows
        arrays = [np.asarray(row, dtype=np.int64).reshape(-1) for row in rows]
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        positions = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
        return cls(np.concatenate([[0], np.cumsum(lengths)]), positions)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            i = range(len(self))[index]  # a negative index, or an IndexError past the end
            return self.positions[self.offsets[i]:self.offsets[i + 1]]
        if isinstance(index, slice):  # the slice's rows only: a chunk costs its own size, not the whole set's
            return self.take(np.arange(*index.indices(len(self))))
        return self.take(np.arange(len(self))[index])

    def take(self, rows: np.ndarray) -> FilterTails:
        """The filters of query ``rows`` (int64 indices), in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        return FilterTails(np.concatenate([[0], np.cumsum(self.lengths(rows))]), self.positions[self.pair_indices(rows)])

    def lengths(self, rows: np.ndarray | None = None) -> np.ndarray:
        """int64: how many known-true other tails each query has (of ``rows`` only, where given)."""
        if rows is None:
            return np.diff(self.offsets)
        rows = np.asarray(rows, dtype=np.int64)
        return self.offsets[rows + 1] - self.offsets[rows]

    def pair_indices(self, rows: np.ndarray) -> np.ndarray:
        """Indices into ``positions`` of every filter position of ``rows``, query by query."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths(rows)
        firsts = np.repeat(self.offsets[rows] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        return firsts + np.arange(int(lengths.sum()), dtype=np.int64)

    def pairs(self, rows) -> tuple[np.ndarray, np.ndarray]:
        """(row within ``rows``, candidate position) of every known-true other tail of ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        return np.repeat(np.arange(len(rows)), self.lengths(rows)), self.positions[self.pair_indices(rows)]

    def remap(self, new_position: np.ndarray) -> FilterTails:
        """Each position ``p`` becomes ``new_position[p]`` (increasing over the kept ones), dropped where that is -1."""
        rows, positions = self.pairs(np.arange(len(self)))
        mapped = np.asarray(new_position, dtype=np.int64)[positions]
        kept = mapped >= 0
        return FilterTails(np.concatenate([[0], np.cumsum(np.bincount(rows[kept], minlength=len(self)))]), mapped[kept])

    def __eq__(self, other) -> bool:
        other = FilterTails.of(other)
        return np.array_equal(self.offsets, other.offsets) and np.array_equal(self.positions, other.positions)

    __hash__ = None

    def __repr__(self) -> str:
        return f"FilterTails({len(self)} queries, {len(self.positions)} known-true tails)"


@dataclasses.dataclass
class QuerySet:
    """The (head, relation, gold tail) ``triples`` to rank among ``candidates`` (sorted entity indices); ``gold``: each
    gold tail's position in ``candidates``; ``filter_tails``: the *other* known-true tails of (h, r) over all splits.
    ``exclude_head``: the query's own head is no candidate for it (off by default, as in the DEER paper)."""

    kg: TextualKG
    split: str
    triples: np.ndarray
    candidates: np.ndarray
    gold: np.ndarray
    filter_tails: FilterTails  # given as a list of arrays, held as FilterTails
    subset_seed: int | None = None
    exclude_head: bool = False

    def __post_init__(self):
        self.filter_tails = FilterTails.of(self.filter_tails)

    def __len__(self) -> int:
        return len(self.triples)

    def head_positions(self) -> np.ndarray:
        """int64 (n_queries,): each query's head entity's position among the candidates, -1 if it is none."""
        position = np.full(self.kg.n_entities, -1, dtype=np.int64)
        position[self.candidates] = np.arange(len(self.candidates))
        return position[self.triples[:, 0]]

    def excluded_positions(self) -> np.ndarray:
        """int64 (n_queries,): the candidate each query does not rank (its head, never its gold tail), -1 for none."""
        if not self.exclude_head:
            return np.full(len(self), -1, dtype=np.int64)
        heads = self.head_positions()
        return np.where(heads == self.gold, -1, heads)

    def item_ids(self) -> list[str]:
        """'head_id<TAB>relation_id<TAB>tail_id' per query: the key stores and tables use."""
        ids, relations = self.kg.entity_ids, self.kg.relation_ids
        return [f"{ids[h]}\t{relations[r]}\t{ids[t]}" for h, r, t in self.triples.tolist()]


def known_tails(kg: TextualKG) -> dict[tuple[int, int], set[int]]:
    """All tails t with (h, r, t) in any split, keyed by (h, r)."""
    tails: dict[tuple[int, int], set[int]] = defaultdict(set)
    for head, relation, tail in kg.all_triples().tolist():
        tails[(head, relation)].add(tail)
    return tails


def sample_subset(kg: TextualKG, split: str, n: int, seed: int) -> np.ndarray:
    """Row indices of n triples of ``split`` sampled without replacement (the paper's protocol)."""
    check_integer("subset", n, 1)
    triples = kg.triples(split)
    if n > len(triples):
        raise ValueError(f"subset {n} is larger than the {split} split ({len(triples)} triples)")
    return np.sort(np.random.default_rng(seed).choice(len(triples), size=n, replace=False))


def build_queries(kg: TextualKG, split: str = "test", subset: int | None = None, seed: int = 0,
                  exclude_head: bool = False) -> QuerySet:
    """Queries for every triple of ``split`` ranked among all entities, or for ``subset`` sampled with ``seed`` among
    the entities of its triples (as in the DEER paper).  A missing or empty split raises KGSplitError."""
    check_integer("seed", seed, 0)
    triples = kg.triples(split)
    if len(triples) == 0:
        where = kg.split_files.get(split) or f"KG '{kg.name}'"
        raise KGSplitError(f"{where}: the {split} split has no triples; nothing to probe")
    if subset is not None:
        triples = triples[sample_subset(kg, split, subset, seed)]
        candidates = np.unique(np.concatenate([triples[:, 0], triples[:, 2]]))
    else:
        candidates = np.arange(kg.n_entities, dtype=np.int64)
    queries = queries_for(kg, split, triples, candidates, seed if subset is not None else None)
    return dataclasses.replace(queries, exclude_head=bool(exclude_head))


def queries_for(kg: TextualKG, split: str, triples: np.ndarray, candidates: np.ndarray, subset_seed: int | None = None) -> QuerySet:
    """A QuerySet ranking ``triples`` among ``candidates`` (entity indices; must hold every gold tail)."""
    triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    candidates = np.unique(np.asarray(candidates, dtype=np.int64))
    position = np.full(kg.n_entities, -1, dtype=np.int64)
    position[candidates] = np.arange(len(candidates))
    if len(triples) and np.any(position[triples[:, 2]] < 0):
        raise ValueError("every gold tail must be among the candidates")
    return QuerySet(kg, split, triples, candidates, position[triples[:, 2]], other_true_tails(kg, triples, position), subset_seed)


def other_true_tails(kg: TextualKG, triples: np.ndarray, position: np.ndarray) -> FilterTails:
    """Per query (h, r, t): the sorted candidate positions (``position[entity]``) of the other tails of (h, r) in
    any split, from arrays for the pairs asked only: a KG of 20M triples costs a pass, not a dictionary."""
    width = max(kg.n_relations, 1)
    query_keys = triples[:, 0] * width + triples[:, 1]
    wanted = np.unique(query_keys)
    found = [split_triples[np.isin(split_triples[:, 0] * width + split_triples[:, 1], wanted)]
             for split_triples in kg.splits.values() if len(split_triples)]
    known = np.concatenate(found) if found else np.zeros((0, 3), np.int64)
    known_keys = known[:, 0] * width + known[:, 1]
    order = np.lexsort((known[:, 2], known_keys))
    known_keys, known_tail = known_keys[order], known[order, 2]
    distinct = np.ones(len(known_keys), dtype=bool)  # a triple in two splits (or twice) counts once
    distinct[1:] = (known_keys[1:] != known_keys[:-1]) | (known_tail[1:] != known_tail[:-1])
    known_keys, known_tail = known_keys[distinct], known_tail[distinct]
    starts = np.searchsorted(known_keys, query_keys, "left")
    counts = np.searchsorted(known_keys, query_keys, "right") - starts
    rows = np.repeat(np.arange(len(triples)), counts)  # every (query, known tail of its pair)
    firsts = np.concatenate([[0], np.cumsum(counts)])
    tails = position[known_tail[np.repeat(starts, counts) + np.arange(firsts[-1]) - firsts[rows]]]
    keep = (tails >= 0) & (tails != position[triples[rows, 2]])  # candidates only, the gold aside
    # Positions follow entity order (``position`` increases over the candidates), so each query's stay sorted.
    return FilterTails(np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=len(triples)))]), tails[keep])
