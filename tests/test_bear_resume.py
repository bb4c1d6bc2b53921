"""Issue 21, bug 14: stale BEAR scores reported as current.  A rerun of `deer bear-dataset` into the same
--out after a template or an answer label was edited reused the stored relations (the resume key held
the data folder's path, not its content), and `deer cloze --bear-run` accepted a run made on the old
data (it checked path and instance count)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

import bear_ref
from deer.backends import models
from experiments.cli import main
from experiments.cloze_bear import stored_bear_table
from kg_data.bear import load_bear_dataset
from tests.benchmark_folders import write_dataset


def edit_template(folder):
    """P37's first template reworded."""
    metadata = json.loads((folder / "metadata_relations.json").read_text())
    metadata["P37"]["templates"][0] = "In [X] one speaks [Y]."
    (folder / "metadata_relations.json").write_text(json.dumps(metadata))
    return "P37"


def edit_answer_label(folder):
    """P36's first answer renamed (an answer-space label: every statement with that answer changes)."""
    metadata = json.loads((folder / "metadata_relations.json").read_text())
    metadata["P36"]["answer_space_labels"][0] = "Lutetia"
    (folder / "metadata_relations.json").write_text(json.dumps(metadata))
    return "P36"


@pytest.fixture()
def loaded(tiny_clm_dir):
    return models.open_model(str(tiny_clm_dir))


@pytest.mark.parametrize("edit", [edit_template, edit_answer_label])
def test_a_rerun_after_an_edit_rescores_that_relation_and_equals_a_fresh_run(tmp_path, loaded, edit):
    folder = write_dataset(tmp_path / "BEARmini")
    out = tmp_path / "run"
    before = bear_ref.bear_dataset(str(folder), loaded, out=out, show_progress=False)
    edited = edit(folder)
    (untouched,) = {"P36", "P37"} - {edited}
    resumed = bear_ref.bear_dataset(str(folder), loaded, out=out, show_progress=False)
    fresh = bear_ref.bear_dataset(str(folder), loaded, out=tmp_path / "fresh", show_progress=False)
    # Only the relation whose content is unchanged is reused; the edited one is scored anew.
    assert resumed.metadata["relations_resumed"] == [untouched]
    pd.testing.assert_frame_equal(resumed.table, fresh.table)
    assert resumed.metrics.to_dict()["overall"] == fresh.metrics.to_dict()["overall"]
    assert resumed.metrics.to_dict()["per_relation"] == fresh.metrics.to_dict()["per_relation"]
    # The edit changes that relation's scores, so a stale reuse could not pass the comparison above.
    old_scores = before.table.loc[before.table["relation"] == edited, "gold_score"].to_numpy()
    new_scores = resumed.table.loc[resumed.table["relation"] == edited, "gold_score"].to_numpy()
    assert (old_scores != new_scores).any()


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


def test_bear_dataset_parts_are_resumed_only_on_the_backend_store_key_they_were_made_with(shifted, tiny_clm_dir, tmp_path):
    """A3: a rerun on another caching backend into the same folder resumed the first backend's parts."""
    from bear_ref.dataset import run_bear_dataset
    from deer.backends.models import open_model
    from kg_data.bear import load_bear_dataset
    from tests.benchmark_folders import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    loaded = open_model(str(tiny_clm_dir))

    def run(backend, out):
        return run_bear_dataset(data, loaded, out, {"relations": None}, backend=backend, show_progress=False)

    first = run("hf", tmp_path / "out")
    (tmp_path / "out" / "metadata.json").unlink()  # the hf run stopped after storing its parts (a finished one refuses
    fresh = run("shifted", tmp_path / "fresh")     # a run made otherwise: test_bear_dataset)
    again = run("shifted", tmp_path / "out")
    assert again.metadata["relations_resumed"] == []
    assert again.table["rank"].tolist() == fresh.table["rank"].tolist()
    assert again.metadata["resume_key"] != first.metadata["resume_key"]
