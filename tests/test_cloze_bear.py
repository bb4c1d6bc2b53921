"""experiments/cloze_bear.py: a stored BEAR run taken beside a cloze run only where it is the run of the same data,
model, tokenizer and toolkit; refused by name otherwise."""

from __future__ import annotations

import pytest

from experiments.runs import TOOLKIT


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
    backends.register_backend("shifted", "tests.test_audit_a_fixes:ShiftedBackend")  # scores that are not the model's own
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
