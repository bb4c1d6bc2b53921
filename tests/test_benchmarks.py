"""The benchmark paths check their inputs before any model loads (issue 21, bug 15): a bad data folder is
an error naming the file, the line and the problem, raised before the model is opened; a text longer
than the model's positions is refused before anything is scored; and a failed run leaves nothing
half-written in --out."""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner

import bear_ref
from deer.backends import models
from deer.backends.encoder import PromptEOLEncoder
from deer.backends.statement_scorer import StatementScorer
from deer.platform.length_guard import PromptTooLongError
from experiments.benchmarks import probe_benchmark
from experiments.cli import main
from kg_data.bear import METADATA_FILE, load_bear_dataset
from kg_data.errors import KGFormatError
from kg_data.lama import load_lama
from tests.benchmark_folders import write_dataset, write_lama


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
    (_empty_relations, "relations.jsonl", "empty file"),
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


# -- issue 21, bug 15: every input case of the benchmark paths ----------------------------------------------------


def _edit_jsonl(path, line, change):
    """Apply ``change`` to the JSON object on (1-based) ``line`` of ``path``."""
    records = [json.loads(text) for text in path.read_text().splitlines()]
    change(records[line - 1])
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def _edit_metadata(folder, change):
    metadata = json.loads((folder / METADATA_FILE).read_text())
    change(metadata)
    (folder / METADATA_FILE).write_text(json.dumps(metadata))


def _no_mask_anywhere(folder):
    for path in folder.rglob("*.jsonl"):
        if path.name != "relations.jsonl":
            text = path.read_text().replace("[MASK]", "something")
            path.write_text(text)


def _lama_lone_surrogate(folder):
    # A JSON escape of half a surrogate pair: json.loads makes it a str no tokenizer (nor UTF-8) can encode.
    (folder / "TREx" / "P19.jsonl").write_text((folder / "TREx" / "P19.jsonl").read_text().replace('"Bob"', '"Bo\\ud800b"'))


def _bear_lone_surrogate(folder):
    (folder / "P36.jsonl").write_text((folder / "P36.jsonl").read_text().replace('"France"', '"Fr\\udc00ance"'))


def _bear_null_label(folder):
    _edit_metadata(folder, lambda metadata: metadata["P36"]["answer_space_labels"].__setitem__(1, None))


def _bear_no_relations(folder):
    (folder / METADATA_FILE).write_text("{}")


def _bear_no_data_files(folder):
    (folder / "P36.jsonl").unlink()
    (folder / "P37.jsonl").unlink()


def _bear_file_the_metadata_lacks(folder):
    """lm-pub-quiz reads every CODE.jsonl (and fails on P38); the toolkit scored P36 and P37 alone without a word."""
    (folder / "P38.jsonl").write_text((folder / "P37.jsonl").read_text())


LAMA_CASES = [  # damage, options, file, line, problem
    (_no_mask_anywhere, {"modes": ["template-free"]}, "lama", None,
     "no query to score in mode(s) template-free: no masked sentence of any fact holds [MASK] exactly once"),
    (_lama_lone_surrogate, {}, "P19.jsonl", 2, "key 'sub_label' holds a lone surrogate (\\ud800 at character 2)"),
]
BEAR_CASES = [
    (_bear_lone_surrogate, "P36.jsonl", 1, "key 'sub_label' holds a lone surrogate (\\udc00 at character 2)"),
    (_bear_null_label, METADATA_FILE, None, "relation P36: answer_space_labels[1] must be a non-empty string or an integer, got null"),
    (_bear_no_relations, METADATA_FILE, None, "lists no relations"),
    (_bear_no_data_files, METADATA_FILE, None, "none of its 3 relations has a data file"),
    (_bear_file_the_metadata_lacks, METADATA_FILE, None, "lists no relation P38, whose data file is in"),
]


def _cli_refuses(args, out, where, problem):
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 1 and "Traceback" not in result.output and "unexpected" not in result.output, result.output
    assert where in result.output and problem in result.output, result.output
    assert not out.exists()


@pytest.mark.parametrize("damage, options, file, line, problem", LAMA_CASES)
def test_bad_lama_data_names_file_and_line_before_the_model(tmp_path, no_model_loading, damage, options, file, line, problem):
    folder = write_lama(tmp_path / "lama")
    damage(folder)
    out = tmp_path / "out"
    with pytest.raises(KGFormatError) as error:
        probe_benchmark(str(folder), "smollm2-135m", out=out, show_progress=False, **options)
    assert error.value.path.endswith(file) and error.value.line == line and error.value.problem.startswith(problem)
    modes = ["--modes", ",".join(options["modes"])] if "modes" in options else []
    _cli_refuses(["cloze", "--dataset", str(folder), *modes], out, str(error.value).split(": ")[0], problem)


@pytest.mark.parametrize("damage, file, line, problem", BEAR_CASES)
def test_bad_bear_data_names_file_and_line_before_the_model(tmp_path, no_model_loading, damage, file, line, problem):
    folder = write_dataset(tmp_path / "BEARmini")
    damage(folder)
    out = tmp_path / "out"
    with pytest.raises(KGFormatError) as error:
        probe_benchmark(str(folder), "smollm2-135m", probes=["deer", "bear"], out=out, show_progress=False)
    assert error.value.path.endswith(file) and error.value.line == line and error.value.problem.startswith(problem)
    with pytest.raises(KGFormatError, match=re.escape(problem)):
        bear_ref.bear_dataset(str(folder), "smollm2-135m", out=out, show_progress=False)
    where = str(error.value).split(": ")[0]
    _cli_refuses(["cloze", "--dataset", str(folder), "--probes", "deer,bear"], out, where, problem)
    _cli_refuses(["bear-dataset", "--dataset", str(folder)], out, where, problem)


def test_relations_chosen_by_name_are_read_beside_a_file_the_metadata_lacks(tmp_path):
    folder = write_dataset(tmp_path / "BEARmini")
    _bear_file_the_metadata_lacks(folder)
    assert list(load_bear_dataset(folder, relations=["P37", "P36"]).relations) == ["P37", "P36"]


def test_a_numeric_label_is_read_as_its_string(tmp_path, tiny_clm_dir):
    """A JSON number as sub_label (or obj_label, or an id) is data -- a subject called 1984 -- and is read as its
    decimal string, as a TSV file would give it; a boolean, a fraction or null is still refused."""
    lama = write_lama(tmp_path / "lama")
    _edit_jsonl(lama / "TREx" / "P19.jsonl", 2, lambda record: record.update(sub_label=1984))
    fact = load_lama(lama).relations["TREx/P19"].facts[1]
    assert fact.subject == "1984"
    bear = write_dataset(tmp_path / "BEARmini")
    _edit_jsonl(bear / "P36.jsonl", 1, lambda record: record.update(sub_label=1984, sub_id=142))
    relation = load_bear_dataset(str(bear)).relations["P36"]
    assert relation.subject_labels[0] == "1984" and relation.subject_ids[0] == "142"
    assert relation.statements(relation.templates[0])[0] == "The capital of 1984 is Paris."
    result = CliRunner().invoke(main, ["bear-dataset", "--dataset", str(bear), "--model", str(tiny_clm_dir), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    instances = pd.read_parquet(tmp_path / "run" / "instances.parquet")
    assert set(instances.loc[instances["relation"] == "P36", "sub_label"]) == {"1984", "Germany", "Italy"}
    report = probe_benchmark(str(bear), str(tiny_clm_dir), probes=["deer", "bear"], bootstrap=0, out=tmp_path / "cloze",
                             show_progress=False)
    assert "1984" in set(report["table"]["subject"])
    for value, got in ((True, "boolean"), (19.84, "number"), (None, "null")):
        _edit_jsonl(bear / "P36.jsonl", 1, lambda record, value=value: record.update(sub_label=value))
        with pytest.raises(KGFormatError, match=f"P36.jsonl:1: key 'sub_label' must be a string or an integer, got {got}"):
            load_bear_dataset(str(bear))


LONG_SUBJECT = " ".join(["word"] * 2500)  # the tiny model has 2048 positions


@pytest.fixture()
def no_scoring(monkeypatch):
    """Fail the test if any text reaches the model: the guard must stop a run first."""
    def refuse(*args, **kwargs):
        raise AssertionError("a text was scored before the length guard refused the run")

    monkeypatch.setattr(StatementScorer, "score_statements", refuse)
    monkeypatch.setattr(PromptEOLEncoder, "encode", refuse)


def test_an_over_long_subject_is_refused_before_scoring_naming_the_fact(tmp_path, tiny_clm_dir, no_scoring):
    lama = write_lama(tmp_path / "lama")
    _edit_jsonl(lama / "TREx" / "P19.jsonl", 2, lambda record: record.update(sub_label=LONG_SUBJECT))
    out = tmp_path / "out"
    with pytest.raises(PromptTooLongError, match=r"P19\.jsonl:2: TREx/P19 fact b \(subject 'word word .*\.\.\.'\), template 0: "
                                                 r"its query text is \d+ tokens, more than the model's 2048 positions"):
        probe_benchmark(str(lama), str(tiny_clm_dir), out=out, show_progress=False)
    assert not out.exists()
    bear = write_dataset(tmp_path / "BEARmini")
    _edit_jsonl(bear / "P37.jsonl", 3, lambda record: record.update(sub_label=LONG_SUBJECT))
    with pytest.raises(PromptTooLongError, match=r"P37\.jsonl:3: bear/P37 fact Q220 .*its query text is \d+ tokens"):
        probe_benchmark(str(bear), str(tiny_clm_dir), probes=["deer", "bear"], out=out, show_progress=False)
    with pytest.raises(PromptTooLongError, match=r"P37\.jsonl:3: bear/P37 fact Q220 .*its longest statement is \d+ tokens"):
        probe_benchmark(str(bear), str(tiny_clm_dir), probes=["bear"], out=out, show_progress=False)
    with pytest.raises(PromptTooLongError, match=r"P37\.jsonl:3: bear/P37 fact Q220 \(subject 'word word .*'\), template 0: its "
                                                 r"longest statement is \d+ tokens, more than the model's 2048 positions"):
        bear_ref.bear_dataset(str(bear), str(tiny_clm_dir), out=out, show_progress=False)
    assert not out.exists()
    result = CliRunner().invoke(main, ["bear-dataset", "--dataset", str(bear), "--model", str(tiny_clm_dir), "--out", str(out)])
    assert result.exit_code == 1 and "P37.jsonl:3: bear/P37 fact Q220" in result.output and not out.exists()


def test_an_over_long_answer_label_is_refused_before_scoring(tmp_path, tiny_clm_dir, no_scoring):
    bear = write_dataset(tmp_path / "BEARmini")
    _edit_metadata(bear, lambda metadata: metadata["P36"]["answer_space_labels"].__setitem__(2, LONG_SUBJECT))
    with pytest.raises(PromptTooLongError, match=r"metadata_relations\.json: relation P36, answer Q220 \('word .*'\): its text"):
        bear_ref.bear_dataset(str(bear), str(tiny_clm_dir), show_progress=False)
    with pytest.raises(PromptTooLongError, match=r"metadata_relations\.json: relation P36, answer Q220 \('word .*'\): its DEER prompt"):
        probe_benchmark(str(bear), str(tiny_clm_dir), probes=["deer", "bear"], out=tmp_path / "out", show_progress=False)


def test_a_failed_run_leaves_out_as_it_was_but_for_finished_parts(tmp_path, tiny_clm_dir, monkeypatch):
    """A run that fails after the model loaded leaves no half-written results in --out: what it created goes,
    except the probes it finished (cloze/parts/KEY/), which the same command resumes from; what was there stays."""
    import experiments.benchmarks as benchmarks

    folder = write_dataset(tmp_path / "BEARmini")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(benchmarks, "compare_with_bear", fail)  # after both probes finished and cloze/ was written
    with pytest.raises(RuntimeError, match="disk full"):
        probe_benchmark(str(folder), str(tiny_clm_dir), probes=["deer", "bear"], bootstrap=0, out=out, show_progress=False)
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    (key,) = {p.split("/")[2] for p in left if p.startswith("cloze/parts/")}
    assert left == ["cloze/parts/" + key + "/" + name for name in ("bear.parquet", "deer.parquet", "key.json")] + ["notes.txt"]
    monkeypatch.undo()
    report = probe_benchmark(str(folder), str(tiny_clm_dir), probes=["deer", "bear"], bootstrap=0, out=out, show_progress=False)
    assert [probe for probe, entry in report["metadata"].items() if entry["resumed"]] == ["deer", "bear"]
    # A failure before any probe finished leaves nothing at all, in the cloze and the BEAR data-set paths.
    monkeypatch.setattr(PromptEOLEncoder, "encode", fail)
    monkeypatch.setattr(StatementScorer, "score_statements", fail)
    for run in (lambda target: probe_benchmark(str(folder), str(tiny_clm_dir), probes=["deer", "bear"], out=target, show_progress=False),
                lambda target: bear_ref.bear_dataset(str(folder), str(tiny_clm_dir), out=target, show_progress=False)):
        with pytest.raises(RuntimeError, match="disk full"):
            run(tmp_path / "fresh")
        assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("value", ["truncate-descriptions", "banana"])
def test_a_long_prompts_mode_the_benchmarks_cannot_honour_is_refused(tmp_path, no_model_loading, value):
    """A benchmark's texts hold no descriptions to cut, and its runs never read long_prompts: any mode but 'error' (a
    misspelt one too) was taken into the Budget and dropped; it is refused by name before the model loads."""
    from deer.platform.run_options import Budget
    from deer.platform.validate import OptionError

    with pytest.raises(OptionError, match=f"long_prompts='{value}'.*benchmark"):
        probe_benchmark(write_lama(tmp_path / "lama"), "no-such-model-is-loaded", probes=["lama"], long_prompts=value)
    with pytest.raises(OptionError, match=f"long_prompts='{value}'.*benchmark"):
        bear_ref.bear_dataset(write_dataset(tmp_path / "bear"), "no-such-model-is-loaded", budget=Budget(long_prompts=value))
