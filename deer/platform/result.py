"""The result types, one per shape -- a probe's per-query ranks (:class:`ProbeResult`, with the run
folder it is saved in) and a benchmark's rows with several probes side by side (:class:`ClozeResult`).

A KG probe (DEER, BEAR, LAMA) gives a rank of the gold tail for every query; its result holds
the per-query table (query columns, then ``{probe}_rank_raw``, ``{probe}_rank_filtered`` and
``{probe}_top10``), its :class:`Metrics`, its metadata and the :class:`~deer.platform.run_spec.RunSpec`
it ran under.  Results of several probes under one spec join into one table
(:func:`join_results`), and a run folder holds exactly that: ``ranks.parquet|csv`` (every probe's
columns beside each other), ``metrics.json`` and ``metadata.json`` keyed by probe, and
``run_spec.json``.  A result with another spec is refused, so ranks of different settings are
never mixed or reused.

The BEAR data-set score gives one row per (instance, template) instead; its result is saved as
``instances.parquet|csv``, ``metrics.json``, ``metadata.json`` and ``summary.md``.  A cloze
benchmark run (:class:`ClozeResult`) holds several probes' columns of those rows side by side.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from deer.platform.files import (
    default_table_suffix,
    folder_lock,
    json_default,
    package_versions,
    read_table,
    write_json,
    write_table,
    write_text,
)
from deer.platform.metrics import adjusted_index, grouped_metrics, random_baseline, rank_metrics
from deer.platform.ranking import GoldRanks, candidate_counts
from deer.platform.run_spec import RUN_SPEC_FILE, RunSpec, check_folder_spec, queries_fingerprint
from kg_data.queries import QuerySet

KEY_COLUMNS = ["head_id", "relation_id", "tail_id"]
RANKS_TABLE = "ranks"
INSTANCES_TABLE = "instances"
TOP_K = 10


class Metrics(Mapping):
    """A probe's metrics: the nested dict of ``metrics.json``, read by name.

    ``metrics["hit@10"]`` reads the default block (``filtered`` for KG probes, ``overall`` for
    the BEAR data set); a path names any value: ``metrics["raw/hit@10"]``,
    ``metrics["random_baseline/filtered/mrr"]``, ``metrics["adjusted_index/filtered/mrr"]`` (chance-adjusted:
    0 = random, 1 = perfect), ``metrics["per_relation/hypernym/filtered/mrr"]``.
    Iterating gives every value's path; :meth:`to_dict` the nested dict; :meth:`to_frame` a table.
    """

    def __init__(self, tree: dict, default: str | None = None):
        # Held as metrics.json holds it (string keys, plain numbers), so a saved and reloaded
        # result reads exactly like the one in memory.
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
        """One row per block of values (``raw``, ``filtered``, ``random_baseline/filtered``,
        ``per_relation/NAME/filtered``, ...), one column per metric."""
        rows: dict[str, dict] = {}
        for path, value in self.flat().items():
            block, _, name = path.rpartition("/")
            rows.setdefault(block or "(top)", {})[name] = value
        return pd.DataFrame.from_dict(rows, orient="index")


@dataclasses.dataclass
class ProbeResult:
    """What a probe produced.  Nothing is written until :meth:`save`.

    ``table``: KG probes: one row per query (:func:`query_frame` columns and this probe's
    ``{probe}_rank_raw|filtered``, ``{probe}_top10``); the BEAR data set: one row per
    (instance, template).  ``spec``: the run spec (KG probes; None for the data set).
    ``queries``: the QuerySet that was ranked (in memory only).  ``arrays``: large outputs kept in
    memory only, e.g. DEER's ``query_embeddings`` and ``entity_embeddings``.
    """

    probe: str
    table: pd.DataFrame
    metrics: Metrics
    metadata: dict
    spec: RunSpec | None = None
    summary: str | None = None  # markdown, saved as summary.md
    queries: QuerySet | None = dataclasses.field(default=None, repr=False)
    arrays: dict = dataclasses.field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        """One line (the dataclass repr printed the whole table and metadata: ~10 kB in a notebook)."""
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
        if self.is_kg:
            _save_kg_result(self, folder)
        else:
            _save_instances_result(self, folder)
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
    """Probes side by side on a cloze benchmark: one row per query (``deer.platform.benchmark_rows``)."""

    table: pd.DataFrame
    metadata: dict

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_table(folder / "queries.parquet", self.table)
        write_json(folder / "metadata.json", self.metadata)
        return folder


def join_results(results: Sequence[ProbeResult]) -> pd.DataFrame:
    """One table with every result's rank columns beside the shared query columns.

    All results must be KG results with the same run spec (same model, KG, queries, templates).
    """
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
    """Every probe's result in a run folder, by probe name."""
    folder = Path(folder)
    metrics = _read_json(folder / "metrics.json")
    metadata = _read_json(folder / "metadata.json")
    ranks = find_table(folder, RANKS_TABLE)
    if ranks is not None:
        table = read_table(ranks)
        spec = RunSpec.read(folder)
        return {
            probe: ProbeResult(probe, table[_query_columns(table) + _probe_columns(table, probe)],
                               Metrics(metrics.get(probe, {}), "filtered"), metadata.get(probe, {}),
                               spec or RunSpec.from_dict(metadata[probe]["run_spec"]))
            for probe in _probes_in(table)
        }
    instances = find_table(folder, INSTANCES_TABLE)
    if instances is not None:
        summary = folder / "summary.md"
        return {
            probe: ProbeResult(probe, read_table(instances), Metrics(metrics[probe], "overall"), metadata.get(probe, {}),
                               summary=summary.read_text() if summary.exists() else None)
            for probe in metrics
        }
    raise ValueError(f"{folder} holds no probe result (no ranks.parquet/csv or instances.parquet/csv)")


# -- building KG results --------------------------------------------------------------------------


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
    return {
        "probe": probe,
        "model": loaded.metadata(),
        "kg": queries.kg.summary(),
        "split": queries.split,
        "queries": len(queries),
        "candidates": int(len(queries.candidates)),
        "subset_seed": queries.subset_seed,
        "exclude_head": bool(queries.exclude_head),
        "templates": templates.to_metadata(),
        "run_spec": RunSpec.build(queries, loaded, templates).to_dict(),
        "versions": package_versions(),
    }


def head_metrics(queries: QuerySet, head_above_gold: np.ndarray | None) -> dict:
    """How often the query's own head entity outranks the gold tail (its name is in the query)."""
    heads = queries.head_positions()
    with_head = int(np.sum((heads >= 0) & (heads != queries.gold)))
    above = None if head_above_gold is None else int(np.sum(head_above_gold))
    return {
        "excluded": bool(queries.exclude_head),
        "queries_with_head_candidate": with_head,
        "head_above_gold": above,
        "head_above_gold_fraction": above / len(queries) if above is not None and len(queries) else None,
    }


def probe_metrics(queries: QuerySet, ranks: GoldRanks, head_above_gold: np.ndarray | None = None) -> dict:
    relations = [queries.kg.relation_names[r] for r in queries.triples[:, 1]]
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
        "per_relation": {
            relation: {"raw": raw, "filtered": filtered}
            for (relation, raw), filtered in zip(
                grouped_metrics(ranks.raw, relations).items(), grouped_metrics(ranks.filtered, relations).values(), strict=True
            )
        },
    }


def kg_result(
    probe: str,
    queries: QuerySet,
    ranks: GoldRanks,
    top_candidates: np.ndarray | None,
    metadata: dict,
    tokenizer=None,
    arrays: dict | None = None,
    head_above_gold: np.ndarray | None = None,
) -> ProbeResult:
    """A KG probe's result from its gold ranks.

    ``top_candidates``: (n_queries, k) positions into ``queries.candidates``, best first.
    ``head_above_gold``: per query, whether its own head outranked the gold tail (see
    ``deer.platform.ranking.Ranking``); counted in ``metrics["head/head_above_gold"]``.
    ``metadata`` must hold ``run_spec`` (as :func:`run_metadata` gives it), built from these queries.
    """
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


# -- run folders ----------------------------------------------------------------------------------


def find_table(folder: Path, name: str) -> Path | None:
    for suffix in (".parquet", ".csv"):
        if (Path(folder) / f"{name}{suffix}").exists():
            return Path(folder) / f"{name}{suffix}"
    return None


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
    return [c for c in table.columns if c.startswith(f"{probe}_") and c.split(f"{probe}_", 1)[1] in ("rank_raw", "rank_filtered", "top10")]


def _save_kg_result(result: ProbeResult, folder: Path) -> None:
    metadata = {**result.metadata, "run_spec": result.spec.to_dict()}
    # Read-modify-write of the folder's shared files under its lock, everything (spec check
    # included) read inside it, so two probes saving here at once both end up in them.
    with folder_lock(folder):
        check_folder_spec(folder, result.spec)
        table = _existing_table(folder, result.table)
        if not (folder / RUN_SPEC_FILE).exists():
            result.spec.write(folder)
        if table is None:
            table = result.table[_query_columns(result.table)].copy()
        table = _with_probe_columns(table, result)
        for old in folder.glob(f"{RANKS_TABLE}.*"):
            if old.suffix != default_table_suffix():
                old.unlink()
        write_table(folder / f"{RANKS_TABLE}{default_table_suffix()}", table)
        _merge_json(folder / "metrics.json", result.probe, result.metrics.to_dict())
        _merge_json(folder / "metadata.json", result.probe, metadata)


def _existing_table(folder: Path, fresh: pd.DataFrame) -> pd.DataFrame | None:
    """The folder's table if it holds exactly these queries (same order); else None."""
    path = find_ranks_table(folder)
    if path is None:
        return None
    table = read_table(path)
    if len(table) != len(fresh) or any(
        table[c].astype(str).tolist() != fresh[c].astype(str).tolist() for c in KEY_COLUMNS
    ):
        raise ValueError(
            f"{path} holds ranks for different queries; use another --out folder "
            "(or the same --kg/--split/--subset/--seed as the run that wrote it)"
        )
    return table


def instances_folder_conflict(folder: Path, probe: str, kind: str, block: str | None) -> str | None:
    """Why ``folder`` holds another kind of run than an instances result (None if it does not).

    Such a result owns the folder's metrics.json and metadata.json (one key, ``probe``), so the
    folder may hold only that: metadata whose ``probe`` field is ``kind`` and metrics with
    ``block`` (e.g. "overall").  A KG run's ranks table or run spec is another kind of run.
    """
    for name in (f"{RANKS_TABLE}.parquet", f"{RANKS_TABLE}.csv", RUN_SPEC_FILE):
        if (folder / name).exists():
            return f"a KG probe run ({name})"
    for name in ("metadata.json", "metrics.json"):
        path = folder / name
        if not path.exists():
            continue
        try:
            stored = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            return f"a {name} that is not readable JSON ({error})"
        if not isinstance(stored, dict):
            return f"a {name} that is not a JSON object"
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
        raise ValueError(
            f"{folder} already holds {conflict}; {label or f'a {kind} run'} writes its own metrics.json and metadata.json "
            "there and would overwrite that run's. Use another --out folder."
        )


def _save_instances_result(result: ProbeResult, folder: Path) -> None:
    with folder_lock(folder):  # the folder's check and writes, one saving process at a time
        check_instances_folder(folder, result.probe, result.metadata.get("probe", result.probe), result.metrics.default)
        write_table(folder / f"{INSTANCES_TABLE}{default_table_suffix()}", result.table)
        write_json(folder / "metrics.json", {result.probe: result.metrics.to_dict()})
        if result.summary is not None:
            write_text(folder / "summary.md", result.summary)
        write_json(folder / "metadata.json", {result.probe: result.metadata})


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _merge_json(path: Path, probe: str, payload: dict) -> None:
    merged = _read_json(path)
    merged[probe] = payload
    write_json(path, merged)
