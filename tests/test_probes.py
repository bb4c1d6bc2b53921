"""The probe protocol (deer/probes.py): a probe is one ``score(request)``; one scoring only the general task shape
(queries over a named candidate set) ranks a KG as its fast path does, and a probe missing ``score`` or written to
the 0.1 protocol is refused by name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from deer.backends.models import as_loaded_model
from deer.probes import get_probe
from deer.runner import run_probe
from kg_data import load_kg
from kg_data.queries import build_queries


class GeneralShapeOnly:
    """A built-in probe handed a KG's task as a small set's (not ``streamed``, its texts made of its queries'
    templates): its one ``score`` body scores it as a benchmark's set, not a chunk at a time."""

    def __init__(self, probe):
        self.probe = probe
        self.name, self.summary, self.options, self.length_checks = probe.name, probe.summary, probe.options, probe.length_checks

    def score(self, request):
        task = request.task
        assert [s.streamed for s in task.candidate_sets.values()] == [True]  # the runner's KG task: made small here
        small = {name: dataclasses.replace(s, streamed=False) for name, s in task.candidate_sets.items()}
        return self.probe.score(dataclasses.replace(request, task=dataclasses.replace(task, candidate_sets=small, texts=None)))


@pytest.mark.parametrize("name", ["bear", "deer"])
def test_a_probe_scoring_only_the_general_shape_ranks_a_kg_as_its_fast_path(name, tiny_kg_dir, tiny_clm):
    """BEAR (whole-statement log-likelihood) and DEER (cosine of PromptEOL vectors) read the same texts
    either way, so every raw and filtered rank is equal (they spread from 1 to 10 of 12 here)."""
    model, tokenizer = tiny_clm
    queries = build_queries(load_kg(tiny_kg_dir), "train")
    loaded = as_loaded_model(model, tokenizer)
    fast = run_probe(name, queries, loaded, k_shot=2, show_progress=False)
    general = run_probe(GeneralShapeOnly(get_probe(name)), queries, loaded, k_shot=2, show_progress=False)
    for rank_type in ("raw", "filtered"):
        np.testing.assert_array_equal(general.ranks(rank_type), fast.ranks(rank_type))
    assert general.probe == fast.probe == name and len(set(fast.ranks("raw"))) > 3


def test_a_probe_without_a_score_method_is_refused_by_name(monkeypatch):
    import deer.probes

    class Scoreless:
        name, summary, options = "scoreless", "scores nothing", {}

        def rank(self, request):
            raise AssertionError("never called")

    monkeypatch.setitem(deer.probes._REGISTERED, "scoreless", Scoreless)
    with pytest.raises(ValueError, match=r"probe 'scoreless' has no score\(request\)"):
        get_probe("scoreless")


class Old:
    """A probe of 0.1's protocol: ``score`` (its KG fast path) beside ``score_benchmark``, or its texts named by ``text_kind``."""

    name, summary, options = "old", "0.1's protocol", {}

    def score(self, request):
        raise AssertionError("never scored: refused first")


OLD_SPELLINGS = [  # (attributes of a 0.1 probe, what the refusal says instead)
    ({"score_benchmark": Old.score}, r"score_benchmark is read no more: one method, score\(request\), scores every task"),
    ({"text_kind": "statements"}, r"text_kind is read no more: .* length_checks\(task, templates, backend\)"),
    ({"text_kind": "paragraphs"}, r"text_kind is read no more"),  # an unknown kind too
    ({"score_benchmark": Old.score, "text_kind": "prompts"}, r"score_benchmark is read no more.*; text_kind is read no more"),
]


@pytest.mark.parametrize(("attributes", "instead"), OLD_SPELLINGS, ids=["score_benchmark", "text_kind", "unknown-text_kind", "both"])
def test_a_probe_of_the_0_1_protocol_is_refused_saying_what_to_write_instead(attributes, instead, monkeypatch):
    """0.1's protocol (``score_benchmark``; ``text_kind`` read as a built-in probe's length checks) was read, with a
    DeprecationWarning, until 0.3; 0.2 is its first release, so it is refused by name, given or registered."""
    import deer.probes

    old = type("Old", (Old,), attributes)
    with pytest.raises(ValueError, match=f"probe 'old' is written for 0.1's protocol: {instead}"):
        run_probe(old(), None, None)  # refused before the queries or the model are read
    monkeypatch.setitem(deer.probes._REGISTERED, "old", old)
    with pytest.raises(ValueError, match=instead):
        get_probe("old")
