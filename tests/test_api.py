"""The Python API: DEER, BEAR and LAMA on one QuerySet with a model object, one result type,
nothing written unless asked, join/save/load, the CLI writing the same bytes, the README example."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import bear_ref
import deer
from deer.base.files import read_table
from deer.platform.result import find_ranks_table
from experiments.cli import main
from kg_data import build_queries, load_kg

README = Path(__file__).resolve().parents[1] / "README.md"


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


@pytest.fixture()
def quiet_folders(tmp_path, monkeypatch):
    """Working folder and cache root both empty and watched: the API must leave them so."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    cache.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("DEER_CACHE_DIR", str(cache))
    return work, cache


def test_three_probes_on_a_model_object_join_save_load_and_match_the_cli(tiny_kg_dir, tiny_clm_dir, tmp_path, quiet_folders):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_clm_dir)  # what a notebook or training loop holds
    tokenizer = AutoTokenizer.from_pretrained(tiny_clm_dir)
    model.train()
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    results = [
        deer.probe(queries, (model, tokenizer), k_shot=2, show_progress=False),
        bear_ref.bear(queries, model, tokenizer=tokenizer, k_shot=2, show_progress=False),
        bear_ref.lama(queries, (model, tokenizer), k_shot=2, show_progress=False),
    ]
    assert model.training, "a training model goes back to train mode after the probe"
    assert all(files_under(folder) == [] for folder in quiet_folders), "nothing is written unless asked"
    assert {type(r) for r in results} == {deer.RunResult}
    assert [r.probe for r in results] == ["deer", "bear", "lama"]
    for result in results:
        assert len(result.table) == len(queries) == result.metrics["n"]
        assert result.metrics["hit@10"] == result.metrics["filtered/hit@10"] == result.metrics.to_dict()["filtered"]["hit@10"]
        assert 0 < result.metrics["mrr"] <= 1
        assert result.metrics.to_frame().loc["filtered", "hit@10"] == result.metrics["hit@10"]
        assert (result.ranks("filtered") <= result.ranks("raw")).all()
        assert all(len(top) == min(10, len(queries.candidates)) for top in result.top_predictions())
        assert result.metadata["model"]["source"] == "in-memory" and result.metadata["model"]["dtype"] == "float32"
    # The same weights loaded by name: the same run spec, so the same results.
    by_name = deer.probe(queries, str(tiny_clm_dir), k_shot=2, show_progress=False)
    assert by_name.spec == results[0].spec
    np.testing.assert_array_equal(by_name.ranks(), results[0].ranks())

    joined = deer.join_results(results)
    assert len(joined) == len(queries)
    for probe in ("deer", "bear", "lama"):
        np.testing.assert_array_equal(joined[f"{probe}_rank_filtered"], results[["deer", "bear", "lama"].index(probe)].ranks())

    api_folder = tmp_path / "api"
    for result in results:
        result.save(api_folder)
    reloaded = deer.load_results(api_folder)
    assert list(reloaded) == ["deer", "bear", "lama"]
    for result in results:
        back = deer.load_result(api_folder, result.probe)
        assert back.spec == result.spec and back.metrics.to_dict() == result.metrics.to_dict()
        pd.testing.assert_frame_equal(back.table, result.table, check_dtype=False)
    pd.testing.assert_frame_equal(read_table(find_ranks_table(api_folder)), joined, check_dtype=False)

    # The CLI on the same inputs (model by folder, same KG, split and shots) writes the same bytes.
    cli_folder = tmp_path / "cli"
    common = ["--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot", "2", "--no-cache", "--out", str(cli_folder)]
    for command in ("probe", "bear", "lama"):
        outcome = CliRunner().invoke(main, [command, *common])
        assert outcome.exit_code == 0, outcome.output
    assert find_ranks_table(cli_folder).read_bytes() == find_ranks_table(api_folder).read_bytes()
    assert (cli_folder / "run_spec.json").read_bytes() == (api_folder / "run_spec.json").read_bytes()


def test_join_refuses_results_of_different_specs(tiny_kg_dir, tiny_clm_dir):
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    model = deer.open_model(str(tiny_clm_dir))
    two_shot = deer.probe(queries, model, k_shot=2, show_progress=False)
    three_shot = bear_ref.lama(queries, model, k_shot=3, show_progress=False)
    with pytest.raises(ValueError, match="templates.k_shot"):
        deer.join_results([two_shot, three_shot])


def test_kg_by_name_folder_or_object_and_cache_as_an_option(tiny_kg_dir, tiny_clm_dir, tmp_path, quiet_folders):
    model = deer.open_model(str(tiny_clm_dir))
    kg = load_kg(tiny_kg_dir)
    from_folder = deer.probe(tiny_kg_dir, model, k_shot=2, subset=3, show_progress=False)
    from_object = deer.probe(kg, model, k_shot=2, subset=3, show_progress=False)
    from_queries = deer.probe(deer.load_queries(str(tiny_kg_dir), subset=3), model, k_shot=2, show_progress=False)
    assert from_folder.spec == from_object.spec == from_queries.spec
    assert all(files_under(folder) == [] for folder in quiet_folders)
    cached = deer.probe(kg, model, k_shot=2, subset=3, cache=True, show_progress=False)
    assert files_under(quiet_folders[1]) and cached.metadata["cache"]["entities_encoded_now"] > 0
    again = deer.probe(kg, model, k_shot=2, subset=3, cache=True, show_progress=False)
    assert again.metadata["cache"]["entities_encoded_now"] == 0
    np.testing.assert_array_equal(again.ranks(), cached.ranks())


def test_bear_dataset_through_the_api_writes_nothing_unless_asked(tiny_clm_dir, tmp_path, quiet_folders):
    from tests.test_bear_dataset import write_dataset

    folder = write_dataset(tmp_path / "data" / "BEARmini")
    model = deer.open_model(str(tiny_clm_dir))
    before = files_under(tmp_path)
    result = bear_ref.bear_dataset(str(folder), model, relations=["P36"], show_progress=False)
    assert files_under(tmp_path) == before
    assert isinstance(result, deer.RunResult) and not result.is_kg
    assert 0 <= result.metrics["accuracy_mean"] == result.metrics["overall/accuracy_mean"] <= 1
    saved = result.save(tmp_path / "saved")
    back = deer.load_result(saved)
    assert back.metrics.to_dict() == result.metrics.to_dict() and back.summary == result.summary


def test_encoder_alone(tiny_clm_dir):
    encoder = deer.PromptEOLEncoder.from_pretrained(str(tiny_clm_dir), show_progress=False)
    texts = ['This word : "cat" means in one word:"', "a much longer text " * 5, "dog"]
    vectors = encoder.embed(texts)
    assert vectors.shape == (3, encoder.output_size) and vectors.dtype == np.float32
    # Order restored after length-sorted batching: each row equals that text embedded alone.
    for text, row in zip(texts, vectors, strict=True):
        np.testing.assert_allclose(encoder.embed([text])[0], row, rtol=1e-5, atol=1e-5)
    unit = encoder.embed(texts, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-6)


def test_readme_python_example_runs_as_written(tiny_kg_dir, tiny_clm_dir, tmp_path, quiet_folders, capsys):
    """The README's Python API block, executed as written on the tiny KG and model."""
    text = README.read_text()
    block = re.search(r"## Python API\n.*?```python\n(.*?)```", text, re.S)
    assert block, "README has a '## Python API' section with a python block"
    code = block.group(1)
    code_lines = [line for line in code.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert len(code_lines) <= 10, "the README example stays at most 10 lines"
    for real, tiny in (('"wn18rr"', repr(str(tiny_kg_dir))), ('"smollm2-135m"', repr(str(tiny_clm_dir))),
                       ("subset=50", "subset=3"), ('"runs/my-first-run"', repr(str(tmp_path / "readme-run")))):
        assert real in code, real
        code = code.replace(real, tiny)
    exec(compile(code, str(README), "exec"), {})
    saved = deer.load_results(tmp_path / "readme-run")
    assert set(saved) == {"deer", "bear", "lama"}
    assert "deer_rank_filtered" in capsys.readouterr().out


def test_loose_keywords_and_option_objects_are_one_thing(tiny_kg_dir):
    """run_probe gathers split=/k_shot=/dtype=/token_budget= into QuerySelection/PromptTemplates/ModelLoading/
    Budget; a keyword that its given object would override is refused by name before any model is loaded."""
    from deer.platform.run_options import Budget, ModelLoading, QuerySelection, gather_options
    from deer.platform.templates import PromptTemplates
    from deer.platform.validate import OptionError

    gathered, rest = gather_options({"split": "valid", "subset": 3, "k_shot": 2, "template_style": "paper", "token_budget": 64,
                                     "dtype": "float32", "pll_variant": "original"})
    assert gathered.selection == QuerySelection(split="valid", subset=3)
    assert (gathered.templates.k_shot, gathered.budget, rest) == (2, Budget(token_budget=64), {"pll_variant": "original"})
    assert gathered.loading == ModelLoading(dtype="float32")
    given = PromptTemplates(k_shot=3)
    assert gather_options({"k_shot": 3}, templates=given)[0].templates is given  # the object's own value beside it: nothing lost
    with pytest.raises(OptionError, match="k_shot=8: given beside templates="):  # the default, written, is a value too
        gather_options({"k_shot": 8}, templates=given)
    with pytest.raises(OptionError, match="split='test': given beside selection="):  # it ranked the valid split, exit 0
        deer.probe(tiny_kg_dir, "no-such-model-is-loaded", selection=QuerySelection(split="valid"), split="test")
    with pytest.raises(OptionError, match="k_shot=2: given beside templates="):
        deer.probe(tiny_kg_dir, "no-such-model-is-loaded", templates=given, k_shot=2)
    with pytest.raises(OptionError, match="split='train': given beside selection="):
        bear_ref.bear(tiny_kg_dir, "no-such-model-is-loaded", selection=QuerySelection(), split="train")
    with pytest.raises(OptionError, match="dtype='float16': given beside loading="):
        deer.probe(tiny_kg_dir, "no-such-model-is-loaded", loading=ModelLoading(), dtype="float16")


def test_one_seed_per_purpose(tiny_kg_dir):
    """The subset's seed and the few-shot examples' seed have names of their own; the shots follow the
    subset's seed unless shot_seed is given (so runs made before it keep their numbers)."""
    from deer.platform.run_options import gather_options

    assert gather_options({"seed": 3})[0].templates.seed == 3
    split = gather_options({"seed": 3, "shot_seed": 5})[0]
    assert (split.selection.seed, split.templates.seed) == (3, 5)


def test_a_result_prints_as_one_line():
    """Issue 22.7: repr(ProbeResult) printed the whole table and metadata (~10 kB in a notebook)."""
    import pandas as pd

    from deer.platform.result import Metrics, RunResult

    result = RunResult.of_probe("bear", pd.DataFrame({"instance": range(1000)}), Metrics({"overall": {"n": 1000, "mrr": 0.25}}),
                                {"model": {"name": "smollm2-135m"}, "work": list(range(2000))}, layout="instances")
    assert repr(result) == "RunResult(probe='bear', model='smollm2-135m', 1000 rows, Metrics({'n': 1000, 'mrr': 0.25}))"
    both = RunResult(pd.DataFrame({"query": range(5)}), {"deer": {}, "lama": {}}, {}, "queries")
    assert repr(both) == "RunResult(probes=['deer', 'lama'], 5 queries, layout='queries')"
