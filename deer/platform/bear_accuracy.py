"""The BEAR score's accuracy blocks (lm-pub-quiz's view of a run's rows), below the probes so that a BEAR data-set
folder read back is checked against its instances table as KG and cloze folders are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from deer.base.errors import check_text
from deer.base.files import as_written
from deer.platform.metrics import adjusted_index
from deer.platform.read_back import StoredFileError

DOMAIN_SUPPORT = {
    "divided": "a relation with k domains adds 1/k of its support to each domain "
    "(lm-pub-quiz 0.3.3 DatasetResults.get_metrics(accumulate='domains', divide_support=True))",
    "full": "a relation with k domains counts with its full support in each domain",
}
TIES = {
    "first": "prediction = highest-scoring answer, the first in answer-space order on a tie (argmax); "
    "correct iff prediction == gold (lm-pub-quiz 0.3.3 Accuracy)",
    "wrong": "correct iff the gold answer scores strictly highest (a tie with the gold counts as wrong)",
}
DEFAULT_DOMAIN_SUPPORT, DEFAULT_TIES = "divided", "first"
CONVENTION_NAMES = {("divided", "first"): "lm-pub-quiz-0.3.3",
                    ("full", "wrong"): "full-domain-support+strict-ties (this toolkit before issue 9)"}


def metric_convention(domain_support: str = DEFAULT_DOMAIN_SUPPORT, ties: str = DEFAULT_TIES) -> dict:
    """The named convention the metrics are computed under (stored in metrics.json and metadata.json)."""
    for what, value, known in (("domain_support", domain_support, DOMAIN_SUPPORT), ("ties", ties, TIES)):
        check_text(what, value, tuple(known))  # an OptionError (a ValueError) naming it
    name = CONVENTION_NAMES.get((domain_support, ties), f"domain_support={domain_support}+ties={ties}")
    return {"name": name, "domain_support": domain_support, "ties": ties,
            "domain_support_rule": DOMAIN_SUPPORT[domain_support], "ties_rule": TIES[ties]}


def correctness(table: pd.DataFrame, ties: str = DEFAULT_TIES) -> pd.Series:
    """Per row: correct under ``ties`` (never read from a stored ``correct`` column, whose convention may differ)."""
    metric_convention(ties=ties)
    if ties == "first":  # an invalid gold score ranks last: never correct, though an all-invalid row's argmax is its first
        gold_valid = np.isfinite(pd.to_numeric(table["gold_score"], errors="coerce").to_numpy(dtype=np.float64))
        return (table["predicted_id"].astype(str) == table["obj_id"].astype(str)) & gold_valid
    return table["rank"] == 1


def weighted_mean(values: pd.Series, weights: pd.Series) -> float:
    return float(np.average(values.astype(float), weights=weights))


def accuracy_block(frame: pd.DataFrame) -> dict:
    """Accuracy per template, their mean (the BEAR score) and spread, the random baseline and the adjusted index.

    ``frame`` holds ``is_correct`` and ``weight`` (1, or 1/k for a relation with k domains under divided support).
    The BEAR score pools every (instance, template) row as lm-pub-quiz does: where relations have different numbers
    of templates that is the templates' mean weighted by their support, not their plain mean.
    """
    if not len(frame):
        empty = ["accuracy_mean", "accuracy_std", "accuracy_min", "accuracy_max", "accuracy", "random_baseline", "mean_rank",
                 "accuracy_mean_adjusted"]
        return {"instances": 0, "support": 0.0, "accuracy_per_template": {}, **dict.fromkeys(empty)}
    weights = frame["weight"]
    rows_per_template = frame.groupby("template").size()
    per_template = frame.groupby("template")[["is_correct", "weight"]].apply(
        lambda part: weighted_mean(part["is_correct"], part["weight"]))
    random = weighted_mean(1.0 / frame["n_answers"], weights)
    accuracy = weighted_mean(frame["is_correct"], weights)
    # a relation's templates are 0..k-1, each on all its rows: equal row counts = every template on the same rows (BEAR,
    # BEAR-big), where the plain mean is that pooled accuracy: kept, so the stored scores stay the same bit for bit
    score = float(per_template.mean()) if rows_per_template.nunique() == 1 else accuracy
    return {
        "instances": int(rows_per_template.max()),
        "support": float(weights.sum()),
        "accuracy_per_template": {int(t): float(a) for t, a in per_template.items()},
        "accuracy_mean": score,
        "accuracy_std": float(per_template.std(ddof=0)),
        "accuracy_min": float(per_template.min()),
        "accuracy_max": float(per_template.max()),
        "accuracy": accuracy,
        "random_baseline": random,
        "mean_rank": weighted_mean(frame["rank"], weights),
        "accuracy_mean_adjusted": adjusted_index({"accuracy": score}, {"accuracy": random})["accuracy"],
    }


def check_accuracy_metrics(path: Path, table_path: Path, table: pd.DataFrame, metrics: dict) -> None:
    """A BEAR data-set score's overall and per-relation blocks, made again from the instances table under the stored
    tie convention, must agree with ``metrics.json``.  The per-domain blocks need the data set's domains."""
    stored = metrics.get("bear", {})
    if (stored.get("convention") or {}).get("ties") not in TIES:  # stored since 0.2: the rows cannot be judged without it
        raise StoredFileError(path, f"records no metric convention (bear.convention.ties), as deer-probe-toolkit 0.1 wrote it, "
                                    f"which 0.2 does not read; recompute the metrics from {table_path.name}: "
                                    f"`deer bear-dataset --resummarise --dataset DATASET --out {path.parent}`")
    ties = stored["convention"]["ties"]
    frame = table.assign(is_correct=correctness(table, ties), weight=1.0)
    per_relation = stored.get("per_relation", {})
    made = {code: accuracy_block(part) for code, part in frame.groupby("relation", sort=True)}
    if "per_relation" in stored and set(map(str, made)) != set(per_relation):
        raise StoredFileError(path, f"its per-relation blocks ({', '.join(sorted(per_relation))}) are not the relations of "
                                    f"{table_path.name} ({', '.join(sorted(map(str, made)))})")
    blocks = [("overall", stored.get("overall"), accuracy_block(frame))]
    blocks += [(f"relation {code}", per_relation.get(str(code)), block) for code, block in made.items()]
    for name, kept, block in blocks:
        if not isinstance(kept, dict):
            continue
        differing = [key for key, value in as_written(block).items() if key in kept and kept[key] != value]
        if differing:
            raise StoredFileError(path, f"its bear {name} {differing[0]} disagrees with {table_path.name} "
                                        "(made again from its rows)")
