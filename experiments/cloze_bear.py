"""DEER on the BEAR data set, beside BEAR's own likelihood score for the same model: the report of a cloze run
(``bear_ref.benchmark.BenchmarkRun``) whose BEAR ranks come from the same run, or from a finished ``deer bear-dataset``
folder of the same model and data (checked by the run); agreement is per instance and template.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bear_ref.benchmark import BenchmarkRun
from deer.base.files import write_json, write_table, write_text
from deer.platform.tables import markdown_table
from experiments.cloze_report import agreement_markdown, pair_agreement
from kg_data.bear import BearDataset

# The DEER paper's Appendix E.4 compared DEER and BEAR on these four relations (r = 0.150 to 0.361).
PAPER_RELATIONS = ("P272", "P344", "P466", "P1412")
KEYS = ["relation", "template", "row"]


def _side_by_side(deer_metrics: dict, bear_m: dict, template_blocks: dict) -> list[str]:
    rows = [("**overall**", deer_metrics["overall"], bear_m["overall"])]
    # each template's own rows: where relations have fewer templates, its baseline and instances are not the overall's
    rows += [(f"template {t}", block, {"accuracy_mean": bear_m["overall"]["accuracy_per_template"][t]})
             for t, block in template_blocks.items()]
    for key in ("per_domain", "per_cardinality"):
        rows += [(name, block, bear_m[key][name]) for name, block in deer_metrics[key].items()]
    table = [{"group": name, "DEER accuracy (mean over templates)": d["accuracy_mean"], "BEAR score": b["accuracy_mean"],
              "random": d["random_baseline"], "instances": d["instances"]} for name, d, b in rows]
    return markdown_table(table, dict.fromkeys(["DEER accuracy (mean over templates)", "BEAR score", "random"], ".3f")).splitlines()


def agreement_rows(joined: pd.DataFrame, dataset: BearDataset, bootstrap: int, seed: int) -> list[dict]:
    def row(name, part):
        return {"group": name, "kind": "answer space", "pair": "deer vs bear",
                **pair_agreement(part["rank_deer"], part["rank_bear"], part["correct_deer"], part["correct_bear"], bootstrap, seed)}

    rows = [row("all", joined)]
    rows += [row(f"template {t}", part) for t, part in joined.groupby("template")]
    domains = {code: r.domains or ["unknown"] for code, r in dataset.relations.items()}
    exploded = joined.assign(domain=joined["relation"].map(domains)).explode("domain")
    rows += [row(f"domain {d}", part) for d, part in exploded.groupby("domain")]
    rows += [row(f"relation {code} (paper E.4)", joined[joined["relation"] == code]) for code in PAPER_RELATIONS
             if (joined["relation"] == code).any()]
    return rows


def compare_with_bear(run: BenchmarkRun, out: str | Path, bootstrap: int = 1000) -> dict:
    """DEER beside BEAR on a BEAR-format data set (``run.bear``, a ``BearScores``): BEAR-style metrics and per-instance
    agreement, written as deer_instances.parquet, report.json and summary.md in ``out``."""
    out, result, dataset, loaded, bear = Path(out), run.result, run.data, run.loaded, run.bear
    deer_table = bear.tables["deer"]
    joined = deer_table.merge(bear.tables["bear"], on=KEYS, suffixes=("_deer", "_bear"), validate="one_to_one")
    if len(joined) != len(deer_table):
        raise ValueError(f"BEAR's table covers {len(joined)} of DEER's {len(deer_table)} (instance, template) rows")
    agreement = agreement_rows(joined, dataset, bootstrap, run.selection.seed)
    seconds = {f"{p}_seconds": result.metadata_of(p)["seconds"] for p in result.probes}  # None: resumed, not scored now
    report = {"metrics": bear.metrics, "agreement": agreement, "timings": {k: v for k, v in seconds.items() if v is not None},
              "bear_run": str(bear.bear_run) if bear.bear_run else None, "model": loaded.metadata(), "dataset": dataset.summary()}
    templates = "-".join(str(n) for n in sorted({len(r.templates) for r in dataset.relations.values()}))  # "1-3": they differ
    lines = [f"DEER on {dataset.name} ({dataset.n_instances} instances x {templates} templates), "
             f"model {loaded.name}: accuracy = the answer space's argmax is the gold (lm-pub-quiz's convention, as BEAR's score).", ""]
    lines += _side_by_side(bear.metrics["deer"], bear.metrics["bear"], bear.per_template)
    lines += ["", "Per-instance agreement (r: Pearson of log10 ranks in the answer space; accuracy: argmax right or not):", ""]
    lines += agreement_markdown(agreement, "group")
    write_table(out / "deer_instances.parquet", deer_table)
    write_json(out / "report.json", report)
    write_text(out / "summary.md", "\n".join(lines) + "\n")
    return report
