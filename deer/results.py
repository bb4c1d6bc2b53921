"""The per-query ranks table, metrics.json and metadata.json that every probe writes.

All probes of one output folder share one table: a row per query (head, relation, gold tail)
and, per probe, its raw and filtered gold ranks and its top-10 predictions.  A probe run into
a folder that already holds a table for the same queries adds its columns beside the others.

A folder holds runs of one :class:`deer.run_spec.RunSpec` (weights, tokenizer, dtype, KG,
queries, templates, BOS policy), stored in ``run_spec.json`` and in each probe's metadata; a
probe with another spec is refused, so ranks of different settings are never mixed or reused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from deer.metrics import grouped_metrics, random_baseline, rank_metrics
from deer.outputs import default_table_suffix, read_table, write_json, write_table
from deer.ranking import GoldRanks, candidate_counts
from deer.run_spec import RUN_SPEC_FILE, RunSpec, check_folder_spec, queries_fingerprint
from kg_data.queries import QuerySet

KEY_COLUMNS = ["head_id", "relation_id", "tail_id"]


def tail_token_lengths(tokenizer, names: Sequence[str]) -> np.ndarray:
    """Tokens in " name" (as the tail appears after the query), per name."""
    if tokenizer is None:
        return np.zeros(len(names), dtype=np.int64)
    encoded = tokenizer([" " + name for name in names], add_special_tokens=False)["input_ids"]
    return np.asarray([len(ids) for ids in encoded], dtype=np.int64)


def query_frame(queries: QuerySet, tokenizer=None) -> pd.DataFrame:
    kg = queries.kg
    heads, relations, tails = queries.triples.T
    tail_names = [kg.entity_names[t] for t in tails]
    return pd.DataFrame(
        {
            "query": np.arange(len(queries)),
            "head_id": [kg.entity_ids[h] for h in heads],
            "head": [kg.entity_names[h] for h in heads],
            "relation_id": [kg.relation_ids[r] for r in relations],
            "relation": [kg.relation_names[r] for r in relations],
            "tail_id": [kg.entity_ids[t] for t in tails],
            "tail": tail_names,
            "tail_tokens": tail_token_lengths(tokenizer, tail_names),
            "n_candidates": len(queries.candidates),
            "n_filtered": [len(f) for f in queries.filter_tails],
        }
    )


def run_metadata(probe: str, queries: QuerySet, loaded, templates) -> dict:
    """The part of metadata.json every KG probe shares: what was probed, with what, on which queries."""
    from deer.outputs import package_versions

    return {
        "probe": probe,
        "model": loaded.metadata(),
        "kg": queries.kg.summary(),
        "split": queries.split,
        "queries": len(queries),
        "candidates": int(len(queries.candidates)),
        "subset_seed": queries.subset_seed,
        "templates": templates.to_metadata(),
        "run_spec": RunSpec.build(queries, loaded, templates).to_dict(),
        "versions": package_versions(),
    }


def probe_metrics(queries: QuerySet, ranks: GoldRanks) -> dict:
    relations = [queries.kg.relation_names[r] for r in queries.triples[:, 1]]
    n = len(queries.candidates)
    return {
        "raw": rank_metrics(ranks.raw),
        "filtered": rank_metrics(ranks.filtered),
        "random_baseline": {
            "raw": random_baseline(candidate_counts(n, queries.filter_tails, filtered=False)),
            "filtered": random_baseline(candidate_counts(n, queries.filter_tails, filtered=True)),
        },
        "ties": {
            "queries_with_ties": int(np.sum(ranks.raw_pessimistic > ranks.raw_optimistic)),
            "mean_raw_optimistic": float(np.mean(ranks.raw_optimistic)) if len(ranks.raw) else None,
            "mean_raw_pessimistic": float(np.mean(ranks.raw_pessimistic)) if len(ranks.raw) else None,
        },
        "per_relation": {
            relation: {"raw": raw, "filtered": filtered}
            for (relation, raw), filtered in zip(
                grouped_metrics(ranks.raw, relations).items(), grouped_metrics(ranks.filtered, relations).values()
            )
        },
    }


def save_probe_results(
    out_dir: Path,
    probe: str,
    queries: QuerySet,
    ranks: GoldRanks,
    top_candidates: Optional[np.ndarray],
    metadata: dict,
    tokenizer=None,
    extra_columns: Optional[dict] = None,
    spec: Optional[RunSpec] = None,
) -> dict:
    """Write/merge the ranks table, metrics.json and metadata.json; return this probe's metrics.

    ``top_candidates``: (n_queries, k) positions into ``queries.candidates``, best first.
    ``spec``: the run's spec; default ``metadata["run_spec"]`` (which :func:`run_metadata` puts
    there).  A folder whose ``run_spec.json`` holds another spec is refused with a ValueError
    naming the fields that differ; a new folder gets this spec.
    """
    spec = _spec_of(spec, metadata, queries)
    metadata = {**metadata, "run_spec": spec.to_dict()}
    out_dir = Path(out_dir)
    check_folder_spec(out_dir, spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = _existing_table(out_dir, queries)
    if not (out_dir / RUN_SPEC_FILE).exists():
        spec.write(out_dir)
    if table is None:
        table = query_frame(queries, tokenizer)
    table[f"{probe}_rank_raw"] = ranks.raw
    table[f"{probe}_rank_filtered"] = ranks.filtered
    if top_candidates is not None:
        names = queries.kg.entity_names
        table[f"{probe}_top10"] = [
            " | ".join(names[queries.candidates[c]] for c in row[:10]) for row in np.asarray(top_candidates)
        ]
    for column, values in (extra_columns or {}).items():
        table[column] = values
    for old in out_dir.glob("ranks.*"):
        if old.suffix != default_table_suffix():
            old.unlink()
    write_table(out_dir / f"ranks{default_table_suffix()}", table)
    metrics = probe_metrics(queries, ranks)
    _merge_json(out_dir / "metrics.json", probe, metrics)
    _merge_json(out_dir / "metadata.json", probe, metadata)
    return metrics


def _spec_of(spec, metadata: dict, queries: QuerySet) -> RunSpec:
    if spec is None:
        spec = metadata.get("run_spec")
    if spec is None:
        raise ValueError("save_probe_results needs the run's spec: pass spec=RunSpec.build(queries, loaded, templates) "
                         "or metadata from run_metadata()")
    spec = spec if isinstance(spec, RunSpec) else RunSpec.from_dict(spec)
    if spec.queries != queries_fingerprint(queries):
        raise ValueError("the run spec describes other queries than the ones ranked; build it from these queries")
    return spec


def find_ranks_table(out_dir: Path) -> Optional[Path]:
    for suffix in (".parquet", ".csv"):
        if (Path(out_dir) / f"ranks{suffix}").exists():
            return Path(out_dir) / f"ranks{suffix}"
    return None


def _existing_table(out_dir: Path, queries: QuerySet) -> Optional[pd.DataFrame]:
    """The folder's table if it holds exactly these queries (same order); else None."""
    path = find_ranks_table(out_dir)
    if path is None:
        return None
    table = read_table(path)
    fresh = query_frame(queries)
    if len(table) != len(fresh) or any(
        table[c].astype(str).tolist() != fresh[c].astype(str).tolist() for c in KEY_COLUMNS
    ):
        raise ValueError(
            f"{path} holds ranks for different queries; use another --out folder "
            "(or the same --kg/--split/--subset/--seed as the run that wrote it)"
        )
    return table


def _merge_json(path: Path, probe: str, payload: dict) -> None:
    import json

    merged = json.loads(path.read_text()) if path.exists() else {}
    merged[probe] = payload
    write_json(path, merged)
