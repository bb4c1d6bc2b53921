"""The lm-eval side by side (``benchmarks/bench_lm_eval.py``) writes lm-eval's ``bear`` task faithfully: one
document per (relation, template, instance), the statements of every answer in the answer space's order,
the gold's index.  (lm-eval itself is a peer installed apart; the benchmark runs it, CI does not.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kg_data.bear import fill_statement, load_bear_dataset
from tests.benchmark_folders import write_dataset

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def bench_lm_eval(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import each other as scripts do
    import bench_lm_eval

    yield bench_lm_eval
    sys.modules.pop("bench_lm_eval", None)


def test_the_local_bear_task_is_lm_evals_layout(tmp_path, bench_lm_eval):
    subset = load_bear_dataset(write_dataset(tmp_path / "data" / "BEARmini"), relations=["P36"])
    keys = bench_lm_eval.write_task(subset, tmp_path / "task")
    docs = [json.loads(line) for line in (tmp_path / "task" / "bear_local.jsonl").read_text().splitlines()]
    relation = subset.relations["P36"]
    assert len(docs) == len(keys) == len(relation.templates) * len(relation)
    first = docs[len(relation)]  # the second template's first instance
    assert first["text_options"] == [fill_statement(relation.templates[1], relation.subject_labels[0], answer)
                                     for answer in relation.answer_labels]
    assert first["correct"] == int(relation.gold[0]) and keys[len(relation)] == ("P36", int(relation.gold[0]))
    task = (tmp_path / "task" / "bear_local.yaml").read_text()
    for line in ('doc_to_text: ""', 'target_delimiter: ""', "doc_to_choice: text_options", "doc_to_target: correct",
                 f"test: {tmp_path / 'task' / 'bear_local.jsonl'}"):
        assert line in task
    assert bench_lm_eval.per_relation_accuracy([("P36", 0), ("P36", 1), ("P37", 2)], [0, 0, 2]) == {"P36": 0.5, "P37": 1.0}
