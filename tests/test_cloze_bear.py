"""experiments/cloze_bear.py: a stored BEAR run taken beside a cloze run only where it is the run of the same data,
model, tokenizer and toolkit; refused by name otherwise."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import bear_ref
from deer.backends import models
from experiments.cli import main
from experiments.cloze_bear import stored_bear_table
from experiments.runs import TOOLKIT
from kg_data.bear import load_bear_dataset
from tests.benchmark_folders import edit_answer_label, write_dataset


def test_cloze_refuses_a_stored_bear_run_of_another_toolkit_version(tiny_clm_dir, tmp_path):
    """--bear-run took a `deer bear-dataset` table scored by another version of the toolkit (whose BEAR may score
    otherwise) as this comparison's BEAR numbers; run_probes makes such ranks again, --bear-run now refuses them."""
    import bear_ref
    from deer.backends import open_backend
    from deer.backends.models import open_model
    from deer.base.files import package_versions, write_json
    from deer.platform.read_back import read_json_object
    from experiments.cloze_bear import bear_scoring, stored_bear_table
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
    from experiments.cloze_bear import bear_scoring, stored_bear_table

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


def test_a_cloze_run_again_into_its_folder_leaves_no_earlier_deer_vs_bear_comparison(tmp_path, tiny_clm_dir):
    """`deer cloze --probes deer` then `--probes bear` into one --out: the second run makes no DEER-vs-BEAR comparison,
    but the first run's bear_dataset/ (DEER's BEAR-format numbers) stayed beside its files, exit 0."""
    folder = write_dataset(tmp_path / "BEARmini")
    command = ["cloze", "--dataset", str(folder), "--model", str(tiny_clm_dir), "--bootstrap", "0", "--out", str(tmp_path / "run")]
    first = CliRunner().invoke(main, [*command, "--probes", "deer"])
    assert first.exit_code == 0 and (tmp_path / "run" / "bear_dataset" / "report.json").is_file(), first.output
    second = CliRunner().invoke(main, [*command, "--probes", "bear"])
    assert second.exit_code == 0, second.output
    assert list(json.loads((tmp_path / "run" / "cloze" / "metadata.json").read_text())) == ["bear"]
    assert not (tmp_path / "run" / "bear_dataset").exists()
