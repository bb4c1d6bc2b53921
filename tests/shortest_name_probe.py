"""A toy third probe, as another package would write it: "the shortest name first".

It ranks every query's candidates by the length of their names (shorter = better), the same
for every query, reading no model at all: a baseline any probe should beat.  It is registered
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

    def score(self, request: ProbeRequest) -> ProbeScores:
        kg, queries = request.queries.kg, request.queries
        names = [kg.entity_names[e] for e in queries.candidates]
        by_words = request.options["by"] == "words"
        lengths = np.asarray([len(n.split()) if by_words else len(n) for n in names], dtype=np.float64)
        scores = np.broadcast_to(-lengths, (len(queries), len(names))).copy()
        return ProbeScores(scores=scores, metadata={"rule": f"shorter name first, by {request.options['by']}"})
