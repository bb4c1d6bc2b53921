"""What a KG run's gold ranks become: the ranks table's query columns, the metadata every KG probe shares and the
metrics, as a one-probe :class:`~deer.platform.result.RunResult`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pandas as pd

from deer.backends.boundary import split_statements
from deer.base.files import package_versions
from deer.platform.metrics import adjusted_index, observed_rank_metrics, random_baseline
from deer.platform.ranking import GoldRanks, candidate_counts
from deer.platform.result import RunResult
from deer.platform.run_spec import RunSpec, queries_fingerprint
from kg_data.queries import QuerySet

TOP_K = 10
# The metadata's word for how tail_tokens counts (token-bias refuses a run counted otherwise).
TAIL_TOKEN_RULE = "' name' after the query's comma, as the statement splits (split_statements)"


def tail_token_lengths(tokenizer, names: Sequence[str]) -> np.ndarray:
    """Tokens of " name" per name, by ``TAIL_TOKEN_RULE`` (SentencePiece's "▁dog", not a lone "▁" more)."""
    if tokenizer is None:
        return np.zeros(len(names), dtype=np.int64)
    encoded = split_statements(tokenizer, ",", [" " + name for name in names]).continuation_ids
    return np.asarray([len(ids) for ids in encoded], dtype=np.int64)


def relation_labels(kg) -> list[str]:
    """Each relation's label: its name, or "name (id)" where another relation has the same name, or a name that reads
    as its label ("likes (r1)" beside two named "likes"): their queries are never pooled into one block."""
    pairs = list(zip(kg.relation_ids, kg.relation_names, strict=True))
    shared = Counter(kg.relation_names)
    labels = [name if shared[name] == 1 else f"{name} ({relation_id})" for relation_id, name in pairs]
    taken = Counter(labels)
    return [label if taken[label] == 1 else f"{name} ({relation_id})"
            for label, (relation_id, name) in zip(labels, pairs, strict=True)]


def ranked_among(queries: QuerySet, filtered: bool) -> np.ndarray:
    """Candidates each query's gold tail is ranked among, raw or filtered (its head left out with ``exclude_head``)."""
    excluded = queries.excluded_positions()
    return candidate_counts(len(queries.candidates), queries.filter_tails, filtered=filtered, excluded=excluded)


def query_frame(queries: QuerySet, tokenizer=None) -> pd.DataFrame:
    """The query columns of a ranks table."""
    kg = queries.kg
    heads, relations, tails = queries.triples.T
    tail_names = [kg.entity_names[t] for t in tails]
    labels = relation_labels(kg)
    # counted as the ranks and the random baseline count them: an excluded head is no candidate, nor a filtered one
    raw = ranked_among(queries, filtered=False)
    return pd.DataFrame({
        "query": np.arange(len(queries)),
        "head_id": [kg.entity_ids[h] for h in heads],
        "head": [kg.entity_names[h] for h in heads],
        "relation_id": [kg.relation_ids[r] for r in relations],
        "relation": [labels[r] for r in relations],
        "tail_id": [kg.entity_ids[t] for t in tails],
        "tail": tail_names,
        "tail_tokens": tail_token_lengths(tokenizer, tail_names),
        "n_candidates": raw.astype(np.int64),
        "n_filtered": (raw - ranked_among(queries, filtered=True)).astype(np.int64),
    })


def run_metadata(probe: str, queries: QuerySet, loaded, templates) -> dict:
    """The part of metadata.json every KG probe shares: what was probed, with what, on which queries."""
    return {
        "probe": probe, "model": loaded.metadata(), "kg": queries.kg.summary(), "split": queries.split,
        "queries": len(queries), "candidates": int(len(queries.candidates)), "subset_seed": queries.subset_seed,
        "exclude_head": bool(queries.exclude_head), "templates": templates.to_metadata(),
        "run_spec": RunSpec.build(queries, loaded, templates).to_dict(), "tail_token_rule": TAIL_TOKEN_RULE,
        "versions": package_versions(),
    }


def head_metrics(queries: QuerySet, head_above_gold: np.ndarray | None) -> dict:
    """How often the query's own head entity outranks the gold tail (its name is in the query)."""
    heads = queries.head_positions()
    with_head = int(np.sum((heads >= 0) & (heads != queries.gold)))
    above = None if head_above_gold is None else int(np.sum(head_above_gold))
    return {"excluded": bool(queries.exclude_head), "queries_with_head_candidate": with_head, "head_above_gold": above,
            "head_above_gold_fraction": above / len(queries) if above is not None and len(queries) else None}


def probe_metrics(queries: QuerySet, ranks: GoldRanks, head_above_gold: np.ndarray | None = None) -> dict:
    labels = relation_labels(queries.kg)
    relations = [labels[r] for r in queries.triples[:, 1]]
    observed = observed_rank_metrics(ranks.raw, ranks.filtered, relations)
    per_relation = observed.pop("per_relation")
    baseline = {rank_type: random_baseline(ranked_among(queries, filtered=rank_type == "filtered")) for rank_type in observed}
    return {
        **observed,
        "random_baseline": baseline,
        "adjusted_index": {rank_type: adjusted_index(observed[rank_type], baseline[rank_type]) for rank_type in observed},
        "head": head_metrics(queries, head_above_gold),
        "ties": {
            "queries_with_ties": int(np.sum(ranks.raw_pessimistic > ranks.raw_optimistic)),
            "mean_raw_optimistic": float(np.mean(ranks.raw_optimistic)) if len(ranks.raw) else None,
            "mean_raw_pessimistic": float(np.mean(ranks.raw_pessimistic)) if len(ranks.raw) else None,
        },
        "per_relation": per_relation,
    }


def kg_result(probe: str, queries: QuerySet, ranks: GoldRanks, top_candidates: np.ndarray | None, metadata: dict,
              tokenizer=None, arrays: dict | None = None, head_above_gold: np.ndarray | None = None) -> RunResult:
    """A KG probe's result from its gold ranks; ``metadata`` must hold these queries' ``run_spec``."""
    spec = RunSpec.from_dict(metadata["run_spec"])
    if spec.queries != queries_fingerprint(queries):
        raise ValueError("the run spec describes other queries than the ones ranked; build it from these queries")
    table = query_frame(queries, tokenizer)
    table[f"{probe}_rank_raw"] = ranks.raw
    table[f"{probe}_rank_filtered"] = ranks.filtered
    if top_candidates is not None:
        names = queries.kg.entity_names
        table[f"{probe}_top10"] = [" | ".join(names[queries.candidates[c]] for c in row[:TOP_K] if c >= 0)
                                   for row in np.asarray(top_candidates)]
    return RunResult.of_probe(probe, table, probe_metrics(queries, ranks, head_above_gold), metadata, spec=spec,
                              queries=queries, arrays=arrays)
