"""Options are used as given or refused, never read as something else (the audit of 2026-11-27): text booleans,
a selection given beside a loaded data set, a group option of `deer data`, query sizes the split cannot give."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import bear_ref
import deer
from deer.base.errors import OptionError
from deer.platform.run_options import QuerySelection
from deer.platform.templates import PromptTemplates
from experiments.cli import main
from kg_data.bear import load_bear_dataset
from tests.benchmark_folders import write_dataset


def test_text_booleans_are_refused_not_read_as_true(tiny_kg_dir):
    """bool("false") is True: a text or number given for a yes/no option was read as yes."""
    with pytest.raises(OptionError, match="query_trailing_space='false': must be True, False or None"):
        PromptTemplates(query_trailing_space="false")
    with pytest.raises(OptionError, match="exclude_head='False': must be True or False"):
        QuerySelection(exclude_head="False")
    with pytest.raises(OptionError, match="exclude_head"):  # through the API, before any model is looked for
        deer.probe(tiny_kg_dir, "no-such-model-anywhere", exclude_head="False")
    assert PromptTemplates(query_trailing_space=False).query_trailing_space is False
    assert QuerySelection(exclude_head=True).exclude_head is True


def test_a_loaded_bear_dataset_is_scored_as_loaded_and_its_selection_recorded(tmp_path):
    """bear_dataset(BearDataset, relations=...) scored every relation while recording the selection asked for."""
    folder = write_dataset(tmp_path / "BEARmini")
    whole = load_bear_dataset(str(folder))
    with pytest.raises(OptionError, match="the BearDataset given was loaded with"):
        bear_ref.bear_dataset(whole, "no-such-model-anywhere", relations=["P37"], max_instances=1)
    part = load_bear_dataset(str(folder), relations=["P37"], max_instances=2, seed=1)
    assert part.summary()["selection"] == {"relations": ["P37"], "max_instances": 2, "seed": 1}
    assert whole.summary()["selection"] == {"relations": None, "max_instances": None, "seed": 0}


def test_a_seed_given_beside_a_sampled_bear_dataset_is_refused_not_dropped(tmp_path):
    """bear_dataset(BearDataset sampled with seed 0, seed=5) scored seed 0's sample without a word (only relations and
    max_instances were compared with the data set's selection)."""
    folder = write_dataset(tmp_path / "BEARmini")
    sampled = load_bear_dataset(str(folder), max_instances=2, seed=0)
    with pytest.raises(OptionError, match="the BearDataset given was loaded with"):
        bear_ref.bear_dataset(sampled, "no-such-model-anywhere", seed=5)
    with pytest.raises(OptionError, match="the BearDataset given was loaded with"):
        bear_ref.bear_dataset(load_bear_dataset(str(folder)), "no-such-model-anywhere", seed=5)


def test_deer_data_fetch_reads_the_groups_data_dir(tmp_path):
    """`deer data --data-dir X fetch NAME` fetched into the default root, ignoring X."""
    result = CliRunner().invoke(main, ["data", "--data-dir", str(tmp_path / "mine"), "fetch", "wn18rr", "--offline"])
    assert result.exit_code == 1 and str(tmp_path / "mine" / "wn18rr") in result.output, result.output


def test_compute_time_says_which_query_sizes_it_leaves_out(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """Sizes above the split's query count were dropped without a word (the fit on other sizes than asked)."""
    pytest.importorskip("deer.backends.plain")
    result = CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--split", "train", "--query-sizes", "1,3,500", "--repeats", "1", "--candidates", "2",
                                       "--plain-statements", "1", "--deer-queries", "2", "--scorers", "plain",
                                       "--out", str(tmp_path / "ct")])
    assert result.exit_code == 0, result.output
    assert "query sizes 500 left out: the train split has 9 queries" in result.output


def test_compute_time_says_which_counts_it_times_with_fewer(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """--candidates, --deer-candidates and --deer-queries above the KG's entities or the split's queries were cut to them
    without a word, while compute_time.json's settings record the values asked."""
    result = CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--query-sizes", "1,2", "--repeats", "1", "--no-warmup", "--scorers", "bear_ref",
                                       "--candidates", "50", "--deer-candidates", "100", "--deer-queries", "100",
                                       "--out", str(tmp_path / "ct")])
    assert result.exit_code == 0, result.output
    assert "candidates 50 (there are 12), deer_candidates 100 (there are 12), deer_queries 100 (there are 4)" in result.output


def test_run_probes_opens_a_name_with_every_loading_option(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """run_probes (the experiments' runs) opened a model by name with dtype and device only: model_kwargs and an adapter
    were dropped (a LoRA adapter silently not merged); beside a model already loaded they are refused."""
    from deer.backends.models import open_model
    from experiments.runs import run_probes
    from kg_data import build_queries, load_kg

    queries = build_queries(load_kg(tiny_kg_dir), "train", subset=3)
    run = run_probes(queries, str(tiny_clm_dir), ["deer"], tmp_path / "run", PromptTemplates(k_shot=1),
                     model_kwargs={"attn_implementation": "eager"}, log=lambda *_: None)
    assert run.metadata_of("deer")["model"]["attention"] == "eager"
    with pytest.raises(OptionError, match="applies to a model given by name"):
        run_probes(queries, open_model(str(tiny_clm_dir)), ["deer"], tmp_path / "other", PromptTemplates(k_shot=1),
                   model_kwargs={"attn_implementation": "eager"}, log=lambda *_: None)
