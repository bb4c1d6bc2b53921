"""Bad input is refused before any work: one line naming the file:line or the option, no
traceback, no model loaded, nothing written.

Each case builds a broken KG, option, model folder or output folder and runs a `deer` command on
it in-process.  ``load_model`` is replaced by a function that records the call, so a case that
got as far as loading a model fails; the working folder and the cache are checked to be untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from experiments.cli import main
from tests.refusals import assert_refused_before_loading

TEST_LINE = "e6\tcapital_of\te7\n"


def _write(path: Path, text: str | bytes) -> None:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def _jsonl(kg: Path, records: list[dict]) -> None:
    (kg / "entities.tsv").unlink()
    _write(kg / "entities.jsonl", "".join(json.dumps(r) + "\n" for r in records))


def _model_copy(model: Path, tmp: Path) -> Path:
    copy = tmp / "model_copy"
    shutil.copytree(model, copy)
    return copy


# Each case: (name, build(tmp, kg, model) -> command line, what the one error line must contain).
# The builders may break the KG folder or the model copy they are given.
KG_CASES = [
    ("missing valid split", lambda t, kg, m: (Path(kg) / "valid.tsv").unlink() or ["probe", "--kg", kg, "--split", "valid"],
     ["has no 'valid' split"]),
    ("missing test split", lambda t, kg, m: (Path(kg) / "test.tsv").unlink() or ["probe", "--kg", kg],
     ["has no 'test' split"]),
    ("empty test split (probe)", lambda t, kg, m: _write(Path(kg) / "test.tsv", "") or ["probe", "--kg", kg],
     ["test.tsv: the test split has no triples"]),
    ("empty test split (bear)", lambda t, kg, m: _write(Path(kg) / "test.tsv", "\n") or ["probe", "--probe", "bear", "--kg", kg],
     ["test.tsv: the test split has no triples"]),
    ("empty test split (lama)", lambda t, kg, m: _write(Path(kg) / "test.tsv", "") or ["probe", "--probe", "lama", "--kg", kg],
     ["test.tsv: the test split has no triples"]),
    ("UTF-16 without BOM", lambda t, kg, m: _write(Path(kg) / "relations.tsv", "_hypernym\thypernym\n".encode("utf-16-le"))
     or ["probe", "--kg", kg], ["relations.tsv:1", "UTF-16"]),
    ("UTF-16 with BOM", lambda t, kg, m: _write(Path(kg) / "train.tsv", "e0\t_hypernym\te3\n".encode("utf-16"))
     or ["probe", "--kg", kg], ["train.tsv:1", "UTF-16"]),
    ("NUL byte", lambda t, kg, m: _write(Path(kg) / "test.tsv", TEST_LINE + "e0\t_hyper\x00nym\te3\n") or ["probe", "--kg", kg],
     ["test.tsv:2", "NUL"]),
    ("invalid UTF-8", lambda t, kg, m: _write(Path(kg) / "test.tsv", TEST_LINE.encode() + b"e0\t\xff\te3\n") or ["probe", "--kg", kg],
     ["test.tsv:2", "not valid UTF-8"]),
    ("JSONL name null", lambda t, kg, m: _jsonl(Path(kg), [{"id": "e0", "name": None}]) or ["probe", "--kg", kg],
     ["entities.jsonl:1", "key 'name' must be a string, got null"]),
    ("JSONL name list", lambda t, kg, m: _jsonl(Path(kg), [{"id": "e0", "name": ["dog"]}]) or ["probe", "--kg", kg],
     ["entities.jsonl:1", "key 'name'", "array"]),
    ("JSONL invalid JSON", lambda t, kg, m: _jsonl(Path(kg), []) or _write(Path(kg) / "entities.jsonl", '{"id": "e0", ')
     or ["probe", "--kg", kg], ["entities.jsonl:1", "invalid JSON"]),
    ("both TSV and JSONL", lambda t, kg, m: _write(Path(kg) / "entities.jsonl", '{"id": "e0", "name": "dog"}\n')
     or ["probe", "--kg", kg], ["entities.tsv and entities.jsonl", "ambiguous"]),
    ("unknown head id", lambda t, kg, m: _write(Path(kg) / "test.tsv", "e99\tcapital_of\te7\n") or ["probe", "--kg", kg],
     ["test.tsv:1", "unknown head entity id 'e99'"]),
    ("unknown relation id", lambda t, kg, m: _write(Path(kg) / "test.tsv", "e6\tborders\te7\n") or ["probe", "--kg", kg],
     ["test.tsv:1", "unknown relation id 'borders'"]),
    ("too few columns", lambda t, kg, m: _write(Path(kg) / "test.tsv", "e6\tcapital_of\n") or ["probe", "--probe", "lama", "--kg", kg],
     ["test.tsv:1", "expected 3 tab-separated columns, found 2"]),
    ("duplicate entity id", lambda t, kg, m: _write(Path(kg) / "entities.tsv", "e0\tdog\n" * 2) or ["probe", "--kg", kg],
     ["entities.tsv:2", "duplicate entity id 'e0'"]),
    ("empty name", lambda t, kg, m: _write(Path(kg) / "entities.tsv", "e0\t \n") or ["probe", "--kg", kg],
     ["entities.tsv:1", "empty name"]),
    ("missing entities file", lambda t, kg, m: (Path(kg) / "entities.tsv").unlink() or ["probe", "--kg", kg],
     ["entities.tsv", "missing file"]),
    ("KG folder that does not exist", lambda t, kg, m: ["probe", "--kg", str(Path(t) / "nowhere")],
     ["Unknown KG", "nowhere"]),
]

OPTION_CASES = [
    ("subset 0", lambda t, kg, m: ["probe", "--kg", kg, "--subset", "0"], ["--subset"]),
    ("subset -3", lambda t, kg, m: ["probe", "--kg", kg, "--subset", "-3"], ["--subset"]),
    ("bear subset -1", lambda t, kg, m: ["probe", "--probe", "bear", "--kg", kg, "--subset", "-1"], ["--subset"]),
    ("subset larger than the split", lambda t, kg, m: ["probe", "--kg", kg, "--subset", "1000"],
     ["subset 1000 is larger than the test split (4 triples)"]),
    ("seed -1", lambda t, kg, m: ["probe", "--kg", kg, "--seed", "-1"], ["--seed"]),
    ("k-shot -1", lambda t, kg, m: ["probe", "--probe", "lama", "--kg", kg, "--k-shot", "-1"], ["--k-shot"]),
    ("token budget 0", lambda t, kg, m: ["probe", "--kg", kg, "--token-budget", "0"], ["--token-budget"]),
    ("device gpu7", lambda t, kg, m: ["probe", "--kg", kg, "--model", m, "--device", "gpu7"],
     ["--device gpu7", "not a torch device"]),
    ("device cuda:0 without CUDA", lambda t, kg, m: ["probe", "--kg", kg, "--model", m, "--device", "cuda:0"],
     ["--device cuda:0", "CUDA is not available"]),
    ("dtype float8", lambda t, kg, m: ["probe", "--kg", kg, "--dtype", "float8"], ["--dtype"]),
    ("split bogus", lambda t, kg, m: ["probe", "--probe", "bear", "--kg", kg, "--split", "bogus"], ["--split"]),
    ("authors style with per-query shots", lambda t, kg, m: ["probe", "--kg", kg, "--template-style", "authors",
                                                            "--shots", "per-query"], ["shots='shared'"]),
    ("bear-dataset max-instances 0", lambda t, kg, m: ["bear-dataset", "--max-instances", "0"], ["--max-instances"]),
    ("experiment subset 0", lambda t, kg, m: ["experiment", "token-bias", "--kg", kg, "--subset", "0"], ["--subset"]),
    ("long-prompts bogus", lambda t, kg, m: ["probe", "--kg", kg, "--long-prompts", "bogus"], ["--long-prompts"]),
]


def _truncate_weights(model: Path) -> None:
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])


MODEL_CASES = [
    ("model folder without config.json", lambda t, kg, m: (Path(m) / "config.json").unlink() or ["probe", "--kg", kg, "--model", m],
     ["no config.json"]),
    ("config.json not JSON", lambda t, kg, m: _write(Path(m) / "config.json", "{") or ["probe", "--kg", kg, "--model", m],
     ["config.json: not a readable JSON config"]),
    ("truncated model.safetensors", lambda t, kg, m: _truncate_weights(Path(m)) or ["probe", "--probe", "bear", "--kg", kg, "--model", m],
     ["model.safetensors: truncated or corrupt safetensors file"]),
    ("empty model.safetensors", lambda t, kg, m: _write(Path(m) / "model.safetensors", b"") or ["probe", "--probe", "lama", "--kg", kg, "--model", m],
     ["model.safetensors: truncated or corrupt"]),
    ("no weights", lambda t, kg, m: (Path(m) / "model.safetensors").unlink() or ["probe", "--kg", kg, "--model", m],
     ["no weights"]),
    ("no tokenizer files", lambda t, kg, m: [p.unlink() for p in Path(m).glob("tokenizer*")] and ["probe", "--kg", kg, "--model", m],
     ["no tokenizer files"]),
    ("model path that does not exist", lambda t, kg, m: ["probe", "--kg", kg, "--model", str(Path(t) / "no-model") + "/"],
     ["no such model folder"]),
    ("model given as a file", lambda t, kg, m: ["probe", "--kg", kg, "--model", str(Path(m) / "config.json")],
     ["a file, not a model folder"]),
]


def _out_file(t: str) -> str:
    _write(Path(t) / "a_file", "x")
    return str(Path(t) / "a_file")


OUT_CASES = [
    ("--out is a file", lambda t, kg, m: ["probe", "--kg", kg, "--model", m, "--out", _out_file(t)],
     ["--out", "is a file"]),
    ("--out under a file", lambda t, kg, m: ["probe", "--probe", "bear", "--kg", kg, "--model", m, "--out", _out_file(t) + "/sub/run"],
     ["--out", "is a file, so the folder cannot be created"]),
    ("--out not writable", lambda t, kg, m: ["probe", "--probe", "lama", "--kg", kg, "--model", m, "--out", "/proc/deer-run"],
     ["--out /proc/deer-run", "cannot write in /proc"]),
    ("experiment --runs-dir not writable", lambda t, kg, m: ["experiment", "agreement", "--kg", kg, "--model", m,
                                                          "--runs-dir", "/proc/deer-runs"], ["--runs-dir /proc/deer-runs", "cannot write"]),
]

CASES = KG_CASES + OPTION_CASES + MODEL_CASES + OUT_CASES


def test_there_are_at_least_30_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name, build, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_before_any_work(name, build, expected, tmp_path, tiny_kg_dir, tiny_clm_dir, monkeypatch):
    if "CUDA is not available" in expected and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    model = _model_copy(tiny_clm_dir, tmp_path)
    args = build(str(tmp_path), str(tiny_kg_dir), str(model))
    assert_refused_before_loading(args, expected, tmp_path, monkeypatch, name)


def test_a_runaway_entity_name_is_refused_before_any_forward_pass(tmp_path, tiny_kg_dir, tiny_clm_dir, monkeypatch):
    """A 1 MB name (~300k tokens, far beyond the model's 2,048 positions) is named, not encoded."""
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    lines = (tiny_kg_dir / "entities.tsv").read_text().splitlines()
    lines[9] = "e9\t" + "plant " * 170_000 + "\t"
    _write(tiny_kg_dir / "entities.tsv", "\n".join(lines) + "\n")
    import deer.backends.encoder as encoder

    monkeypatch.setattr(encoder.PromptEOLEncoder, "encode_ids", lambda *a, **k: pytest.fail("a prompt was encoded"))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--out", str(out)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    line = [x for x in result.output.splitlines() if x.startswith("Error")][0]
    assert "entity 'e9'" in line and "tail prompt" in line and "2048 positions" in line, line
    assert not out.exists()


def test_long_descriptions_can_be_cut_to_fit(tmp_path, tiny_kg_dir, tiny_clm_dir):
    """--long-prompts truncate-descriptions cuts the description at a token boundary, so the tail
    prompt fits; the cut is in the metadata and, the KG text being different, in the run spec."""
    import deer

    lines = (tiny_kg_dir / "entities.tsv").read_text().splitlines()
    lines[2] = "e2\tanimal\t" + "a living organism " * 2000
    _write(tiny_kg_dir / "entities.tsv", "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="entity 'e2'"):
        deer.probe(str(tiny_kg_dir), str(tiny_clm_dir), k_shot=2, show_progress=False)
    result = deer.probe(str(tiny_kg_dir), str(tiny_clm_dir), k_shot=2, show_progress=False,
                        long_prompts="truncate-descriptions")
    cut = result.metadata["length_guard"]["truncated_descriptions"]
    assert list(cut) == ["e2"] and cut["e2"]["tokens_before"] > 2048
    kg = result.queries.kg
    assert kg.entity_descriptions[2].startswith("a living organism") and len(kg.entity_descriptions[2]) < 2000 * 18
    from transformers import AutoTokenizer

    from deer.backends.tokenization import batch_token_ids
    from deer.platform.templates import PromptTemplates

    tokens = batch_token_ids(AutoTokenizer.from_pretrained(tiny_clm_dir), [PromptTemplates.tail_prompt(kg, 2)])[0]
    assert 2048 - 64 <= len(tokens) <= 2048
    import bear_ref  # BEAR's statements hold names only: it feeds no description, so none is cut

    bear = bear_ref.bear(str(tiny_kg_dir), str(tiny_clm_dir), k_shot=2, show_progress=False, long_prompts="truncate-descriptions")
    assert bear.metadata["length_guard"]["truncated_descriptions"] == {}
    assert bear.queries.kg.entity_descriptions[2] == ("a living organism " * 2000).strip()


def test_a_run_with_cut_descriptions_can_be_run_again_into_its_folder(tmp_path, tiny_kg_dir, tiny_clm_dir, monkeypatch):
    """Its run spec records the KG as cut; `deer probe` and experiments.runs.run_probes checked (and named) the folder by
    the uncut KG's spec, so the same command a second time was refused as 'another run spec'."""
    from deer.backends.models import open_model
    from deer.platform.inputs import as_query_set
    from deer.platform.templates import PromptTemplates
    from experiments.runs import run_probes

    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    lines = (tiny_kg_dir / "entities.tsv").read_text().splitlines()
    lines[2] = "e2\tanimal\t" + "a living organism " * 2000
    _write(tiny_kg_dir / "entities.tsv", "\n".join(lines) + "\n")
    command = ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot", "2", "--long-prompts",
               "truncate-descriptions", "--out", str(tmp_path / "cli")]
    for _ in range(2):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 0, result.output
    queries, loaded = as_query_set(str(tiny_kg_dir)), open_model(str(tiny_clm_dir))
    runs = [run_probes(queries, loaded, ["deer"], None, PromptTemplates(k_shot=2), long_prompts="truncate-descriptions",
                       runs_dir=tmp_path / "runs", log=lambda *_: None) for _ in range(2)]
    assert runs[1].experiment["reused"] == ["deer"] and runs[1].folder == runs[0].folder
    assert list(runs[1].metadata["length_guard"]["truncated_descriptions"]) == ["e2"]


def test_an_unexpected_error_is_one_line_with_the_traceback_in_a_file(tmp_path, tiny_kg_dir, monkeypatch):
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DEER_DEBUG", raising=False)
    import deer.platform.inputs as inputs

    def broken(*args, **kwargs):
        raise TypeError("an internal bug")

    monkeypatch.setattr(inputs, "as_query_set", broken)
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("Error")]
    assert "unexpected TypeError: an internal bug" in line and "--debug" in line
    log = Path(line.split("traceback in ", 1)[1].split(";", 1)[0])
    assert log.parent == tmp_path / "cache" / "logs"
    assert "Traceback" in log.read_text() and "an internal bug" in log.read_text()
    loud = CliRunner().invoke(main, ["--debug", "probe", "--kg", str(tiny_kg_dir)])
    assert isinstance(loud.exception, TypeError)


def test_few_shot_shortfall_is_a_warning_and_recorded(tmp_path, tiny_kg_dir, tiny_clm):
    import deer
    from deer.platform.validate import DeerWarning

    with pytest.warns(DeerWarning, match="4 of 4 queries get fewer than k_shot=20"):
        result = deer.probe(str(tiny_kg_dir), tiny_clm, k_shot=20, show_progress=False)
    used = result.table["k_shot_used"].tolist()
    assert result.metadata["k_shot"] == {"asked": 20, "used_min": min(used), "used_max": max(used), "queries_with_fewer": 4}
    assert max(used) <= 9  # the tiny KG has 9 train triples
    (tiny_kg_dir / "train.tsv").unlink()
    with pytest.warns(DeerWarning, match="no train triples .* zero-shot"):
        result = deer.probe(str(tiny_kg_dir), tiny_clm, k_shot=8, show_progress=False)
    assert result.metadata["k_shot"]["used_max"] == 0 and set(result.table["k_shot_used"]) == {0}


def test_the_cli_prints_warnings_as_one_line(tmp_path, tiny_kg_dir, tiny_clm_dir, monkeypatch):
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    (tiny_kg_dir / "train.tsv").unlink()
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "Warning: KG 'tiny_kg' has no train triples" in result.output and "DeerWarning" not in result.output
