"""One task shape for every probe: a KG's queries expressed as queries over a named candidate set
(``deer.platform.templates.kg_benchmark_task``) give the text rules the same statements and prompts
as the KG templates, and a probe scoring only that shape ranks a KG as its fast path does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from deer.backends.models import as_loaded_model
from deer.platform.cloze_texts import deer_query_text, lama_rule
from deer.platform.length_guard import LengthCheck, PromptTooLongError
from deer.platform.templates import KG_CANDIDATE_SET, PromptTemplates, kg_benchmark_task
from deer.probes import get_probe
from deer.runner import run_probe
from kg_data import load_kg
from kg_data.cloze import statement
from kg_data.queries import build_queries


class GeneralShapeOnly:
    """A built-in probe handed a KG's task without its ``QuerySet`` (``kg_queries``): its one ``score``
    reads the queries over the one candidate set, as a probe without a way of its own for a large set does."""

    def __init__(self, probe):
        self.probe = probe
        self.name, self.summary, self.options, self.length_checks = probe.name, probe.summary, probe.options, probe.length_checks

    def score(self, request):
        assert request.task.kg_queries is not None  # the runner's KG task: hidden here
        return self.probe.score(dataclasses.replace(request, task=dataclasses.replace(request.task, kg_queries=None)))


def test_a_kgs_queries_as_a_benchmark_task_keep_their_texts(tiny_kg_dir):
    queries = build_queries(load_kg(tiny_kg_dir), "train")
    templates = PromptTemplates(k_shot=2)
    task = kg_benchmark_task(queries, templates)
    kg = queries.kg
    assert [q.gold for q in task.queries] == queries.gold.tolist() and list(task.candidate_sets) == [KG_CANDIDATE_SET]
    assert task.kg_queries is queries and len(task.queries) == len(queries)
    assert tuple(task.candidate_sets[KG_CANDIDATE_SET].labels) == tuple(kg.entity_names[e] for e in queries.candidates)
    assert tuple(task.candidate_sets[KG_CANDIDATE_SET].descriptions) == tuple(kg.entity_descriptions[e] for e in queries.candidates)
    for query, triple in zip(task.queries, queries.triples.tolist(), strict=True):
        for position, entity in enumerate(queries.candidates):
            label = task.candidate_sets[KG_CANDIDATE_SET].labels[position]
            assert statement(query, label) == templates.query_context(kg, triple) + templates.continuation(kg, entity)
        assert deer_query_text(query) == templates.query_prompt(kg, tuple(triple))
        assert lama_rule(query) == "next-token"  # by LAMA's rule: only ')' follows the answer slot


def test_a_kgs_task_names_relations_sharing_a_name_apart(tiny_kg_dir):
    """Two relation ids of one name are two relations in a KG's task, labelled as the KG probes' ranks
    tables label them ("name (id)"; they were one relation, pooled by relation); distinct names stay as they were."""
    kg = load_kg(tiny_kg_dir)
    templates = PromptTemplates(k_shot=0)
    plain = kg_benchmark_task(build_queries(kg, "test"), templates)
    assert [q.relation for q in plain.queries] == [kg.relation_names[r] for r in build_queries(kg, "test").triples[:, 1]]
    assert [q.relation for q in plain.queries] == ["capital of", "hypernym", "hypernym", "hypernym"]
    names = ["hypernym" if name == "capital of" else name for name in kg.relation_names]
    shared = kg_benchmark_task(build_queries(dataclasses.replace(kg, relation_names=names), "test"), templates)
    assert [q.relation for q in shared.queries] == ["hypernym (capital_of)"] + ["hypernym (_hypernym)"] * 3


def test_a_slot_marker_in_a_kg_text_is_refused_by_query(tiny_kg_dir):
    kg = load_kg(tiny_kg_dir)
    kg.entity_names[int(build_queries(kg, "train").triples[0, 0])] = "a [Y] name"
    with pytest.raises(ValueError, match="its text holds .X. or .Y."):
        list(kg_benchmark_task(build_queries(kg, "train"), PromptTemplates(k_shot=0)).queries)  # made when read


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


class LongWinded:
    """A probe feeding texts of its own kind: each query's statement said 400 times (more than the tiny
    model's 2048 positions).  It never scores: the run's one guard refuses it first."""

    name, summary, options = "longwinded", "repeats itself", {}

    def length_checks(self, task, templates, backend):
        texts = [" ".join([statement(q, q.answer)] * 400) for q in task.queries]
        yield LengthCheck.of("repeated statement", texts, lambda i: f"query {i} of {task.name}", "say it once")

    def score(self, request):
        raise AssertionError("scored although its texts do not fit")


def test_the_one_guard_checks_the_texts_a_probe_hands_it(monkeypatch, tiny_kg_dir, tiny_clm_dir, tiny_clm, tmp_path):
    """The guard knows no kind of text: a probe's own (``length_checks``) are counted through the backend and
    refused, named as the probe names them, on a KG run (API and CLI) and on a cloze run, before any scoring
    and before anything is written."""
    from click.testing import CliRunner

    import deer.probes
    from deer.runner import run_cloze
    from experiments.cli import main

    monkeypatch.setitem(deer.probes._REGISTERED, "longwinded", LongWinded)
    message = r"query 0 of tiny_kg: its repeated statement is \d+ tokens, more than the model's 2048 positions \(\d+ more too long\); say it once"
    with pytest.raises(PromptTooLongError, match=message):
        run_probe("longwinded", str(tiny_kg_dir), str(tiny_clm_dir), k_shot=0, show_progress=False, out=tmp_path / "api")
    result = CliRunner().invoke(main, ["probe", "--probe", "longwinded", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--k-shot", "0", "--out", str(tmp_path / "cli")])
    assert result.exit_code == 1 and "its repeated statement is" in result.output, result.output
    task = dataclasses.replace(kg_benchmark_task(build_queries(load_kg(tiny_kg_dir), "test"), PromptTemplates(k_shot=0)),
                               kg_queries=None)
    with pytest.raises(PromptTooLongError, match=message):
        run_cloze(task, as_loaded_model(tiny_clm), ["longwinded"], out=tmp_path / "cloze", show_progress=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tiny_kg"]  # no run folder was made
