"""One BEAR relation's instances table from any statement scorer (a hand-written one, the real trie): the
table the BEAR data-set run makes (``bear_ref.dataset.bear_format`` of the cloze rows), without a model run."""

from __future__ import annotations

import pandas as pd

from bear_ref.cloze_scoring import statement_scores
from bear_ref.dataset import bear_format
from deer.platform.benchmark_rows import ranks_from_scores, task_frame
from kg_data.bear import BearDataset, BearRelation
from kg_data.cloze import bear_cloze_task


def score_relation(scorer, relation: BearRelation) -> pd.DataFrame:
    """One row per (template, instance): gold score, prediction (argmax, first answer on a tie),
    realistic rank, correctness (prediction == gold, as lm-pub-quiz; the strict reading is ``rank == 1``)."""
    dataset = BearDataset(relation.code, relation.path or "", {relation.code: relation}, [])
    task = bear_cloze_task(dataset)
    scores = statement_scores(scorer, task, range(len(task.queries)))
    return bear_format(pd.concat([task_frame(task), ranks_from_scores(task, scores, "bear")], axis=1), dataset, "bear")
