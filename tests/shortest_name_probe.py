"""A toy third probe, as another package would write it: "the shortest name first".

It ranks every query's candidates by the length of their names (shorter = better), the same
for every query, reading no model at all: a baseline any probe should beat.  It scores the general
task shape only (``score``: each query over its candidate set), so it runs on a cloze
benchmark (LAMA, the BEAR data set: ``deer cloze --probes``) and on a KG, whose queries the runner
hands it in that shape (``deer.platform.task_texts.kg_benchmark_task``).  It is registered
in tests/test_probe_plugins.py with ``deer.probes.register_probe`` (a package would declare the
``deer.probes`` entry point instead) and runs through the API, the CLI, the run folder,
``join_results`` and ``deer experiment agreement`` with no edit anywhere else.
"""

from __future__ import annotations

import numpy as np

from deer.probes import OptionValues, ProbeRequest, ProbeScores


class ShortestNameProbe:
    name = "shortest"
    summary = "a baseline: shorter candidate names rank higher, whatever the query"
    options = {"by": "characters"}
    option_values = {"by": OptionValues(str, ("characters", "words"))}

    def score(self, request: ProbeRequest) -> ProbeScores:  # each query over its own candidate set
        task = request.task
        return ProbeScores(scores={i: self.minus_lengths(request, task.candidate_set(q).labels) for i, q in enumerate(task.queries)},
                           metadata=self.rule(request))

    @staticmethod
    def minus_lengths(request: ProbeRequest, names) -> np.ndarray:
        by_words = request.options["by"] == "words"
        return -np.asarray([len(n.split()) if by_words else len(n) for n in names], dtype=np.float64)

    @staticmethod
    def rule(request: ProbeRequest) -> dict:
        return {"rule": f"shorter name first, by {request.options['by']}"}
