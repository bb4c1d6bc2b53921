"""The Python API: DEER, BEAR and LAMA on one QuerySet with a model object, one result type,
nothing written unless asked, join/save/load, the CLI writing the same bytes, the README example."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import bear_ref
import deer
from deer.base.errors import OptionError
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
    for probe in ("deer", "bear", "lama"):
        outcome = CliRunner().invoke(main, ["probe", "--probe", probe, *common])
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
    from tests.benchmark_folders import write_dataset

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
    """Issue 22.7: repr(ProbeResult), now RunResult, printed the whole table and metadata (~10 kB in a notebook)."""
    import pandas as pd

    from deer.platform.result import Metrics, RunResult

    result = RunResult.of_probe("bear", pd.DataFrame({"instance": range(1000)}), Metrics({"overall": {"n": 1000, "mrr": 0.25}}),
                                {"model": {"name": "smollm2-135m"}, "work": list(range(2000))}, layout="instances")
    assert repr(result) == "RunResult(probe='bear', model='smollm2-135m', 1000 rows, Metrics({'n': 1000, 'mrr': 0.25}))"
    both = RunResult(pd.DataFrame({"query": range(5)}), {"deer": {}, "lama": {}}, {}, "queries")
    assert repr(both) == "RunResult(probes=['deer', 'lama'], 5 queries, layout='queries')"


# -- every argument of the API, of a wrong type, is refused by name before any model loads --------------------------

def test_an_option_object_of_another_class_or_a_dict_is_refused_naming_the_argument(tiny_kg_dir, no_model_loading):
    """loading={"dtype": ...} failed on a missing attribute; selection=ModelLoading() too, naming neither."""
    from deer.platform.run_options import ModelLoading

    with pytest.raises(TypeError, match=r"^loading must be a ModelLoading or None .*; got dict"):
        deer.probe(tiny_kg_dir, "no-such-model-is-loaded", loading={"dtype": "float32"})
    with pytest.raises(TypeError, match=r"^selection must be a QuerySelection or None .*; got ModelLoading"):
        deer.probe(tiny_kg_dir, "no-such-model-is-loaded", selection=ModelLoading())
    with pytest.raises(OptionError, match=r"^model_kwargs=\[1\]: must be a mapping"):  # "'list' object is not a mapping"
        deer.probe(tiny_kg_dir, "no-such-model-is-loaded", model_kwargs=[1])


def test_a_keyword_beside_its_object_is_checked_before_it_is_compared(tiny_kg_dir, no_model_loading):
    """subset=np.array([1, 2]) beside selection=QuerySelection(subset=2) failed in numpy ("truth value ... ambiguous")."""
    from deer.platform.run_options import QuerySelection

    with pytest.raises(OptionError, match=r"^subset=array\(\[1, 2\]\): must be an integer >= 1"):
        deer.probe(tiny_kg_dir, "no-such-model-is-loaded", selection=QuerySelection(subset=2), subset=np.array([1, 2]))
    assert deer.load_queries(tiny_kg_dir, subset=np.int64(2)).kg.name  # the same value, numpy's: taken


def test_a_text_for_a_boolean_is_refused_as_exclude_head_is(tiny_kg_dir, no_model_loading):
    """cache="no" cached (bool("no") is True) while exclude_head="False" was refused: one boolean check now."""
    for keyword in ("cache", "show_progress", "exclude_head", "distributed"):
        with pytest.raises(OptionError, match=rf"^{keyword}='no': must be True or False"):
            deer.probe(tiny_kg_dir, "no-such-model-is-loaded", **{keyword: "no"})
    with pytest.raises(OptionError, match=r"^single_token='false': must be True or False"):
        bear_ref.lama(tiny_kg_dir, "no-such-model-is-loaded", single_token="false")


@pytest.mark.parametrize("value", [0, 3, np.int64(3), np.int32(0), np.uint8(2), -1, 2.5, True, "3", np.float64(3.0), None])
def test_one_integer_rule_for_the_api_and_the_data_readers(value):
    """seed=np.int64(0) was refused by the API as "must be an integer" while kg_data's check_integer took it."""
    from deer.base.errors import check_count
    from kg_data.errors import check_integer

    def verdict(check):
        try:
            check("seed", value, 0)
        except ValueError as error:  # OptionError is one
            assert str(error).startswith("seed"), error
            return "integer" in str(error), ">=" in str(error)
        return None

    assert verdict(check_count) == verdict(check_integer)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0:
        assert verdict(check_count) is None and type(check_count("seed", value, 0)) is int
        assert deer.PromptTemplates(seed=value).seed == value and type(deer.PromptTemplates(seed=value).seed) is int
        assert deer.QuerySelection(seed=value, subset=value or None).seed == value


def forbid_loading(monkeypatch) -> None:
    """A model load, or a backend opened (run_cloze's first work), fails the test."""
    import deer.backends.models as models
    import deer.runner as runner

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(runner, "as_backend", lambda *a, **k: pytest.fail("a backend was opened (run_cloze)"))


@pytest.fixture()
def no_model_loading(monkeypatch):
    forbid_loading(monkeypatch)


class _Other:
    """An object of no accepted class (as an option object of another class would be)."""


# What a value of each kind is not: a dict, a text, a numpy array, a bool where a number goes, a number where a bool goes,
# an option object of the wrong class.
def _wrong(kind: str) -> list:
    from deer.platform.run_options import Budget, ModelLoading

    other = ModelLoading() if kind != "ModelLoading" else Budget()
    return {
        "bool": ["no", 1, np.array([True, False]), {}, None],
        "int": ["3", 2.5, True, np.array([1, 2]), {}, other],
        "str": [3, {}, np.array(["a"]), True, other],
        "path": [3, {}, np.array([1]), True, other],
        "mapping": [[1], "a=1", np.array([1]), 3, True],
        "names": ["P36", 3, {"P36": 1}, np.array(["P36"]), True],
        "probes": ["deer", 3, {"deer": {}}, np.array(["deer"]), True],
        "object": [{}, np.array([1]), 3, True, other, _Other()],
        "device": [3, {}, np.array([1]), True, other],
    }.get(kind) or [{}, "text", np.array([1]), 3, True, other]  # an option object (its class's name) or a task, a KG ...


# Arguments whose annotation does not say their kind (unannotated, or any object) and what their wrong values are.
KIND_OF = {"kg": "object", "model": "object", "dataset": "object", "queries": "object", "task": "object", "loaded": "object",
           "runner": "object",
           "tokenizer": "object", "trainer": "object", "probe": "object", "out": "path", "data_dir": "path", "adapter": "path",
           "cache_dir": "path", "bear_run": "path", "store_root": "path", "device": "device", "probes": "probes",
           "options": "mapping", "relations": "names", "sources": "names", "modes": "names", "candidate_kinds": "names",
           "model_kwargs": "mapping", "name": "object"}
NAMED_AS = {("open_backend", "name"): "backend"}  # an argument whose refusal names its option (--backend)


def kind_of(name: str, annotation) -> str:
    """The kind a parameter takes, from KIND_OF or its annotation; an argument of neither makes the test fail."""
    if name in KIND_OF:
        return KIND_OF[name]
    text = str(annotation).replace(" | None", "").replace("None | ", "").strip("'")
    kinds = {"bool": "bool", "int": "int", "str": "str", "dict": "mapping", "Sequence[str]": "names"}
    if text in kinds:
        return kinds[text]
    if text in ("QuerySelection", "PromptTemplates", "ModelLoading", "Budget", "DatasetSelection", "BenchmarkSelection"):
        return text
    raise AssertionError(f"{name}: no kind known for {annotation!r}; say in KIND_OF what it takes, and check it")


def loose_keywords(entry) -> dict:
    """The keywords a function's ``**options`` takes: the fields of the option objects it gathers, as ``take`` reads them."""
    from deer.platform.run_options import templates_from

    keywords = {}
    for build in entry.gathers:
        for name, parameter in inspect.signature(templates_from if build is deer.PromptTemplates else build).parameters.items():
            if parameter.kind is not parameter.KEYWORD_ONLY:
                keywords[name] = parameter.annotation
    return {**keywords, **entry.extra}


@dataclasses.dataclass
class Entry:
    """A public function, the valid arguments it is called with, and what its ``**options`` gather."""

    name: str
    function: object
    valid: dict
    gathers: tuple = ()
    extra: dict = dataclasses.field(default_factory=dict)


def api_entries(kg: str, dataset: str, task, loaded, queries) -> list[Entry]:
    from bear_ref.api import DatasetSelection
    from deer.backends import open_backend
    from deer.integrations.training import DeerCallback, probe_during_training
    from deer.runner import run_cloze, run_kg, run_probe
    from experiments.benchmarks import BenchmarkSelection, probe_benchmark

    kg_options = (deer.QuerySelection, deer.PromptTemplates, deer.ModelLoading, deer.Budget)
    model = "no-such-model-is-loaded"
    run = {"cache_dir": "path", "distributed": "bool"}
    return [
        Entry("deer.probe", deer.probe, {"kg": kg, "model": model}, kg_options, run),
        Entry("deer.load_queries", deer.load_queries, {"kg": kg}),
        Entry("run_probe", run_probe, {"probe": "deer", "kg": kg, "model": model}, kg_options, run),
        Entry("run_kg", run_kg, {"probes": ["deer"], "kg": kg, "model": model}, kg_options, run),
        Entry("run_cloze", run_cloze, {"task": task, "runner": loaded, "probes": ["lama"]}),
        Entry("bear_ref.bear", bear_ref.bear, {"kg": kg, "model": model}, kg_options, run),
        Entry("bear_ref.lama", bear_ref.lama, {"kg": kg, "model": model}, kg_options, run),
        Entry("bear_ref.bear_dataset", bear_ref.bear_dataset, {"dataset": dataset, "model": model},
              (DatasetSelection, deer.ModelLoading, deer.Budget)),
        Entry("deer.open_model", deer.open_model, {"name": model}),
        Entry("open_backend", open_backend, {"name": "hf", "model": model}),
        Entry("probe_benchmark", probe_benchmark, {"dataset": dataset, "model": model, "probes": ["bear"]},
              (BenchmarkSelection, deer.ModelLoading, deer.Budget), {"cache_dir": "path"}),
        Entry("DeerCallback", DeerCallback, {"queries": kg}),
        Entry("probe_during_training", probe_during_training, {"model": loaded.model, "tokenizer": loaded.tokenizer,
                                                                "queries": queries}),
    ]


def call(entry: Entry, name: str, value):
    """``entry`` with its valid arguments and ``name=value`` (positionally where the parameter is positional-only)."""
    given = {**entry.valid, name: value}
    parameters = inspect.signature(entry.function).parameters
    positional = [given.pop(p) for p in list(parameters) if parameters[p].kind is parameters[p].POSITIONAL_ONLY and p in given]
    return entry.function(*positional, **given)


def test_every_argument_of_every_public_function_refuses_a_wrong_type_by_name(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """Walks each public function's parameters (from inspect.signature, so a new one is walked too) and the option
    objects' fields its **options take; each wrong value is a TypeError or OptionError naming the argument, raised
    before any model loads or a backend opens."""
    from deer.platform.task_texts import kg_benchmark_task
    from tests.benchmark_folders import write_dataset

    loaded = deer.open_model(str(tiny_clm_dir))
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    task = kg_benchmark_task(queries, deer.PromptTemplates())
    dataset = str(write_dataset(tmp_path / "data" / "BEARmini"))
    forbid_loading(monkeypatch)
    monkeypatch.chdir(tmp_path)
    walked, missed = 0, []
    for entry in api_entries(str(tiny_kg_dir), dataset, task, loaded, queries):
        parameters = {name: p.annotation for name, p in inspect.signature(entry.function).parameters.items()
                      if p.kind is not p.VAR_KEYWORD}
        for name, annotation in {**parameters, **loose_keywords(entry)}.items():
            kind = annotation if annotation in ("path", "bool") else kind_of(name, annotation)
            for value in _wrong(kind):
                if kind == "bool" and value is None and name in ("query_trailing_space",):
                    continue  # None: the style's
                walked += 1
                named = NAMED_AS.get((entry.name, name), name)
                try:
                    call(entry, name, value)
                except (TypeError, OptionError) as error:
                    if not str(error).startswith((f"{named}=", f"{named} must")):
                        missed.append(f"{entry.name}({name}={value!r}): {type(error).__name__}: {error}")
                except Exception as error:  # noqa: BLE001 - any other error is a miss, reported with the rest
                    missed.append(f"{entry.name}({name}={value!r}): {type(error).__name__}: {str(error)[:200]}")
                else:
                    missed.append(f"{entry.name}({name}={value!r}): accepted")
    assert not missed, f"{len(missed)} of {walked} wrong values not refused by name:\n" + "\n".join(missed)
    assert walked > 400, walked  # the table is walked, not skipped
    print(f"\n{walked} wrong values walked over {len(api_entries(str(tiny_kg_dir), dataset, task, loaded, queries))} "
          "public functions, each refused by name")


# -- a KG or model argument of no accepted type ----------------------------------------------------


@pytest.mark.parametrize("call, match", [
    (lambda kg: deer.probe(12345), r"kg must be a KG name \('wn18rr'\), a KG folder .*TextualKG or a QuerySet; got int 12345"),
    (lambda kg: deer.probe(None), r"kg must be .*; got NoneType None"),
    (lambda kg: deer.probe(kg, 12345), r"model must be an alias .*hub id.*open_model\(\.\.\.\), a \(model, tokenizer\) pair or an opened backend .*; got int"),
    (lambda kg: deer.probe(kg, None), r"model must be .*; got NoneType"),
    (lambda kg: bear_ref.bear(12345), r"kg must be"),
    (lambda kg: bear_ref.lama(kg, 12345), r"model must be an alias"),
    (lambda kg: deer.load_queries(3.5), r"kg must be"),
], ids=["probe kg int", "probe kg None", "probe model int", "probe model None", "bear kg int", "lama model int",
        "load_queries kg float"])
def test_api_argument_of_no_accepted_type_is_named(call, match, tiny_kg_dir, no_model_loading):
    with pytest.raises(TypeError, match=match):
        call(str(tiny_kg_dir))
