"""Probing on BEAR's and LAMA's own benchmarks, one model (``probe_benchmark``) or several (``compare_models``):
what `deer cloze` calls.  The run is ``bear_ref.benchmark``'s; here its reports are written."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from bear_ref.benchmark import BenchmarkRun, BenchmarkSelection, benchmark_run
from deer.base.errors import check_count
from deer.base.files import write_json, write_text
from deer.base.model_spec import with_loading
from deer.platform.inputs import check_inputs
from deer.platform.run_options import Budget, ModelLoading
from deer.platform.tables import markdown_table
from deer.runner import BENCHMARK_PROBES
from experiments.cloze_bear import compare_with_bear
from experiments.cloze_report import cloze_blocks, mode_agreement, probe_agreement, summary_markdown
from experiments.report import distinct_labels
from experiments.stats import ordering_agreement


def probe_benchmark(dataset="lama", model="smollm2-135m", *, selection: BenchmarkSelection | None = None,
                    loading: ModelLoading | None = None, budget: Budget | None = None, probes: Sequence[str] = BENCHMARK_PROBES,
                    bear_run=None, bootstrap: int = 1000, out=None, backend: str | None = None, cache: bool = False,
                    show_progress: bool = True, **options) -> dict:
    """Run ``probes`` on a benchmark; returns the report {"result" (the cloze run's ``RunResult``), "agreement",
    "mode_agreement", and the result's "table", "metrics" and "metadata" by probe} (and "bear_dataset" for DEER
    on a BEAR-format data set).  ``model``: a name, a loaded model or an opened backend (``open_backend``).
    ``selection``, ``loading`` and ``budget`` are each an object or its fields as loose keywords (``max_facts=``,
    ``relations=``, ``dtype=``, ``token_budget=``, ...).  ``backend``: 'hf' (None: hf, or the opened backend's
    own), 'plain' (one whole forward pass per text, a cross-check) or another registered one.  ``cache``: keep DEER's candidate vectors in the
    model's prompt store under ``cache_dir=`` (default $DEER_CACHE_DIR or ~/.cache/deer) for every later run.
    The run is ``bear_ref.benchmark.benchmark_run``'s; the reports are written while its folder is held."""
    check_count("bootstrap", bootstrap, 0)  # 0: no bootstrap intervals; every input is checked before the model loads
    with benchmark_run(dataset, model, selection=selection, loading=loading, budget=budget, probes=probes, bear_run=bear_run,
                       out=out, backend=backend, cache=cache, show_progress=show_progress, **options) as run:
        return benchmark_report(run, bootstrap, out)


def benchmark_report(run: BenchmarkRun, bootstrap: int = 1000, out=None) -> dict:
    """``probe_benchmark``'s report of ``run``, written into ``out`` (None: nothing written): metrics.json, the agreement
    between probes and between modes (agreement.json), summary.md, and DEER beside BEAR in bear_dataset/."""
    result, seed = run.result, run.selection.seed
    report = {}
    if run.bear is not None:
        report["bear_dataset"] = compare_with_bear(run, Path(out) / "bear_dataset", bootstrap)
    metrics = result.probe_metrics
    agreement = probe_agreement(result.table, bootstrap, seed)
    modes_rows = mode_agreement(result.table, bootstrap, seed)
    report.update({"result": result, "table": result.table, "metrics": metrics, "agreement": agreement,
                   "mode_agreement": modes_rows, "metadata": result.probe_metadata})
    if out is not None:
        out = Path(out)
        summary = summary_markdown(metrics, agreement, modes_rows)
        if "bear_dataset" not in report:  # an earlier run's DEER-vs-BEAR comparison there is not this run's
            shutil.rmtree(out / "bear_dataset", ignore_errors=True)
        else:
            summary += "\nBEAR data-set comparison: bear_dataset/summary.md\n"
        write_json(out / "metrics.json", metrics)
        write_json(out / "agreement.json", {"probes": agreement, "template_vs_template_free": modes_rows})
        write_text(out / "summary.md", summary)
    return report


def headline(metrics: dict, kind: str, mode: str, probe: str) -> float | None:
    return metrics.get(probe, {}).get(kind, {}).get(mode, {}).get("overall", {}).get("p@1")


def compare_models(dataset, models: Sequence[str], out, probes: Sequence[str] = BENCHMARK_PROBES, **options) -> dict:
    """``probe_benchmark`` per model, then each probe's model ordering and the agreement between
    orderings (per candidate kind and mode); writes ``out/orderings.json`` and ``orderings.md``."""
    out = Path(out)
    loading = options.get("loading") or ModelLoading(model_kwargs=options.get("model_kwargs"), adapter=options.get("adapter"))
    for name in models:  # every model's folder, adapter and config, before the first is probed
        check_inputs(with_loading(name, loading.model_kwargs, loading.adapter))
    # One folder per model, named so that two checkpoints called alike (a/checkpoint-10, b/checkpoint-10) never share one.
    reports = {name: probe_benchmark(dataset, name, probes=probes, out=out / label, **options)
               for name, label in zip(models, distinct_labels(models), strict=True)}
    names = list(reports)
    rows, headline_rows = [], []
    for kind, mode in sorted({(k, m) for r in reports.values() for k, m, _, _ in cloze_blocks(r["metrics"])}):
        scores = {p: [headline(reports[n]["metrics"], kind, mode, p) for n in names] for p in probes}
        for p, values in scores.items():
            headline_rows.append({"candidates": kind, "mode": mode, "probe": p, **dict(zip(names, values, strict=True))})
        for a, b in itertools.combinations(probes, 2):
            if all(v is not None for v in scores[a] + scores[b]) and len(names) >= 2:
                rows.append({"kind": kind, "mode": mode, "pair": f"{a} vs {b}", **ordering_agreement(scores[a], scores[b], names)})
    lines = markdown_table(headline_rows, dict.fromkeys(names, ".3f")).splitlines() if headline_rows else []
    lines += ["", f"Orderings of {len(names)} models (P@1; Spearman/Kendall between probes' orderings; with so few models "
                  "the p-values show how little an ordering agreement can establish):", ""]
    orderings = pd.DataFrame([[r["kind"], r["mode"], r["pair"], r["spearman_rho"], r["spearman_p"], r["kendall_tau"], r["kendall_p"],
                               " > ".join(r["order_a"]), " > ".join(r["order_b"])] for r in rows],
                             columns=["candidates", "mode", "pair", "Spearman", "p", "Kendall", "p ", "order (first probe)", "order (second)"])
    lines += markdown_table(orderings, dict.fromkeys(["Spearman", "p", "Kendall", "p "], ".2f")).splitlines()
    write_json(out / "orderings.json", {"models": names, "orderings": rows})
    write_text(out / "orderings.md", "\n".join(lines) + "\n")
    return {"reports": reports, "orderings": rows}
