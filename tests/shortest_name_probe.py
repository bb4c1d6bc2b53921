"""A toy third probe, as another package would write it: "the shortest name first".

It ranks every query's candidates by the length of their names (shorter = better), the same
for every query, reading no model at all: a baseline any probe should beat.  It scores both task
shapes: a KG's queries and a cloze benchmark's (LAMA, the BEAR data set: ``deer cloze --probes``).  It is registered
in tests/test_third_probe.py with ``deer.probes.register_probe`` (a package would declare the
``deer.probes`` entry point instead) and runs through the API, the CLI, the run folder,
``join_results`` and ``deer experiment agreement`` with no edit anywhere else.
"""

from __future__ import annotations

import numpy as np

from deer.probes import ProbeRequest, ProbeScores


class ShortestNameProbe:
    name = "shortest"
    summary = "a baseline: shorter candidate names rank higher, whatever the query"
    options = {"by": "characters"}  # or "words"
    text_kind = None  # feeds the model nothing: no length guard needed
    tasks = ("kg", "benchmark")

    def score(self, request: ProbeRequest) -> ProbeScores:
        by_words = request.options["by"] == "words"

        def minus_lengths(names) -> np.ndarray:
            return -np.asarray([len(n.split()) if by_words else len(n) for n in names], dtype=np.float64)

        task, metadata = request.queries, {"rule": f"shorter name first, by {request.options['by']}"}
        if hasattr(task, "candidate_sets"):  # a benchmark: each query over its own candidate set
            return ProbeScores(scores={i: minus_lengths(task.candidate_set(q).labels) for i, q in enumerate(task.queries)},
                               metadata=metadata)
        scores = minus_lengths([task.kg.entity_names[e] for e in task.candidates])
        return ProbeScores(scores=np.broadcast_to(scores, (len(task), len(scores))).copy(), metadata=metadata)
