"""DEER on the BEAR data set, beside BEAR's own likelihood score for the same model.

BEAR's ranks come from the same cloze run, or from a finished ``deer bear-dataset`` folder of the same
model and data (checked); agreement is per instance and template.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import deer
from bear_ref.dataset import INSTANCE_COLUMNS, PROBE, STATEMENT_RULE, bear_format, bear_metrics, find_instances_table
from deer.backends.models import LoadedModel
from deer.base.files import as_written, write_json, write_table, write_text
from deer.platform.read_back import StoredFileError, read_json_object, read_stored_table
from deer.platform.result import RunResult
from deer.platform.tables import markdown_table
from experiments.cloze_report import agreement_markdown, pair_agreement
from experiments.runs import toolkit_version
from kg_data.bear import BearDataset

# The DEER paper's Appendix E.4 compared DEER and BEAR on these four relations (r = 0.150 to 0.361).
PAPER_RELATIONS = ("P272", "P344", "P466", "P1412")
KEYS = ["relation", "template", "row"]


def check_bear_run(folder: str | Path, dataset: BearDataset) -> dict:
    """The metadata of a finished ``deer bear-dataset`` run in ``folder``; ValueError unless every relation's
    content digest (templates, answer space, instances, gold) matches ``dataset``.  Needs no model."""
    folder = Path(folder)
    path = folder / "metadata.json"
    try:
        metadata = read_json_object(path).get("bear")
    except StoredFileError:
        metadata = None
    if not isinstance(metadata, dict) or metadata.get("probe") != PROBE:
        raise ValueError(f"{folder} is not a finished `deer bear-dataset` run ({path} is missing or describes none)")
    odd = [field for field in ("dataset", "model") if not isinstance(metadata.get(field, {}), dict)]
    if odd:
        raise ValueError(f"{path}: its {odd[0]} entry is not a JSON object, so it describes no finished `deer bear-dataset` run")
    problems = []
    stored_digests = metadata.get("relation_digests")
    if not isinstance(stored_digests, dict):
        problems.append("it records no relation digests (made before they were kept), so nothing shows which data it "
                        "scored: run deer bear-dataset again")
    else:
        changed = [code for code, relation in dataset.relations.items() if stored_digests.get(code) != relation.digest()]
        if changed:
            problems.append(f"relations scored on other data (templates, answers or instances edited, or not scored): "
                            f"{', '.join(changed)}")
    if (instances := metadata.get("dataset", {}).get("instances")) != dataset.n_instances:
        problems.append(f"{instances} instances != {dataset.n_instances}")
    if problems:
        raise ValueError(f"{folder} is not a BEAR run of this data: " + "; ".join(problems))
    return metadata


def bear_scoring(runner) -> dict:
    """How this command's BEAR would score on ``runner``, as ``deer bear-dataset``'s metadata records it."""
    from deer.probes import get_probe

    method = runner.statement_scorer(get_probe("bear").options["pll_variant"]).statements_method
    return {"backend": runner.name, "scoring": method, "statement_rule": STATEMENT_RULE}


def stored_bear_table(folder: str | Path, dataset: BearDataset, loaded: LoadedModel, scoring: dict | None = None) -> pd.DataFrame:
    """BEAR's instances from a finished ``deer bear-dataset`` run; ValueError unless it scored the same weights,
    tokenizer and dtype on the same data, as ``scoring`` (``bear_scoring``) says."""
    folder = Path(folder)
    metadata = check_bear_run(folder, dataset)
    model = metadata.get("model", {})
    made_by = {**(scoring or {}), "toolkit": deer.__version__}  # another version may score otherwise
    recorded = {**metadata, "toolkit": toolkit_version(metadata)}
    problems = [f"{name} {recorded.get(name)!r}, this command's BEAR {value!r}" for name, value in made_by.items()
                if recorded.get(name) != value]
    now = as_written(loaded.metadata())  # as this model's own run would record it
    for key, name in (("fingerprint", "model fingerprint"), ("tokenizer_fingerprint", "tokenizer fingerprint"),
                      ("bos", "BOS policy"), ("dtype", "dtype")):
        recorded = model.get(key, now[key] if key == "dtype" else None)  # a run before dtypes were recorded: as now
        if recorded != now[key]:
            problems.append(f"{name} {recorded or 'not recorded (a run made before it was)'} != {now[key]}")
    if problems:
        raise ValueError(f"{folder} is not a BEAR run of this model and scoring: " + "; ".join(problems)
                         + "; make one with `deer bear-dataset` of this model, --dtype and --backend (default --pll-variant)")
    rows = sum(len(relation) * len(relation.templates) for relation in dataset.relations.values())  # one per (instance, template)
    return read_stored_table(find_instances_table(folder), INSTANCE_COLUMNS, rows)


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


def compare_with_bear(result: RunResult, dataset: BearDataset, loaded: LoadedModel, out: str | Path,
                      bear_run: str | Path | None = None, bootstrap: int = 1000, seed: int = 0,
                      bear_table: pd.DataFrame | None = None) -> dict:
    """DEER's columns of a cloze run on ``dataset`` against BEAR's (its own, or ``bear_run``'s, read as ``bear_table``):
    BEAR-style metrics and per-instance agreement in deer_instances.parquet, report.json, summary.md."""
    out = Path(out)
    deer_table = bear_format(result.table, dataset, "deer")
    if bear_run is None and "bear_rank" not in result.table:
        raise ValueError("no BEAR ranks: run the bear probe too, or name a finished `deer bear-dataset` folder (bear_run)")
    if bear_table is None:
        bear_table = stored_bear_table(bear_run, dataset, loaded) if bear_run else bear_format(result.table, dataset, "bear")
    metrics = {"deer": bear_metrics(deer_table, dataset), "bear": bear_metrics(bear_table, dataset)}
    joined = deer_table.merge(bear_table, on=KEYS, suffixes=("_deer", "_bear"), validate="one_to_one")
    if len(joined) != len(deer_table):
        raise ValueError(f"BEAR's table covers {len(joined)} of DEER's {len(deer_table)} (instance, template) rows")
    agreement = agreement_rows(joined, dataset, bootstrap, seed)
    seconds = {f"{p}_seconds": result.metadata_of(p)["seconds"] for p in result.probes}  # None: resumed, not scored now
    report = {"metrics": metrics, "agreement": agreement, "timings": {k: v for k, v in seconds.items() if v is not None},
              "bear_run": str(bear_run) if bear_run else None, "model": loaded.metadata(), "dataset": dataset.summary()}
    write_table(out / "deer_instances.parquet", deer_table)
    write_json(out / "report.json", report)
    templates = "-".join(str(n) for n in sorted({len(r.templates) for r in dataset.relations.values()}))  # "1-3": they differ
    lines = [f"DEER on {dataset.name} ({dataset.n_instances} instances x {templates} templates), "
             f"model {loaded.name}: accuracy = the answer space's argmax is the gold (lm-pub-quiz's convention, as BEAR's score).", ""]
    template_blocks = {int(t): bear_metrics(part, dataset)["overall"] for t, part in deer_table.groupby("template")}
    lines += _side_by_side(metrics["deer"], metrics["bear"], template_blocks)
    lines += ["", "Per-instance agreement (r: Pearson of log10 ranks in the answer space; accuracy: argmax right or not):", ""]
    lines += agreement_markdown(agreement, "group")
    write_text(out / "summary.md", "\n".join(lines) + "\n")
    return report
