"""The one result type (:class:`RunResult`) and the one result layout it is saved in (:class:`Layout`): a rows table
with the task's columns and each probe's (a KG run's ``ranks`` with ``run_spec.json``, a cloze run's ``queries``, the
BEAR data-set score's ``instances``, an accuracy view of a cloze run's rows, with ``summary.md``), ``metrics.json``
and ``metadata.json`` keyed by probe, written and read back one way.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from deer.base.files import (
    as_written,
    default_table_suffix,
    folder_lock,
    restored_on_failure,
    write_json,
    write_table,
    write_text,
)
from deer.platform.bear_accuracy import check_accuracy_metrics
from deer.platform.metrics import cloze_metrics, observed_rank_metrics, probes_in
from deer.platform.read_back import StoredFileError, read_json_object, read_stored_table
from deer.platform.run_spec import RUN_SPEC_FILE, RunSpec, check_folder_spec
from kg_data.queries import QuerySet

KEY_COLUMNS = ["head_id", "relation_id", "tail_id"]
RANKS_TABLE = "ranks"
QUERIES_TABLE = "queries"
INSTANCES_TABLE = "instances"


class Metrics(Mapping):
    """A probe's metrics: the nested dict of ``metrics.json``, read by name: ``metrics["hit@10"]`` from the
    default block (``filtered``, ``overall``), or by path: ``metrics["random_baseline/filtered/mrr"]``."""

    def __init__(self, tree: dict, default: str | None = None):
        self._tree = as_written(tree)  # as metrics.json holds it: a reloaded result reads like the one in memory
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

        def walk(node: dict, prefix: str) -> Iterator[tuple[str, Any]]:
            for name, value in node.items():
                if isinstance(value, dict):
                    yield from walk(value, f"{prefix}{name}/")
                else:
                    yield f"{prefix}{name}", value

        return dict(walk(self._tree, ""))

    def to_dict(self) -> dict:
        return self._tree

    def to_frame(self) -> pd.DataFrame:
        """One row per block of values (``raw``, ``random_baseline/filtered``, ...), one column per metric."""
        rows: dict[str, dict] = {}
        for path, value in self.flat().items():
            block, _, name = path.rpartition("/")
            rows.setdefault(block or "(top)", {})[name] = value
        return pd.DataFrame.from_dict(rows, orient="index")


@dataclasses.dataclass(frozen=True)
class Layout:
    """The one result layout, a rows table beside ``metrics.json`` and ``metadata.json`` keyed by probe, as one task's
    run keeps it: the ``table``'s name and the ``columns`` it must hold (the task's), the ``kind`` of run (for
    messages), the metrics block a name reads by default, and whether probes of one run add their columns beside each
    other's in a folder (``merges``: a KG run's, under one run spec) or a save writes the folder whole."""

    table: str
    kind: str
    default_block: str | None
    columns: tuple[str, ...]
    merges: bool = False


LAYOUTS = {layout.table: layout for layout in (
    Layout(RANKS_TABLE, "a KG probe run", "filtered", tuple(KEY_COLUMNS), merges=True),
    Layout(QUERIES_TABLE, "a cloze run", None, ("n_candidates", "candidates", "mode", "source", "relation")),
    Layout(INSTANCES_TABLE, "a BEAR data-set score", "overall", ()))}


@dataclasses.dataclass(repr=False)
class RunResult:
    """What a run produced, its probes side by side: the one result type of every run.

    ``table``: a row per query ("ranks", "queries") or (instance, template) ("instances"), each probe's columns
    named ``{probe}_...``.  A result of one probe reads as that probe's (``result.metrics["hit@10"]``); of several,
    ``result["deer"]`` is one probe's view.  ``queries``, ``probe_arrays``: in memory only.
    """

    table: pd.DataFrame
    probe_metrics: dict[str, dict]
    probe_metadata: dict[str, dict]
    layout: str = RANKS_TABLE
    spec: RunSpec | None = None
    summary: str | None = None  # markdown, saved as summary.md
    label: str | None = None
    folder: Path | None = None
    experiment: dict = dataclasses.field(default_factory=dict)
    queries: QuerySet | None = None
    probe_arrays: dict[str, dict] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}; got {self.layout!r}")
        self.probe_metrics = as_written(self.probe_metrics)  # as Metrics holds its tree
        if self.layout == RANKS_TABLE and self.spec is None and self.probe_metrics:
            raise ValueError("a KG run's result (layout 'ranks') needs the run spec its queries were ranked under")
        stray = sorted(set(self.probe_metadata) - set(self.probe_metrics))
        if stray:
            raise ValueError(f"metadata for a probe without metrics: {', '.join(stray)}")

    @classmethod
    def of_probe(cls, probe: str, table: pd.DataFrame, metrics: dict | Metrics, metadata: dict, **fields) -> RunResult:
        """One probe's result: ``probe``'s ``table``, ``metrics`` and ``metadata`` (``fields``: the other fields, and its ``arrays``)."""
        tree = metrics.to_dict() if isinstance(metrics, Metrics) else metrics
        return cls(table, {probe: tree}, {probe: metadata}, probe_arrays={probe: dict(fields.pop("arrays", None) or {})}, **fields)

    def __repr__(self) -> str:
        rows = "rows" if self.layout == INSTANCES_TABLE else "queries"
        if len(self.probes) != 1:
            return f"RunResult(probes={self.probes!r}, {len(self.table)} {rows}, layout={self.layout!r})"
        model = self.metadata.get("model", {}).get("name") if isinstance(self.metadata.get("model"), dict) else None
        return f"RunResult(probe={self.probe!r}, model={model!r}, {len(self.table)} {rows}, {self.metrics!r})"

    @property
    def probes(self) -> list[str]:
        return list(self.probe_metrics)

    @property
    def probe(self) -> str:
        """The probe of a one-probe result (a ValueError naming them where there are several)."""
        if len(self.probes) != 1:
            raise ValueError(f"this result holds {', '.join(self.probes) or 'no probe'}; pick one with result[probe]")
        return self.probes[0]

    @property
    def is_kg(self) -> bool:
        return self.layout == RANKS_TABLE

    @property
    def metrics(self) -> Metrics:
        return self.metrics_of(self.probe)

    @property
    def metadata(self) -> dict:
        return self.metadata_of(self.probe)

    @property
    def arrays(self) -> dict:
        return self.probe_arrays.setdefault(self.probe, {})

    def metrics_of(self, probe: str) -> Metrics:
        return Metrics(self.probe_metrics[self._known(probe)], LAYOUTS[self.layout].default_block)

    def metadata_of(self, probe: str) -> dict:
        return self.probe_metadata.setdefault(self._known(probe), {})

    def __getitem__(self, probe: str) -> RunResult:
        """``probe``'s view: the shared columns and its own, its metrics and metadata."""
        owned = {c for p in self.probes for c in self.columns_of(p)}
        columns = [c for c in self.table.columns if c not in owned or c in self.columns_of(self._known(probe))]
        return dataclasses.replace(self, table=self.table[columns], probe_metrics={probe: self.probe_metrics[probe]},
                                   probe_metadata={probe: self.metadata_of(probe)},
                                   probe_arrays={probe: self.probe_arrays.get(probe, {})})

    def columns_of(self, probe: str) -> list[str]:
        """``probe``'s own columns of the table (none of an instances table's)."""
        if self.is_kg:
            return _probe_columns(self.table, probe)
        if self.layout == INSTANCES_TABLE:
            return []
        return [c for c in self.table.columns if _owner(c, self.probes) == probe]

    def ranks(self, rank_type: str = "filtered", probe: str | None = None) -> np.ndarray:
        """Gold ranks (1 = best) per query of a KG run, float64 (realistic ranks may be halves)."""
        if rank_type not in ("filtered", "raw"):  # 0.1's order, ranks(probe, rank_type), too: named here
            raise ValueError(f"rank_type must be 'filtered' or 'raw', got {rank_type!r}: ranks(rank_type, probe)")
        if not self.is_kg:
            raise ValueError(f"ranks() reads a KG run's raw and filtered ranks; this {self.layout} table has its own columns")
        return self.table[f"{self._known(probe or self.probe)}_rank_{rank_type}"].to_numpy(dtype=np.float64)

    def top_predictions(self, probe: str | None = None) -> pd.Series:
        """Per query, the names of the top-10 candidates, best first."""
        return self.table[f"{self._known(probe or self.probe)}_top10"].str.split(" | ", regex=False)

    def save(self, folder: str | Path) -> Path:
        """Write into ``folder`` the one way of every layout: the table, metrics.json, summary.md (where there is one)
        and metadata.json, under the folder's lock.  A KG run's probes add their columns beside other probes of the
        same run spec there (another spec's folder is refused: ValueError); another layout's folder writes whole.  A
        folder of another kind of run is refused; a save that fails (``deer.base.files.WriteError``, naming the file)
        leaves the folder's files as it found them."""
        folder, layout = Path(folder), LAYOUTS[self.layout]
        with saved_whole(folder, layout.table):  # every probe's, or (failing) none
            check_folder(folder, self)  # read under the lock, so two runs saving at once both end up in it
            stored_metrics, stored_metadata = (_read_json(folder / name) if layout.merges else {}
                                               for name in ("metrics.json", "metadata.json"))
            table = _merged_table(folder, self) if layout.merges else self.table
            own = {probe: self._saved_metadata(probe) for probe in self.probes}
            others = {probe: entry for probe, entry in stored_metadata.items() if probe not in own}
            # metadata.json says what made the rows (read back as reusable): this run's entries go first and come back
            # last, so a save stopped part-way never leaves new rows under old entries
            if others:
                write_json(folder / "metadata.json", others, f"the run's metadata, without {', '.join(own)}'s entries")
            else:
                (folder / "metadata.json").unlink(missing_ok=True)
            if self.spec is not None and not (folder / RUN_SPEC_FILE).exists():
                self.spec.write(folder)
            for old in folder.glob(f"{layout.table}.*"):
                if old.suffix in (".parquet", ".csv") and old.suffix != default_table_suffix():
                    old.unlink()
            write_table(folder / f"{layout.table}{default_table_suffix()}", table, f"{layout.kind}'s {layout.table} table")
            write_json(folder / "metrics.json", {**stored_metrics, **self.probe_metrics}, f"{layout.kind}'s metrics")
            if self.summary is not None:
                write_text(folder / "summary.md", self.summary, f"{layout.kind}'s summary")
            write_json(folder / "metadata.json", {**others, **own}, f"{layout.kind}'s metadata")
        self.folder = folder
        return folder

    def _saved_metadata(self, probe: str) -> dict:
        """``probe``'s metadata as saved: with the run spec its rows were made under, where there is one."""
        metadata = self.metadata_of(probe)
        return metadata if self.spec is None else {**metadata, "run_spec": self.spec.to_dict()}

    @classmethod
    def load(cls, folder: str | Path, probe: str | None = None) -> RunResult:
        """A run folder's result, every probe's (or ``probe``'s view)."""
        result = load_result(folder)
        return result if probe is None else result[probe]

    def _known(self, probe: str) -> str:
        if probe not in self.probe_metrics:
            raise ValueError(f"this result holds no {probe} result (it has: {', '.join(self.probes) or 'none'})")
        return probe


def combine_results(results: Sequence[RunResult]) -> RunResult:
    """KG results of one run spec (the same queries, in order) as one result, their probes side by side."""
    results = list(results)
    return dataclasses.replace(results[0], table=join_results(results),
                               probe_metrics={p: r.probe_metrics[p] for r in results for p in r.probes},
                               probe_metadata={p: r.metadata_of(p) for r in results for p in r.probes},
                               probe_arrays={p: r.probe_arrays.get(p, {}) for r in results for p in r.probes})


def join_results(results: Sequence[RunResult]) -> pd.DataFrame:
    """One table with every result's rank columns beside the shared query columns (KG results of one run spec)."""
    results = list(results)
    if not results:
        raise ValueError("nothing to join")
    first = results[0]
    for result in results:
        if not result.is_kg:
            raise ValueError(f"the {', '.join(result.probes)} result is not a KG result (it has no per-query ranks)")
        if result.spec.differences(first.spec):
            raise ValueError("cannot join results of different run specs: "
                             + first.spec.describe_differences(result.spec, (first.probes[0], result.probes[0])))
    table = first.table[_query_columns(first.table)].copy()
    for result in results:
        for probe in result.probes:
            table = _with_probe_columns(table, result.table, probe)
    return table


def load_results(folder: str | Path) -> dict[str, RunResult]:
    """Every probe's result in a run folder, by probe name (each one probe's view of ``load_result``)."""
    result = load_result(folder)
    return {probe: result[probe] for probe in result.probes}


def load_result(folder: str | Path) -> RunResult:
    """A run folder's result, every probe's, read the one way of every layout: its table, the probes it holds, their
    entries in metrics.json and metadata.json, the metrics checked against the rows (``checked_metrics``), the run spec
    of a KG run; a bad file there is refused with a ValueError naming it."""
    folder = Path(folder)
    found = [(LAYOUTS[name], path) for name in (RANKS_TABLE, INSTANCES_TABLE, QUERIES_TABLE)
             if (path := find_table(folder, name)) is not None]
    if not found:
        raise ValueError(f"{folder} holds no probe result (no ranks, instances or queries table, .parquet or .csv)")
    layout, path = found[0]
    table = read_ranks_table(path) if layout.merges else read_stored_table(path, list(layout.columns))
    spec = RunSpec.read(folder) if layout.merges else None
    if layout.merges and spec is None:  # written first by every save of this version: a folder of 0.1 (or one edited) holds none
        raise StoredFileError(folder / RUN_SPEC_FILE, f"missing, though {folder} holds {path.name}: a folder written by "
                                                      "deer-probe-toolkit 0.1 (or edited), which 0.2 does not read; make the run again")
    if layout.table != QUERIES_TABLE:  # a cloze run's of before 0.2 holds none (below)
        require_file(folder, "metrics.json", path)
    metadata = read_json_object(require_file(folder, "metadata.json", path))
    probes = stored_probes(layout, path, table, _read_json(folder / "metrics.json") or metadata)
    unkeyed = layout.table == QUERIES_TABLE and not all(isinstance(metadata.get(p), dict) for p in probes)
    if unkeyed:  # a cloze run's of before 0.2: one metadata object for the run, its metrics made from the rows alone
        metrics, metadata = _read_json(folder / "metrics.json"), dict.fromkeys(probes, metadata)
    else:
        metrics, metadata = _probe_entries(require_file(folder, "metrics.json", path)), _probe_entries(folder / "metadata.json")
        require_entries(folder, path, probes, metrics, metadata)
    metrics = checked_metrics(layout, folder / "metrics.json", path, table, metrics)
    summary = folder / "summary.md"
    return RunResult(table, {p: metrics.get(p, {}) for p in probes}, {p: metadata.get(p, {}) for p in probes}, layout.table,
                     spec, summary.read_text(encoding="utf-8") if summary.exists() else None, folder=folder)


def stored_probes(layout: Layout, path: Path, table: pd.DataFrame, entries: dict) -> list[str]:
    """The probes a stored table holds: a KG's by their raw ranks, a cloze run's by their rank and correct columns, a
    BEAR data-set score's (its columns are the probe's alone) by its metrics' (else metadata's) ``entries``."""
    if layout.table == INSTANCES_TABLE:
        return list(entries)
    probes = probes_in(table, "_rank_raw" if layout.merges else "_rank")
    lacking = [f"{probe}_correct" for probe in probes if not layout.merges and f"{probe}_correct" not in table.columns]
    if lacking or not probes and not layout.merges:
        raise StoredFileError(path, f"lacks the column {lacking[0]}" if lacking else "has no {probe}_rank column")
    return probes


def checked_metrics(layout: Layout, path: Path, table_path: Path, table: pd.DataFrame, metrics: dict) -> dict:
    """The metrics of a stored table, made again from its rows where they are its rows' alone (a KG's raw and filtered
    blocks, a BEAR data-set score's overall and per-relation ones, a cloze run's every one): one that disagrees with
    ``metrics.json`` is refused naming it (StoredFileError)."""
    if layout.merges:
        _check_kg_metrics(path, table_path, table, metrics)
        return metrics
    if layout.table == INSTANCES_TABLE:
        check_accuracy_metrics(path, table_path, table, metrics)
        return metrics
    made = as_written(cloze_metrics(table))  # held as metrics.json holds them: compared as read
    if metrics and metrics != made:
        raise StoredFileError(path, f"disagrees with the metrics of {table_path.name} (made again from its rows)")
    return made


def require_file(folder: Path, name: str, table: Path | None) -> Path:
    """``folder/name``, which a run folder holding ``table`` needs; StoredFileError naming both where it is missing."""
    path = folder / name
    if table is not None and not path.exists():
        raise StoredFileError(path, f"missing, though {folder} holds {table.name}: the run that wrote it did not finish "
                                    "(or the file was removed), so the folder holds no whole result; run it again")
    return path


def require_entries(folder: Path, table: Path, probes: Sequence[str], metrics: dict, metadata: dict) -> None:
    """Each probe of a run folder's table has its entry in metrics.json and metadata.json (else StoredFileError naming
    the file and the probe: written last, a missing entry is a save that did not finish)."""
    if not probes:
        raise StoredFileError(folder / "metrics.json", f"names no probe of {table.name}: the folder holds no whole result")
    for name, entries in (("metrics.json", metrics), ("metadata.json", metadata)):
        lacking = [probe for probe in probes if probe not in entries]
        if lacking:
            raise StoredFileError(folder / name, f"has no entry for {', '.join(lacking)}, whose results {table.name} holds: "
                                                 "that probe's save did not finish (or the file was edited); run it again")


def read_ranks_table(path: Path) -> pd.DataFrame:
    """A run folder's ranks table, with the query ids and every probe's numeric rank columns (else a ValueError)."""
    table = read_stored_table(path, KEY_COLUMNS)
    for probe in probes_in(table, "_rank_raw"):
        for column in (f"{probe}_rank_raw", f"{probe}_rank_filtered"):
            if column not in table.columns or not pd.api.types.is_numeric_dtype(table[column]):
                raise StoredFileError(path, f"has no numeric {column} column")
    return table


def _check_kg_metrics(path: Path, table_path: Path, table: pd.DataFrame, metrics: dict) -> None:
    """A KG probe's raw and filtered metrics, made again from the ranks read back, must agree with ``metrics.json``."""
    relations = table["relation"].astype(str).tolist() if "relation" in table.columns else None
    for probe in probes_in(table, "_rank_raw"):
        stored = metrics.get(probe, {})
        raw, filtered = (table[f"{probe}_rank_{rank_type}"].to_numpy(np.float64) for rank_type in ("raw", "filtered"))
        for block, values in observed_rank_metrics(raw, filtered, relations).items():
            if block in stored and as_written(values) != stored[block]:
                raise StoredFileError(path, f"its {probe} {block} metrics disagree with {table_path.name} (made again from its ranks)")


def _probe_entries(path: Path) -> dict[str, dict]:
    stored = _read_json(path)
    odd = [probe for probe, entry in stored.items() if not isinstance(entry, dict)]
    if odd:
        raise StoredFileError(path, f"its entry for {odd[0]} is not a JSON object")
    return stored


def find_table(folder: Path, name: str) -> Path | None:
    paths = (Path(folder) / f"{name}{suffix}" for suffix in (".parquet", ".csv"))
    return next((path for path in paths if path.exists()), None)


def find_ranks_table(folder: Path) -> Path | None:
    return find_table(folder, RANKS_TABLE)


def _query_columns(table: pd.DataFrame) -> list[str]:
    owned = {c for p in probes_in(table, "_rank_raw") for c in _probe_columns(table, p)}
    return [c for c in table.columns if c not in owned]


def _with_probe_columns(table: pd.DataFrame, source: pd.DataFrame, probe: str) -> pd.DataFrame:
    for column in _probe_columns(source, probe):
        table[column] = source[column].to_numpy()
    return table


def _owner(column: str, probes: Sequence[str]) -> str | None:
    """The probe a cloze table's column belongs to (``{probe}_...``; the longest name that fits), or None."""
    return max((p for p in probes if column.startswith(f"{p}_")), key=len, default=None)


def _probe_columns(table: pd.DataFrame, probe: str) -> list[str]:
    return [c for c in table.columns if c in {f"{probe}_rank_raw", f"{probe}_rank_filtered", f"{probe}_top10"}]


def check_folder(folder: Path, result: RunResult) -> None:
    """Refuse (ValueError) a folder that a save of ``result`` would spoil: a KG run's of another run spec (its ranks
    are added beside those of its own only), a BEAR data-set score's of other probes, any of another kind of run."""
    if result.spec is not None:
        check_folder_spec(folder, result.spec)
    elif result.layout == INSTANCES_TABLE:
        check_instances_folder(folder, result.probe, result.metadata.get("probe", result.probe), result.metrics.default)
    else:
        refuse_other_run(folder, result.layout, LAYOUTS[result.layout].kind)


def _merged_table(folder: Path, result: RunResult) -> pd.DataFrame:
    """The folder's table, if it holds these queries, with ``result``'s query columns (tail_tokens as counted now) and
    each of its probes' columns (another probe's stay)."""
    fresh, path = result.table, find_table(folder, result.layout)
    if path is None:
        table = fresh[_query_columns(fresh)].copy()
    else:
        table = read_ranks_table(path)
        if len(table) != len(fresh) or any(table[c].astype(str).tolist() != fresh[c].astype(str).tolist() for c in KEY_COLUMNS):
            raise ValueError(f"{path} holds ranks for different queries; use another --out folder "
                             "(or the same --kg/--split/--subset/--seed as the run that wrote it)")
        table = table.assign(**{column: fresh[column].to_numpy() for column in _query_columns(fresh)})
    for probe in result.probes:
        table = _with_probe_columns(table, fresh, probe)
    return table


def other_run_in(folder: Path, layout: str) -> str | None:
    """What shows that ``folder`` holds another kind of run than a ``layout`` one (None if nothing does)."""
    names = {f"{table}{suffix}": table for table in LAYOUTS if table != layout for suffix in (".parquet", ".csv")}
    if layout != RANKS_TABLE:
        names[RUN_SPEC_FILE] = RANKS_TABLE
    found = next((name for name in names if (Path(folder) / name).exists()), None)
    return None if found is None else f"{LAYOUTS[names[found]].kind} ({found})"


def refuse_other_run(folder: Path | None, layout: str, label: str) -> None:
    """Refuse (ValueError) a folder holding another kind of run, whose metrics and metadata this one would overwrite."""
    _refuse_overwrite(folder, None if folder is None else other_run_in(Path(folder), layout), label)


def instances_folder_conflict(folder: Path, probe: str, kind: str, block: str | None) -> str | None:
    """Why ``folder`` holds another kind of run than an instances result of ``probe``, or None."""
    other = other_run_in(folder, INSTANCES_TABLE)
    if other:
        return other
    for name in ("metadata.json", "metrics.json"):
        if not (folder / name).exists():
            continue
        try:
            stored = read_json_object(folder / name)
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
    """``refuse_other_run`` for an instances result (``instances_folder_conflict``)."""
    _refuse_overwrite(folder, instances_folder_conflict(Path(folder), probe, kind, block), label or f"a {kind} run")


def _refuse_overwrite(folder: Path | None, conflict: str | None, label: str) -> None:
    if conflict:
        raise ValueError(f"{folder} already holds {conflict}; {label} writes its own metrics.json and metadata.json there "
                         "and would overwrite that run's. Use another --out folder.")


SAVED_FILES = ("metrics.json", "metadata.json", "summary.md", RUN_SPEC_FILE)  # besides the table: what a save writes


@contextlib.contextmanager
def saved_whole(folder: Path, layout: str):
    """Hold the folder's lock while a save of ``layout`` writes; if it fails, every file a save writes is put back as it
    was (``restored_on_failure``) and a folder it created removed, so no half-saved folder is left to read as a result."""
    created = not folder.exists()
    tables = [f"{layout}{suffix}" for suffix in (".parquet", ".csv")]
    try:
        with folder_lock(folder), restored_on_failure([folder / name for name in (*tables, *SAVED_FILES)]):
            yield
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # empty again (it is left where anything else was written there meanwhile)
        raise


def _read_json(path: Path) -> dict:
    return read_json_object(path) if path.exists() else {}
