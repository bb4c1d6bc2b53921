"""The benchmark paths check their inputs before any model loads (issue 21, bug 15, in part): a bad data
folder is an error naming the file and the problem, raised before the model is opened, and nothing is
written to --out."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from deer.core import models
from experiments.benchmarks import probe_benchmark
from experiments.cli import main
from kg_data.errors import KGFormatError
from tests.test_cloze import write_lama


@pytest.fixture()
def no_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(models, "load_model", refuse)


def _empty_relations(folder):
    (folder / "relations.jsonl").write_text("")
    shutil.rmtree(folder / "Google_RE")
    shutil.rmtree(folder / "Squad")


def _no_data_files(folder):
    for sub in ("TREx", "Google_RE", "Squad"):
        shutil.rmtree(folder / sub)
        (folder / sub).mkdir()


def _no_vocabulary(folder):
    (folder / "common_vocab_cased.txt").unlink()


@pytest.mark.parametrize("damage, file, problem", [
    (_empty_relations, "relations.jsonl", "no relation of sources TREx has a data file"),
    (_no_data_files, "relations.jsonl", "has a data file"),
    (_no_vocabulary, "common_vocab_cased.txt", "missing or empty: the common-vocabulary candidates need it"),
])
def test_a_bad_lama_folder_fails_before_the_model_and_writes_nothing(tmp_path, no_model_loading, damage, file, problem):
    folder = write_lama(tmp_path / "lama")
    damage(folder)
    out = tmp_path / "out"
    with pytest.raises(KGFormatError, match=problem) as error:
        probe_benchmark(str(folder), "smollm2-135m", out=out, show_progress=False)
    assert error.value.path.endswith(file)
    assert not out.exists()
    result = CliRunner().invoke(main, ["cloze", "--dataset", str(folder), "--out", str(out)])
    assert result.exit_code != 0 and file in result.output and problem in result.output and "Traceback" not in result.output
    assert not out.exists()
