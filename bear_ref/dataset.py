"""The BEAR score over a data set in the lm-pub-quiz format (BEAR, BEAR-big): every answer fills [Y] and the
whole statement is scored.  Metrics follow lm-pub-quiz 0.3.3 unless asked otherwise (``metric_convention``); the
per-(instance, template) table is metric independent, so either convention can be recomputed from it
(``resummarise_bear_dataset``).  Finished relations are stored as parts, so an interrupted run resumes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

import deer
from deer.backends import as_backend, can_cache
from deer.base.files import as_written, package_versions
from deer.base.work import summed_work
from deer.platform.bear_accuracy import DEFAULT_DOMAIN_SUPPORT, DEFAULT_TIES, accuracy_block, correctness, metric_convention
from deer.platform.benchmark_rows import task_frame
from deer.platform.read_back import read_json_object, read_stored_table
from deer.platform.result import INSTANCES_TABLE, RunResult, check_instances_folder, find_table
from deer.platform.run_spec import model_identity
from deer.platform.stores import key_digest
from deer.platform.tables import markdown_table
from deer.probes import get_probe
from deer.runner import ClozeParts, probe_options, run
from kg_data.bear import BearDataset, load_bear_dataset
from kg_data.cloze import bear_cloze_task

PROBE = "bear-dataset"
STATEMENT_RULE = (
    "template with [X] filled and [Y] = each answer; first character capitalised; "
    "score = summed log-likelihood of the whole statement (every token after BOS), or its PLL"
)
# What a stored part holds (part of the resume key); no metric convention enters it.
PART_COLUMNS = "a cloze run's bear_* rank columns (deer.platform.benchmark_rows): rank = 1 + #higher + #tied/2, argmax first on ties"

# The columns of an instances table (``bear_format``), which a stored part must hold.
INSTANCE_COLUMNS = ("relation", "template", "row", "sub_id", "sub_label", "obj_id", "obj_label", "n_answers", "gold_score",
                    "predicted_id", "predicted_label", "rank", "correct")


def bear_format(table: pd.DataFrame, dataset: BearDataset, probe: str) -> pd.DataFrame:
    """A probe's columns of a cloze run's rows as an instances table: one row per (template, instance)."""
    answer_ids = {code: r.answer_ids for code, r in dataset.relations.items()}
    predicted = table[f"{probe}_predicted_index"].to_numpy()
    return pd.DataFrame({
        "relation": table["relation"], "template": table["template_index"], "row": table["row"], "sub_id": table["fact"],
        "sub_label": table["subject"], "obj_id": [answer_ids[r][g] for r, g in zip(table["relation"], table["gold"], strict=True)],
        "obj_label": table["answer"], "n_answers": table["n_candidates"], "gold_score": table[f"{probe}_gold_score"],
        "predicted_id": [answer_ids[r][p] for r, p in zip(table["relation"], predicted, strict=True)],
        "predicted_label": table[f"{probe}_predicted"], "rank": table[f"{probe}_rank"], "correct": table[f"{probe}_correct"] == 1,
    })


def bear_metrics(table: pd.DataFrame, dataset: BearDataset, domain_support: str = DEFAULT_DOMAIN_SUPPORT,
                 ties: str = DEFAULT_TIES) -> dict:
    """Accuracy blocks (overall, per relation, domain, cardinality); a relation without domains is under "unknown"."""
    convention = metric_convention(domain_support, ties)
    domains = {code: relation.domains or ["unknown"] for code, relation in dataset.relations.items()}
    cardinality = {code: relation.cardinality for code, relation in dataset.relations.items()}
    missing = sorted(set(table["relation"]) - set(domains))
    if missing:
        raise ValueError(f"the table holds relation(s) {', '.join(missing)} that the data set {dataset.path} lacks")
    frame = table.assign(is_correct=correctness(table, ties), weight=1.0)
    by_domain = frame.assign(domain=frame["relation"].map(domains))
    if domain_support == "divided":
        by_domain["weight"] = 1.0 / by_domain["domain"].map(len)
    by_domain = by_domain.explode("domain")
    return {
        "convention": convention,
        "overall": accuracy_block(frame),
        "per_relation": {
            code: {**accuracy_block(part), "domains": domains[code], "cardinality": cardinality[code]}
            for code, part in frame.groupby("relation", sort=True)
        },
        "per_domain": {domain: accuracy_block(part) for domain, part in by_domain.groupby("domain", sort=True)},
        "per_cardinality": {c: accuracy_block(part) for c, part in frame.assign(cardinality=frame["relation"].map(cardinality)).groupby("cardinality")},
        "cardinality_rule": "N:1 if some answer is the gold object of more than one subject in the full relation file, else 1:1 "
        "(lm-pub-quiz: 'multiple' vs 'single instance per answer')",
    }


def _instance_support(metrics: dict, domain: str) -> float:
    """A domain's instances, each relation's divided by its number of domains (from the relations' blocks: the rows'
    support over the number of templates is that only where every relation has as many templates)."""
    return sum(block["instances"] / len(block["domains"]) for block in metrics["per_relation"].values() if domain in block["domains"])


def summary_markdown(metrics: dict) -> str:
    """Markdown tables of a BEAR score: overall, per domain, per cardinality, per relation."""
    overall = metrics["overall"]
    templates = ", ".join(f"template {t}: {a:.3f}" for t, a in overall["accuracy_per_template"].items())
    convention = metrics.get("convention")
    lines = [
        f"BEAR score (lm-pub-quiz's accuracy: the mean over templates where every relation has each) "
        f"**{overall['accuracy_mean']:.4f}**, spread (std over templates) "
        f"{overall['accuracy_std']:.4f}; {templates}; random baseline {overall['random_baseline']:.4f}"
        + (f" (chance-adjusted score {overall['accuracy_mean_adjusted']:.4f})" if overall.get("accuracy_mean_adjusted") is not None else "")
        + f"; {overall['instances']} instances.",
    ]
    divided = convention is not None and convention["domain_support"] == "divided"
    if convention:
        lines += ["", f"Metric convention **{convention['name']}**: ties: {convention['ties_rule']}; "
                      f"domains: {convention['domain_support_rule']}."]
    for title, key in (("domain", "per_domain"), ("cardinality", "per_cardinality"), ("relation", "per_relation")):
        with_support = key == "per_domain" and divided
        rows = [{title: name, "accuracy": block["accuracy_mean"], "std over templates": block["accuracy_std"],
                 "random": block["random_baseline"], "adjusted": block.get("accuracy_mean_adjusted"), "instances": block["instances"],
                 **({"support": _instance_support(metrics, name)} if with_support else {})}
                for name, block in metrics[key].items()]
        formats = {**dict.fromkeys(["accuracy", "std over templates", "random", "adjusted"], ".3f"), "support": ".1f"}
        lines += ["", *markdown_table(rows, formats).splitlines()] if rows else []
        if with_support:
            lines += ["", "support: the domain's instances with each relation's divided by its number of domains (the "
                          "weight of the relation in the domain's accuracy); instances: undivided."]
    return "\n".join(lines) + "\n"


def check_out_dir(out_dir: Path) -> None:
    """Refuse a folder that holds another kind of run, whose metrics.json/metadata.json we would overwrite."""
    check_instances_folder(Path(out_dir), "bear", PROBE, "overall", label="a BEAR data-set run")


def run_settings(metadata: dict) -> dict:
    """What a data-set run is of, as its metadata records it; a folder holds one such run."""
    model = metadata.get("model") or {}
    return {**{f"model {name}": model.get(name) for name in ("fingerprint", "tokenizer_fingerprint", "dtype")},
            "dataset": (metadata.get("dataset") or {}).get("name"),
            **{name: metadata.get(name) for name in ("selection", "backend", "scoring")}}


def refuse_other_settings(out_dir: Path, settings: dict) -> None:
    """ValueError naming what differs when ``out_dir`` holds a finished data-set run of other ``settings``,
    which this run would replace (a second seed or PLL variant into the default folder lost the first's)."""
    path = Path(out_dir) / "metadata.json"
    stored = read_json_object(path).get("bear") if path.exists() else None
    if isinstance(stored, dict) and stored.get("probe") == PROBE:
        differ = [f"{name}: {value!r} there, {settings[name]!r} now" for name, value in run_settings(stored).items()
                  if value != settings[name]]
        if differ:
            raise ValueError(f"{out_dir} holds a BEAR data-set run made otherwise ({'; '.join(differ)}), which this run would "
                             "replace: give it another --out (out=), or remove that folder")


def resume_key(dataset: BearDataset, loaded, selection: dict, method, backend_key: dict | None = None) -> dict:
    """What a stored part depends on; ``method``: the statement scorer (or its ``statements_method``),
    ``backend_key``: what the backend's scores depend on beyond the model (its ``store_key``)."""
    return {
        **model_identity(loaded),
        "dataset": dataset.name,  # its content enters per relation: each part is named by its relation's digest
        "selection": selection,
        "method": getattr(method, "statements_method", method),
        "statement_rule": STATEMENT_RULE,
        "part_columns": PART_COLUMNS,
        "toolkit": deer.__version__,  # another version's probes may score otherwise: its parts are scored again
        **(backend_key or {}),
    }


def dataset_result(table: pd.DataFrame, metrics: dict, metadata: dict, out_dir: Path | None) -> RunResult:
    """The data-set score as a :class:`RunResult`, saved in ``out_dir`` unless it is None."""
    result = RunResult.of_probe("bear", table, metrics, metadata, layout=INSTANCES_TABLE, summary=summary_markdown(metrics))
    if out_dir is not None:
        result.save(out_dir)
    return result


def run_bear_dataset(dataset: BearDataset, runner, out_dir: Path | None, selection: dict, token_budget: int | None = None,
                     pll_variant: str = "within_word_l2r", show_progress: bool = True,
                     domain_support: str = DEFAULT_DOMAIN_SUPPORT, ties: str = DEFAULT_TIES,
                     backend: str | None = None) -> RunResult:
    """Score ``dataset`` with the BEAR probe through the one cloze loop, as lm-pub-quiz's instances table, on
    ``runner``: a backend opened on the model (``deer.backends.open_backend``; a ``LoadedModel`` is still taken for
    one release and opened on ``backend``, None: hf, with ``token_budget``, None: 512 statement tokens).

    ``out_dir``: each finished relation is stored there as a part named by its content digest (a run resumes;
    an edited relation is scored anew), and the result saved; None: nothing is written.  ``selection``: part of
    the resume key; the metric convention is not, so it can change on resume.  ``backend``: 'hf' or 'plain'
    (a cross-check, which stores nothing).  Another kind of run in ``out_dir`` (ValueError) and a statement
    longer than the model's positions (PromptTooLongError) are refused before anything is scored or written.
    """
    convention = metric_convention(domain_support, ties)
    if not dataset.relations:
        raise ValueError(f"{dataset.path}: no relations to score")
    probe = get_probe("bear")
    options = probe_options(probe, {"pll_variant": pll_variant})
    runner = as_backend(runner, backend, token_budget=token_budget, show_progress=show_progress)
    backend, loaded = runner.name, runner.loaded
    method = runner.statement_scorer(pll_variant).statements_method
    key = resume_key(dataset, loaded, selection, method, runner.store_key)
    if out_dir is not None:
        check_out_dir(out_dir)
        refuse_other_settings(out_dir, run_settings(as_written({"model": loaded.metadata(), "dataset": dataset.summary(),
                                                               "selection": selection, "backend": backend, "scoring": method})))
    # nothing is kept for the plain backend (a cross-check) or a model whose fingerprint hashes no weights
    keeps = can_cache(backend) and loaded.content_addressed
    parts_dir = None if out_dir is None or not keeps else Path(out_dir) / "parts" / key_digest(key)
    task = bear_cloze_task(dataset)
    started = time.perf_counter()  # the one length guard names the data set's files and lines
    scored = run(task, [probe], runner, {probe.name: options}, parts=ClozeParts(parts_dir, key, by="relation"),
                 show_progress=show_progress)
    table = bear_format(pd.concat([task_frame(task), scored.rows(probe.name)], axis=1), dataset, probe.name)
    table = table.sort_values(["relation", "template", "row"], ignore_index=True)
    metrics = bear_metrics(table, dataset, domain_support, ties)
    elapsed = time.perf_counter() - started
    statements = sum(part["statements"] for part in scored.metadata[probe.name])
    metadata = {
        "probe": PROBE,
        "model": loaded.metadata(),
        "dataset": dataset.summary(),
        "relation_digests": {code: relation.digest() for code, relation in dataset.relations.items()},
        "selection": selection,
        "backend": backend,
        "scoring": method,
        "statement_rule": STATEMENT_RULE,
        "metric_convention": convention,
        "resume_key": key_digest(key),
        "relations_resumed": scored.resumed[probe.name],
        "work": {**summed_work(part["work"] for part in scored.metadata[probe.name]), "statements_scored_now": statements},
        "timings": {"seconds": round(elapsed, 3), "statements_per_second": statements / elapsed if elapsed and statements else None},
        "versions": package_versions(),
    }
    return dataset_result(table, metrics, metadata, out_dir)


def find_instances_table(out_dir: Path) -> Path:
    path = find_table(out_dir, "instances")
    if path is None:
        raise ValueError(f"{out_dir} holds no instances table (instances.parquet or instances.csv) of a BEAR data-set run")
    return path


def resummarise_bear_dataset(out_dir: Path, dataset: BearDataset | None = None,
                             domain_support: str = DEFAULT_DOMAIN_SUPPORT, ties: str = DEFAULT_TIES) -> RunResult:
    """Recompute metrics.json, summary.md and metadata.json of a finished run from its instances table (nothing is
    re-scored).  ``dataset`` defaults to the one metadata.json names; a given one must match the table."""
    out_dir = Path(out_dir)
    convention = metric_convention(domain_support, ties)
    check_out_dir(out_dir)
    metadata_path = out_dir / "metadata.json"
    if not metadata_path.exists():
        raise ValueError(f"{out_dir} holds no metadata.json of a BEAR data-set run")
    metadata = read_json_object(metadata_path).get("bear")
    if not isinstance(metadata, dict) or metadata.get("probe") != PROBE:
        raise ValueError(f"{metadata_path} describes no BEAR data-set run")
    table_path = find_instances_table(out_dir)
    table = read_stored_table(table_path, INSTANCE_COLUMNS)
    if dataset is None:
        selection, recorded = metadata.get("selection") or {}, metadata.get("dataset")
        if not isinstance(selection, dict) or not isinstance(recorded, dict) or not isinstance(recorded.get("path"), str):
            raise ValueError(f"{metadata_path} records no data set path and selection; pass the data set")
        dataset = load_bear_dataset(recorded["path"], relations=selection.get("relations"),
                                    max_instances=selection.get("max_instances"), seed=selection.get("seed", 0))
    expected = {code: sorted(zip(r.subject_ids, [r.answer_ids[g] for g in r.gold], strict=True))
                for code, r in dataset.relations.items()}
    found = {code: sorted(zip(part["sub_id"].astype(str), part["obj_id"].astype(str), strict=True))
             for code, part in table[table["template"] == 0].groupby("relation")}
    if found != expected:
        raise ValueError(f"the instances table in {out_dir} does not match the data set {dataset.path} "
                         "(relations, or their subjects and gold answers, differ); pass the data set and selection of that run")
    metrics = bear_metrics(table, dataset, domain_support, ties)
    previous = metadata.get("metric_convention")  # None: 0.1's run, which recorded none
    metadata = {
        **metadata,
        "metric_convention": convention,
        "resummarised": {
            "from": table_path.name,
            "previous_metric_convention": previous.get("name") if isinstance(previous, dict) else previous,
            "versions": package_versions(),
        },
    }
    return dataset_result(table, metrics, metadata, out_dir)
