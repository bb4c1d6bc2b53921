"""bear_ref/benchmark.py: a cloze benchmark's run.  Its data is checked before any model loads (a selection a
BEAR-format data set cannot honour, a mode or candidate kind given twice, refused by name); a failed run removes only
its own files, and a second run into the same folder waits; a stored BEAR run is taken beside a cloze run only where
it is the run of the same data, model, tokenizer and toolkit, and refused by name otherwise."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import bear_ref
from bear_ref.benchmark import stored_bear_table
from deer.backends import models
from experiments.cli import main
from experiments.runs import TOOLKIT
from kg_data.bear import load_bear_dataset
from kg_data.lama import load_lama
from tests.benchmark_folders import edit_answer_label, write_dataset, write_lama


def test_a_failed_run_removes_only_its_own_files_and_a_second_run_waits(tmp_path):
    """nothing_left_on_failure holds a lock beside --out: a run into the same folder waits, so the
    files a failed run removes are its own (another run's are never written meanwhile)."""
    import threading

    from bear_ref.benchmark import nothing_left_on_failure

    out = tmp_path / "out"
    entered, release, order = threading.Event(), threading.Event(), []

    def first():
        try:
            with nothing_left_on_failure(out):
                (out / "cloze").mkdir(parents=True)
                (out / "cloze" / "half.json").write_text("{")
                entered.set()
                release.wait(10)
                order.append("first fails")
                raise RuntimeError("stopped")
        except RuntimeError:
            pass

    def second():
        entered.wait(10)
        with nothing_left_on_failure(out):
            order.append("second writes")
            out.mkdir(exist_ok=True)  # the failed first run removed the folder it had made
            (out / "summary.md").write_text("done")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    entered.wait(10)
    release.set()
    for thread in threads:
        thread.join(20)
    assert order == ["first fails", "second writes"]
    assert sorted(p.name for p in out.rglob("*")) == ["summary.md"]  # the failed run's files gone, the second's kept
    assert not (tmp_path / ".out.lock").exists()


def test_bear_refuses_the_lama_only_selection_it_cannot_honour(tmp_path, no_model_loading):
    """Audit E9: for a BEAR-format data set, LAMA's sources and the template-free mode were dropped without a word, and
    load_bear_dataset(max_instances=0) gave relations without instances; each is now refused by name (the defaults stay)."""
    from bear_ref.benchmark import BenchmarkSelection, load_benchmark

    folder = write_dataset(tmp_path / "BEARmini")
    full = load_benchmark(str(folder), BenchmarkSelection()).summary()["instances"]
    assert load_benchmark(str(folder), BenchmarkSelection(modes=["template"])).summary()["instances"] == full > 0
    assert load_benchmark(str(folder), BenchmarkSelection(modes=["template-free", "template"])).summary()["instances"] == full
    for selection, named in ((BenchmarkSelection(sources=["Squad"]), "sources"),
                             (BenchmarkSelection(modes=["template-free"]), "template-free")):
        with pytest.raises(ValueError, match=named) as error:
            load_benchmark(str(folder), selection)
        assert str(folder) in str(error.value) and "BEAR" in str(error.value)
    for bad, rule in ((0, ">= 1"), (-1, ">= 1"), (1.5, "an integer >= 1"), (True, "an integer >= 1")):
        with pytest.raises(ValueError, match=rf"max_instances must be {rule}, got {bad!r} \(None: every instance\)"):
            load_bear_dataset(str(folder), max_instances=bad)
    result = CliRunner().invoke(main, ["cloze", "--dataset", str(folder), "--modes", "template-free", "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "template-free" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_bear_refuses_candidates_without_the_relations_answers(tmp_path, no_model_loading):
    """A BEAR-format data set ranks each relation's answer space only: candidate_kinds=['common-vocab'] (`--candidates
    common-vocab`) ran on the relations' answers all the same, recorded nowhere; it is refused by name (the default stays)."""
    from bear_ref.benchmark import BenchmarkSelection, load_benchmark

    folder = write_dataset(tmp_path / "BEARmini")
    assert load_benchmark(str(folder), BenchmarkSelection(candidate_kinds=["relation"])).summary()["instances"] > 0
    with pytest.raises(ValueError, match="common-vocab") as error:
        load_benchmark(str(folder), BenchmarkSelection(candidate_kinds=["common-vocab"]))
    assert str(folder) in str(error.value) and "BEAR" in str(error.value)
    result = CliRunner().invoke(main, ["cloze", "--dataset", str(folder), "--candidates", "common-vocab", "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "common-vocab" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("selection", [{"candidate_kinds": ["relation", "relation"]}, {"modes": ["template", "template"]}])
def test_a_mode_or_candidate_kind_given_twice_is_refused(tmp_path, no_model_loading, selection):
    """`--candidates relation,relation` queried every fact twice over the same set (n doubled in every metric and agreement);
    a mode or candidate kind given twice is now refused by name, before the model."""
    from bear_ref.benchmark import BenchmarkSelection, load_benchmark
    from kg_data.cloze import lama_cloze_task

    folder = write_lama(tmp_path / "lama")
    with pytest.raises(ValueError, match="twice"):
        load_benchmark(str(folder), BenchmarkSelection(**selection))
    with pytest.raises(ValueError, match="twice"):
        lama_cloze_task(load_lama(folder), ["Paris", "London"], **selection)
    option, values = next(iter(selection.items()))
    result = CliRunner().invoke(main, ["cloze", "--dataset", str(folder), "--candidates" if option == "candidate_kinds" else "--modes",
                                       ",".join(values), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "twice" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_cloze_refuses_a_stored_bear_run_of_another_toolkit_version(tiny_clm_dir, tmp_path):
    """--bear-run took a `deer bear-dataset` table scored by another version of the toolkit (whose BEAR may score
    otherwise) as this comparison's BEAR numbers; run_probes makes such ranks again, --bear-run now refuses them."""
    import bear_ref
    from bear_ref.benchmark import bear_scoring, stored_bear_table
    from deer.backends import open_backend
    from deer.backends.models import open_model
    from deer.base.files import package_versions, write_json
    from deer.platform.read_back import read_json_object
    from kg_data.bear import load_bear_dataset
    from tests.benchmark_folders import write_dataset

    data, loaded = load_bear_dataset(str(write_dataset(tmp_path / "BEARmini"))), open_model(str(tiny_clm_dir))
    made = bear_ref.bear_dataset(data, loaded, out=tmp_path / "bear", show_progress=False)
    scoring = bear_scoring(open_backend("hf", loaded))
    assert stored_bear_table(tmp_path / "bear", data, loaded, scoring)["rank"].tolist() == made.table["rank"].tolist()
    metadata = read_json_object(tmp_path / "bear" / "metadata.json")
    metadata["bear"]["versions"][TOOLKIT] = "0.0.1"  # no version this test runs on
    write_json(tmp_path / "bear" / "metadata.json", metadata)
    with pytest.raises(ValueError, match=rf"toolkit '0.0.1', this command's BEAR '{package_versions()[TOOLKIT]}'"):
        stored_bear_table(tmp_path / "bear", data, loaded, scoring)


def test_cloze_takes_a_stored_bear_run_only_if_scored_as_its_own_bear(tiny_clm_dir, tmp_path, monkeypatch):
    """--bear-run took a `deer bear-dataset` table scored on another backend (another store_key) or PLL variant
    as BEAR's numbers of this comparison, unchecked."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    import bear_ref
    from deer import backends
    from deer.backends.models import LoadedModel, open_model
    from experiments.benchmarks import probe_benchmark
    from kg_data.bear import load_bear_dataset
    from tests.benchmark_folders import write_dataset

    monkeypatch.setattr(backends, "REGISTERED", dict(backends.REGISTERED))  # forgotten after the test
    backends.register_backend("shifted", "tests.stored_work:ShiftedBackend")  # scores that are not the model's own
    folder = write_dataset(tmp_path / "BEARmini")
    bear_ref.bear_dataset(str(folder), open_model(str(tiny_clm_dir)), out=tmp_path / "shifted", backend="shifted",
                          show_progress=False)
    with pytest.raises(ValueError, match=r"shifted is not a BEAR run of this model and scoring: backend 'shifted', this "
                                         r"command's BEAR 'hf'"):
        probe_benchmark(str(folder), str(tiny_clm_dir), probes=["deer"], bear_run=tmp_path / "shifted", bootstrap=0,
                        out=tmp_path / "out", show_progress=False)
    from bear_ref.benchmark import bear_scoring, stored_bear_table

    # A masked LM's stored PLL of the other variant is refused; of the variant this command's BEAR uses, taken.
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "capital", "of", "is", "paris", "berlin", "rome", "."]
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    model = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32)).eval()
    loaded, data = LoadedModel.from_objects(model, tokenizer, "tiny-bert"), load_bear_dataset(str(folder))
    scoring = bear_scoring(backends.open_backend("hf", loaded))
    for variant in ("original", "within_word_l2r"):
        bear_ref.bear_dataset(data, loaded, out=tmp_path / variant, pll_variant=variant, show_progress=False)
    with pytest.raises(ValueError, match=r"scoring 'pll-original', this command's BEAR 'pll-within_word_l2r'"):
        stored_bear_table(tmp_path / "original", data, loaded, scoring)
    assert len(stored_bear_table(tmp_path / "within_word_l2r", data, loaded, scoring)) == 3 * data.n_instances


def _cloze_with_bear_run(tmp_path, folder, model_dir, bear_run, out):
    return CliRunner().invoke(main, ["cloze", "--dataset", str(folder), "--model", str(model_dir), "--probes", "deer",
                                     "--bear-run", str(bear_run), "--bootstrap", "10", "--out", str(out)])


def test_bear_run_of_the_same_data_is_taken_and_one_of_edited_data_refused_before_the_model(tmp_path, loaded, tiny_clm_dir,
                                                                                          monkeypatch):
    folder = write_dataset(tmp_path / "BEARmini")
    bear_run = tmp_path / "bear-run"
    stored = bear_ref.bear_dataset(str(folder), loaded, out=bear_run, show_progress=False)
    result = _cloze_with_bear_run(tmp_path, folder, tiny_clm_dir, bear_run, tmp_path / "same")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "same" / "bear_dataset" / "report.json").read_text())
    assert report["metrics"]["bear"]["overall"] == stored.metrics.to_dict()["overall"]  # BEAR's numbers: the stored run's

    edit_answer_label(folder)

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the stored BEAR run was checked against the data")

    monkeypatch.setattr(models, "load_model", refuse)
    out = tmp_path / "edited"
    result = _cloze_with_bear_run(tmp_path, folder, tiny_clm_dir, bear_run, out)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{bear_run} is not a BEAR run of this data" in result.output
    assert "relations scored on other data (templates, answers or instances edited, or not scored): P36" in result.output
    assert not out.exists()


def test_a_bear_run_stored_before_relation_digests_is_refused_with_a_hint_to_rerun(tmp_path, loaded):
    folder = write_dataset(tmp_path / "BEARmini")
    bear_run = tmp_path / "bear-run"
    bear_ref.bear_dataset(str(folder), loaded, out=bear_run, show_progress=False)
    data = load_bear_dataset(str(folder))
    assert len(stored_bear_table(bear_run, data, loaded)) == 3 * data.n_instances  # as written now: accepted
    metadata = json.loads((bear_run / "metadata.json").read_text())
    del metadata["bear"]["relation_digests"]  # as a run made before the digests were recorded
    (bear_run / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match="records no relation digests .* run deer bear-dataset again"):
        stored_bear_table(bear_run, data, loaded)
    with pytest.raises(ValueError, match="not a finished `deer bear-dataset` run"):
        stored_bear_table(tmp_path, data, loaded)


def test_a_bear_run_of_the_same_weights_with_another_tokenizer_is_refused(tmp_path, loaded):
    """`deer cloze --bear-run` took a BEAR run scored through another tokenizer (same weights) as this model's: its check of
    the tokenizer fingerprint read a field that metadata.json never held, so it could not fail."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    from deer.backends.models import LoadedModel

    spec = json.loads(loaded.tokenizer.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    vocab["Ġis"], vocab["Ġthe"] = vocab["Ġthe"], vocab["Ġis"]  # two ids swapped: other scores from the same weights
    other = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(json.dumps(spec)),
                                    bos_token=loaded.tokenizer.bos_token, eos_token=loaded.tokenizer.eos_token)
    swapped = LoadedModel.from_objects(loaded.model, other, "tiny-swapped")
    assert swapped.fingerprint == loaded.fingerprint and swapped.tokenizer_fingerprint != loaded.tokenizer_fingerprint
    _refused_beside(loaded, swapped, tmp_path, "tokenizer fingerprint")


def test_a_bear_run_of_the_same_weights_and_vocabulary_without_a_bos_is_refused(tmp_path, loaded):
    """`deer cloze --bear-run` took a BEAR run scored without the BOS token this model's statements begin with (a
    tokenizer of the same vocabulary that defines none): metadata.json records the BOS policy, nothing compared it."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    from deer.backends.models import LoadedModel

    no_bos = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(loaded.tokenizer.backend_tokenizer.to_str()),
                                     eos_token=loaded.tokenizer.eos_token)
    other = LoadedModel.from_objects(loaded.model, no_bos, "tiny-no-bos")
    assert (other.fingerprint, other.tokenizer_fingerprint) == (loaded.fingerprint, loaded.tokenizer_fingerprint)
    _refused_beside(loaded, other, tmp_path, "BOS policy")


def _refused_beside(loaded, other, tmp_path, refusal: str) -> None:
    """A BEAR data-set run of ``other`` is refused as ``loaded``'s BEAR (naming ``refusal``) and taken as its own."""
    folder = write_dataset(tmp_path / "BEARmini")
    bear_ref.bear_dataset(str(folder), other, out=tmp_path / "other", show_progress=False)
    data = load_bear_dataset(str(folder))
    with pytest.raises(ValueError, match=f"is not a BEAR run of this model and scoring: {refusal}"):
        stored_bear_table(tmp_path / "other", data, loaded)
    assert len(stored_bear_table(tmp_path / "other", data, other)) == 3 * data.n_instances


def test_a_benchmark_run_on_its_own_writes_the_cloze_run_and_reads_both_probes_as_bear_scores(tmp_path, loaded):
    """The run side of `deer cloze` (``benchmark_run``) without the reports: it writes the cloze run (out/cloze) and
    nothing of the reports (experiments'); DEER's and BEAR's ranks of a BEAR-format data set come back as the BEAR
    data-set score reads them, BEAR's equal to `deer bear-dataset`'s own run of the same model and data."""
    from bear_ref.benchmark import benchmark_run

    folder = write_dataset(tmp_path / "BEARmini")
    out = tmp_path / "out"
    with benchmark_run(str(folder), loaded, probes=["deer"], out=out, show_progress=False) as run:
        assert run.result.probes == ["deer", "bear"]  # BEAR's ranks are scored for the comparison with DEER
        assert sorted(run.bear.tables) == ["bear", "deer"] and run.bear.bear_run is None
    assert sorted(p.name for p in out.iterdir()) == ["cloze"]
    stored = bear_ref.bear_dataset(str(folder), loaded, out=tmp_path / "bear-run", show_progress=False)
    assert json.loads(json.dumps(run.bear.metrics["bear"]["overall"])) == stored.metrics.to_dict()["overall"]  # keys as JSON's
    assert run.bear.tables["bear"]["rank"].tolist() == stored.table["rank"].tolist()
