"""The result types (:class:`ProbeResult`, :class:`ClozeResult`) and the run folders they are saved in.

A KG run folder holds ``ranks.parquet|csv`` (the query columns, then every probe's rank and top-10
columns), ``metrics.json`` and ``metadata.json`` keyed by probe, and ``run_spec.json``; a result of
another spec is refused.  The BEAR data-set score saves ``instances.parquet|csv`` and ``summary.md``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from deer.base.files import (
    default_table_suffix,
    folder_lock,
    json_default,
    package_versions,
    write_json,
    write_table,
    write_text,
)
from deer.platform.metrics import adjusted_index, grouped_metrics, random_baseline, rank_metrics
from deer.platform.ranking import GoldRanks, candidate_counts
from deer.platform.read_back import StoredFileError, read_json_object, read_stored_table
from deer.platform.run_spec import RUN_SPEC_FILE, RunSpec, check_folder_spec, queries_fingerprint
from kg_data.queries import QuerySet

KEY_COLUMNS = ["head_id", "relation_id", "tail_id"]
RANKS_TABLE = "ranks"
INSTANCES_TABLE = "instances"
TOP_K = 10


class Metrics(Mapping):
    """A probe's metrics: the nested dict of ``metrics.json``, read by name: ``metrics["hit@10"]`` from the
    default block (``filtered``, ``overall``), or by path: ``metrics["random_baseline/filtered/mrr"]``."""

    def __init__(self, tree: dict, default: str | None = None):
        # Held as metrics.json holds it, so a saved and reloaded result reads like the one in memory.
        self._tree = json.loads(json.dumps(tree, default=json_default))
        self.default = default

    def __getitem__(self, key: str) -> Any:
        if "/" not in key and self.default and isinstance(self._tree.get(self.default), dict) and key in self._tree[self.default]:
            return self._tree[self.default][key]
        node: Any = self._tree
        for part in key.split("/"):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(f"no metric '{key}'; names look like {', '.join(list(self)[:6])}, ...")
            node = node[part]
        return node

    def __iter__(self) -> Iterator[str]:
        return iter(self.flat())

    def __len__(self) -> int:
        return len(self.flat())

    def __repr__(self) -> str:
        shown = {k: self[k] for k in ("n", "hit@1", "hit@10", "mrr", "mr", "accuracy_mean") if k in self}
        return f"Metrics({shown})"

    def flat(self) -> dict[str, Any]:
        """``{"filtered/hit@10": 0.11, ...}``: every leaf value by its path."""
        values: dict[str, Any] = {}

        def walk(node: dict, prefix: str) -> None:
            for name, value in node.items():
                if isinstance(value, dict):
                    walk(value, f"{prefix}{name}/")
                else:
                    values[f"{prefix}{name}"] = value

        walk(self._tree, "")
        return values

    def to_dict(self) -> dict:
        return self._tree

    def to_frame(self) -> pd.DataFrame:
        """One row per block of values (``raw``, ``random_baseline/filtered``, ...), one column per metric."""
        rows: dict[str, dict] = {}
        for path, value in self.flat().items():
            block, _, name = path.rpartition("/")
            rows.setdefault(block or "(top)", {})[name] = value
        return pd.DataFrame.from_dict(rows, orient="index")


@dataclasses.dataclass
class ProbeResult:
    """What a probe produced (written by :meth:`save` only): for KG probes a row per query and the run
    ``spec``; for the BEAR data set a row per (instance, template).  ``queries``, ``arrays``: in memory only."""

    probe: str
    table: pd.DataFrame
    metrics: Metrics
    metadata: dict
    spec: RunSpec | None = None
    summary: str | None = None  # markdown, saved as summary.md
    queries: QuerySet | None = dataclasses.field(default=None, repr=False)
    arrays: dict = dataclasses.field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        rows = "queries" if self.is_kg else "rows"
        model = self.metadata.get("model", {}).get("name") if isinstance(self.metadata.get("model"), dict) else None
        return f"ProbeResult(probe={self.probe!r}, model={model!r}, {len(self.table)} {rows}, {self.metrics!r})"

    @property
    def is_kg(self) -> bool:
        return self.spec is not None

    def ranks(self, rank_type: str = "filtered") -> np.ndarray:
        """Gold ranks (1 = best) per query, float64 (realistic ranks may be halves)."""
        if rank_type not in ("filtered", "raw"):
            raise ValueError("rank_type must be 'filtered' or 'raw'")
        return self.table[f"{self.probe}_rank_{rank_type}"].to_numpy(dtype=np.float64)

    def top_predictions(self) -> pd.Series:
        """Per query, the names of the top-10 candidates, best first."""
        return self.table[f"{self.probe}_top10"].str.split(" | ", regex=False)

    def save(self, folder: str | Path) -> Path:
        """Write into ``folder`` (created): KG probes add their columns to the folder's ranks table
        beside other probes of the same run spec; another spec's folder is refused (ValueError)."""
        folder = Path(folder)
        (_save_kg_result if self.is_kg else _save_instances_result)(self, folder)
        return folder

    @classmethod
    def load(cls, folder: str | Path, probe: str | None = None) -> ProbeResult:
        """Read one probe's result from a run folder (``probe`` may be left out when it holds one)."""
        results = load_results(folder)
        if probe is None:
            if len(results) != 1:
                raise ValueError(f"{folder} holds results of {', '.join(results)}; say which with probe=...")
            return next(iter(results.values()))
        if probe not in results:
            raise ValueError(f"{folder} holds no {probe} result (it has: {', '.join(results) or 'none'})")
        return results[probe]


@dataclasses.dataclass
class ClozeResult:
    """Probes side by side on a cloze benchmark: one row per query (``deer.platform.benchmark_rows``), the
    metrics of that table (``deer.platform.metrics.cloze_metrics``) and the metadata."""

    table: pd.DataFrame
    metadata: dict
    metrics: dict = dataclasses.field(default_factory=dict)

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        write_table(folder / "queries.parquet", self.table)  # the atomic writer creates the folder
        write_json(folder / "metrics.json", self.metrics)
        write_json(folder / "metadata.json", self.metadata)
        return folder


def join_results(results: Sequence[ProbeResult]) -> pd.DataFrame:
    """One table with every result's rank columns beside the shared query columns (KG results of one run spec)."""
    results = list(results)
    if not results:
        raise ValueError("nothing to join")
    first = results[0]
    for result in results:
        if not result.is_kg:
            raise ValueError(f"the {result.probe} result is not a KG result (it has no per-query ranks)")
        if result.spec.differences(first.spec):
            raise ValueError("cannot join results of different run specs: "
                             + first.spec.describe_differences(result.spec, (first.probe, result.probe)))
    table = first.table[_query_columns(first.table)].copy()
    for result in results:
        table = _with_probe_columns(table, result)
    return table


def load_results(folder: str | Path) -> dict[str, ProbeResult]:
    """Every probe's result in a run folder, by probe name.  A file there that is unreadable or lacks what
    the result needs is refused with a ValueError naming it (``deer.platform.read_back``)."""
    folder = Path(folder)
    metrics = _probe_entries(folder / "metrics.json")
    metadata = _probe_entries(folder / "metadata.json")
    ranks = find_table(folder, RANKS_TABLE)
    if ranks is not None:
        table = read_ranks_table(ranks)
        spec = RunSpec.read(folder)
        results = {}
        for probe in _probes_in(table):
            recorded = metadata.get(probe, {}).get("run_spec")
            if spec is None and not isinstance(recorded, dict):
                raise StoredFileError(folder / "metadata.json", f"records no run spec for {probe} (and there is no {RUN_SPEC_FILE})")
            results[probe] = ProbeResult(probe, table[_query_columns(table) + _probe_columns(table, probe)],
                                         Metrics(metrics.get(probe, {}), "filtered"), metadata.get(probe, {}),
                                         spec or RunSpec.from_dict(recorded))
        return results
    instances = find_table(folder, INSTANCES_TABLE)
    if instances is not None:
        summary = folder / "summary.md"
        return {
            probe: ProbeResult(probe, read_stored_table(instances), Metrics(metrics[probe], "overall"), metadata.get(probe, {}),
                               summary=summary.read_text() if summary.exists() else None)
            for probe in metrics
        }
    raise ValueError(f"{folder} holds no probe result (no ranks.parquet/csv or instances.parquet/csv)")


def read_ranks_table(path: Path) -> pd.DataFrame:
    """A run folder's ranks table: readable, with the query ids and, for every probe in it, numeric raw and
    filtered rank columns (a ValueError naming the file otherwise)."""
    table = read_stored_table(path, KEY_COLUMNS)
    for probe in _probes_in(table):
        for column in (f"{probe}_rank_raw", f"{probe}_rank_filtered"):
            if column not in table.columns or not pd.api.types.is_numeric_dtype(table[column]):
                raise StoredFileError(path, f"has no numeric {column} column")
    return table


def _probe_entries(path: Path) -> dict[str, dict]:
    """metrics.json or metadata.json of a run folder: an object holding an object per probe ({} if absent)."""
    stored = _read_json(path)
    odd = [probe for probe, entry in stored.items() if not isinstance(entry, dict)]
    if odd:
        raise StoredFileError(path, f"its entry for {odd[0]} is not a JSON object")
    return stored


def tail_token_lengths(tokenizer, names: Sequence[str]) -> np.ndarray:
    """Tokens in " name" (as the tail appears after the query), per name."""
    if tokenizer is None:
        return np.zeros(len(names), dtype=np.int64)
    encoded = tokenizer([" " + name for name in names], add_special_tokens=False)["input_ids"]
    return np.asarray([len(ids) for ids in encoded], dtype=np.int64)


def query_frame(queries: QuerySet, tokenizer=None) -> pd.DataFrame:
    """The query columns of a ranks table: ids, names, tail token length, candidate counts."""
    kg = queries.kg
    heads, relations, tails = queries.triples.T
    tail_names = [kg.entity_names[t] for t in tails]
    return pd.DataFrame({
        "query": np.arange(len(queries)),
        "head_id": [kg.entity_ids[h] for h in heads],
        "head": [kg.entity_names[h] for h in heads],
        "relation_id": [kg.relation_ids[r] for r in relations],
        "relation": [kg.relation_names[r] for r in relations],
        "tail_id": [kg.entity_ids[t] for t in tails],
        "tail": tail_names,
        "tail_tokens": tail_token_lengths(tokenizer, tail_names),
        "n_candidates": len(queries.candidates),
        "n_filtered": queries.filter_tails.lengths(),
    })


def run_metadata(probe: str, queries: QuerySet, loaded, templates) -> dict:
    """The part of metadata.json every KG probe shares: what was probed, with what, on which queries."""
    return {
        "probe": probe, "model": loaded.metadata(), "kg": queries.kg.summary(), "split": queries.split,
        "queries": len(queries), "candidates": int(len(queries.candidates)), "subset_seed": queries.subset_seed,
        "exclude_head": bool(queries.exclude_head), "templates": templates.to_metadata(),
        "run_spec": RunSpec.build(queries, loaded, templates).to_dict(),
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
    relations = [queries.kg.relation_names[r] for r in queries.triples[:, 1]]
    raw_by_relation, filtered_by_relation = grouped_metrics(ranks.raw, relations), grouped_metrics(ranks.filtered, relations)
    n = len(queries.candidates)
    excluded = queries.excluded_positions()
    observed = {"raw": rank_metrics(ranks.raw), "filtered": rank_metrics(ranks.filtered)}
    baseline = {rank_type: random_baseline(candidate_counts(n, queries.filter_tails, filtered=rank_type == "filtered",
                                                            excluded=excluded)) for rank_type in observed}
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
        "per_relation": {relation: {"raw": raw, "filtered": filtered_by_relation[relation]}
                         for relation, raw in raw_by_relation.items()},
    }


def kg_result(probe: str, queries: QuerySet, ranks: GoldRanks, top_candidates: np.ndarray | None, metadata: dict,
              tokenizer=None, arrays: dict | None = None, head_above_gold: np.ndarray | None = None) -> ProbeResult:
    """A KG probe's result from its gold ranks; ``top_candidates``: (n_queries, k) positions into
    ``queries.candidates``; ``metadata`` must hold the ``run_spec`` of these queries (:func:`run_metadata`)."""
    spec = RunSpec.from_dict(metadata["run_spec"])
    if spec.queries != queries_fingerprint(queries):
        raise ValueError("the run spec describes other queries than the ones ranked; build it from these queries")
    table = query_frame(queries, tokenizer)
    table[f"{probe}_rank_raw"] = ranks.raw
    table[f"{probe}_rank_filtered"] = ranks.filtered
    if top_candidates is not None:
        names = queries.kg.entity_names
        table[f"{probe}_top10"] = [
            " | ".join(names[queries.candidates[c]] for c in row[:TOP_K]) for row in np.asarray(top_candidates)
        ]
    return ProbeResult(probe, table, Metrics(probe_metrics(queries, ranks, head_above_gold), "filtered"), metadata, spec,
                       queries=queries, arrays=dict(arrays or {}))


def find_table(folder: Path, name: str) -> Path | None:
    paths = (Path(folder) / f"{name}{suffix}" for suffix in (".parquet", ".csv"))
    return next((path for path in paths if path.exists()), None)


def find_ranks_table(folder: Path) -> Path | None:
    return find_table(folder, RANKS_TABLE)


def _probes_in(table: pd.DataFrame) -> list[str]:
    """Probes with rank columns in a ranks table, in column order."""
    return [c[: -len("_rank_raw")] for c in table.columns if c.endswith("_rank_raw")]


def _query_columns(table: pd.DataFrame) -> list[str]:
    """The columns every probe of a folder shares (everything that is not a probe's)."""
    owned = {c for p in _probes_in(table) for c in _probe_columns(table, p)}
    return [c for c in table.columns if c not in owned]


def _with_probe_columns(table: pd.DataFrame, result: ProbeResult) -> pd.DataFrame:
    """``table`` (the same queries, in order) with ``result``'s rank and top-10 columns set."""
    for column in _probe_columns(result.table, result.probe):
        table[column] = result.table[column].to_numpy()
    return table


def _probe_columns(table: pd.DataFrame, probe: str) -> list[str]:
    return [c for c in table.columns if c in {f"{probe}_rank_raw", f"{probe}_rank_filtered", f"{probe}_top10"}]


def _save_kg_result(result: ProbeResult, folder: Path) -> None:
    metadata = {**result.metadata, "run_spec": result.spec.to_dict()}
    # Everything (spec check included) read under the lock, so two probes saving at once both end up in it.
    with folder_lock(folder):
        check_folder_spec(folder, result.spec)
        table = _with_probe_columns(_base_table(folder, result.table), result)
        if not (folder / RUN_SPEC_FILE).exists():
            result.spec.write(folder)
        for old in folder.glob(f"{RANKS_TABLE}.*"):
            if old.suffix != default_table_suffix():
                old.unlink()
        write_table(folder / f"{RANKS_TABLE}{default_table_suffix()}", table)
        _merge_json(folder / "metrics.json", result.probe, result.metrics.to_dict())
        _merge_json(folder / "metadata.json", result.probe, metadata)


def _base_table(folder: Path, fresh: pd.DataFrame) -> pd.DataFrame:
    """The folder's table if it holds exactly these queries (same order), else ``fresh``'s query columns."""
    path = find_ranks_table(folder)
    if path is None:
        return fresh[_query_columns(fresh)].copy()
    table = read_ranks_table(path)
    if len(table) != len(fresh) or any(table[c].astype(str).tolist() != fresh[c].astype(str).tolist() for c in KEY_COLUMNS):
        raise ValueError(
            f"{path} holds ranks for different queries; use another --out folder "
            "(or the same --kg/--split/--subset/--seed as the run that wrote it)"
        )
    return table


def instances_folder_conflict(folder: Path, probe: str, kind: str, block: str | None) -> str | None:
    """Why ``folder`` holds another kind of run than an instances result (None if it does not): its
    metrics.json and metadata.json may hold only ``probe`` (of ``kind``, with a ``block`` of metrics)."""
    for name in (f"{RANKS_TABLE}.parquet", f"{RANKS_TABLE}.csv", RUN_SPEC_FILE):
        if (folder / name).exists():
            return f"a KG probe run ({name})"
    for name in ("metadata.json", "metrics.json"):
        path = folder / name
        if not path.exists():
            continue
        try:
            stored = read_json_object(path)
        except StoredFileError as error:
            return f"a {name} that is not a readable JSON object ({error})"
        if name == "metadata.json":
            other = {k: v.get("probe") if isinstance(v, dict) else None for k, v in stored.items()}
            other = {k: p for k, p in other.items() if p != kind}
        else:
            other = {k: None for k, v in stored.items() if k != probe or not isinstance(v, dict) or (block and block not in v)}
        if other:
            what = ", ".join(f"{k} (probe {p})" if p else k for k, p in other.items())
            return f"a {name} of other probe runs: {what}"
    return None


def check_instances_folder(folder: Path, probe: str, kind: str, block: str | None, label: str | None = None) -> None:
    """Refuse a folder holding another kind of run, whose metrics.json/metadata.json saving would
    overwrite; ``label`` names this run in the message (default: 'a KIND run')."""
    conflict = instances_folder_conflict(Path(folder), probe, kind, block)
    if conflict:
        raise ValueError(f"{folder} already holds {conflict}; {label or f'a {kind} run'} writes its own metrics.json and "
                         "metadata.json there and would overwrite that run's. Use another --out folder.")


def _save_instances_result(result: ProbeResult, folder: Path) -> None:
    with folder_lock(folder):  # the folder's check and writes, one saving process at a time
        check_instances_folder(folder, result.probe, result.metadata.get("probe", result.probe), result.metrics.default)
        write_table(folder / f"{INSTANCES_TABLE}{default_table_suffix()}", result.table)
        write_json(folder / "metrics.json", {result.probe: result.metrics.to_dict()})
        if result.summary is not None:
            write_text(folder / "summary.md", result.summary)
        write_json(folder / "metadata.json", {result.probe: result.metadata})


def _read_json(path: Path) -> dict:
    return read_json_object(path) if path.exists() else {}


def _merge_json(path: Path, probe: str, payload: dict) -> None:
    write_json(path, {**_read_json(path), probe: payload})
