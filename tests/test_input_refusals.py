"""Trust nothing read back: inputs the data and API layers used to pass on (or fail on late, unnamed)
are refused by name before a model is loaded.

- an explicit --data-dir / data_dir is the only folder searched (no silent fallback to another root);
- a KG or model argument of a type nothing accepts names the argument and what it accepts;
- an empty entities or relations file is reported as such, not as an unknown id in a split;
- a lone surrogate in a JSONL KG is refused at read time with its file:line;
- DeerCallback refuses a metric_for_best_model it does not report, a fractional/boolean
  every_n_steps and an ``out`` that is a file, before training;
- an out folder that takes no data (a full disk, no permission, read-only) is refused before the model loads.
"""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import pytest

import bear_ref
import deer
from kg_data.errors import KGFormatError, KGNotFoundError
from tests.conftest import TINY_ENTITIES, TINY_SPLITS
from tests.refusals import assert_refused_before_loading


@pytest.fixture()
def no_model_loading(monkeypatch):
    import deer.backends.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


def _model_copy(model: Path, tmp: Path) -> str:
    return str(shutil.copytree(model, tmp / "model_copy"))


def _wn18rr_format(folder: Path) -> Path:
    """The tiny KG in WN18RR's files (entity2text.txt, train/dev/test.tsv; ids "e3" as synset offsets "00000003"):
    a data set a fallback could find."""
    def offset(entity_id: str) -> str:
        return f"{int(entity_id[1:]):08d}"

    (folder / "wn18rr").mkdir(parents=True)
    (folder / "wn18rr" / "entity2text.txt").write_text("".join(f"{offset(i)}\t{n}, {d}\n" for i, n, d in TINY_ENTITIES))
    for split, file_name in (("train", "train.tsv"), ("valid", "dev.tsv"), ("test", "test.tsv")):
        (folder / "wn18rr" / file_name).write_text("".join(f"{offset(h)}\t{r}\t{offset(t)}\n" for h, r, t in TINY_SPLITS[split]))
    return folder


# -- 1. an explicit data folder is the only one searched ------------------------------------------

def test_cli_data_dir_without_the_data_set_is_refused_not_swapped(tmp_path, tiny_clm_dir, monkeypatch):
    monkeypatch.setenv("DEER_DATA_DIR", str(_wn18rr_format(tmp_path / "elsewhere")))  # found before the fix
    monkeypatch.setenv("DEER_OFFLINE", "1")
    given = tmp_path / "given"
    given.mkdir()
    model = _model_copy(tiny_clm_dir, tmp_path)
    assert_refused_before_loading(
        ["probe", "--kg", "wn18rr", "--data-dir", str(given), "--model", model, "--k-shot", "0"],
        [f"--data-dir {given} holds no 'wn18rr' data set", str(given / "wn18rr" / "entity2text.txt"),
         "deer data fetch wn18rr", "deer data`"], tmp_path, monkeypatch, "empty --data-dir")


def test_api_data_dir_is_the_only_place_looked_and_the_search_order_stays_without_it(tmp_path, monkeypatch, no_model_loading):
    monkeypatch.setenv("DEER_DATA_DIR", str(_wn18rr_format(tmp_path / "elsewhere")))
    monkeypatch.setenv("DEER_OFFLINE", "1")
    (tmp_path / "given").mkdir()
    with pytest.raises(KGNotFoundError, match=r"holds no 'wn18rr' data set \(expected .*given/wn18rr/entity2text.txt"):
        deer.probe("wn18rr", data_dir=tmp_path / "given", show_progress=False)
    assert deer.load_queries("wn18rr").kg.n_entities == len(TINY_ENTITIES)  # $DEER_DATA_DIR still searched


# -- 2. a KG or model argument of no accepted type -----------------------------------------------

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


# -- 3 and 4. empty entity/relation files, lone surrogates in JSONL -------------------------------

def _jsonl_entities(kg: Path, records: list[dict]) -> None:
    (kg / "entities.tsv").unlink()
    (kg / "entities.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))  # json.dumps writes \ud800 escaped


def _entity_records(**change) -> list[dict]:
    records = [{"id": i, "name": n, "description": d} for i, n, d in TINY_ENTITIES]
    records[2].update(change)
    return records


KG_CASES = [
    ("empty entities.tsv", lambda kg: (kg / "entities.tsv").write_text(""), ["entities.tsv: no entities"]),
    ("blank-only entities.tsv", lambda kg: (kg / "entities.tsv").write_text("\n\n"), ["entities.tsv: no entities"]),
    ("empty entities.jsonl", lambda kg: _jsonl_entities(kg, []), ["entities.jsonl: no entities"]),
    ("empty relations.tsv", lambda kg: (kg / "relations.tsv").write_text(""), ["relations.tsv: no relations"]),
    ("lone surrogate in a name", lambda kg: _jsonl_entities(kg, _entity_records(name="\ud800")),
     ["entities.jsonl:3", "key 'name'", "lone surrogate"]),
    ("lone surrogate in a description", lambda kg: _jsonl_entities(kg, _entity_records(description="x\udfff")),
     ["entities.jsonl:3", "key 'description'", "lone surrogate"]),
]


@pytest.mark.parametrize("name, build, expected", KG_CASES, ids=[c[0] for c in KG_CASES])
def test_cli_bad_kg_file_is_named(name, build, expected, tmp_path, tiny_kg_dir, tiny_clm_dir, monkeypatch):
    build(tiny_kg_dir)
    model = _model_copy(tiny_clm_dir, tmp_path)
    assert_refused_before_loading(["probe", "--kg", str(tiny_kg_dir), "--model", model], expected, tmp_path, monkeypatch, name)


def test_empty_wn18rr_entity_file_is_named(tmp_path):
    from kg_data.wn18rr import load_wn18rr

    folder = _wn18rr_format(tmp_path) / "wn18rr"
    (folder / "entity2text.txt").write_text("")
    with pytest.raises(KGFormatError, match=r"entity2text.txt: no entities"):
        load_wn18rr(folder)


# -- 5. DeerCallback: checked before training ----------------------------------------------------

@pytest.mark.parametrize("every", [2.5, 0, -1, True])
def test_callback_every_n_steps_must_be_a_whole_count(every, tiny_kg_dir):
    from deer.integrations import DeerCallback

    with pytest.raises(ValueError, match=r"every_n_steps="):
        DeerCallback(str(tiny_kg_dir), every_n_steps=every)


def test_callback_out_that_is_a_file_is_refused(tiny_kg_dir, tmp_path):
    from deer.integrations import DeerCallback

    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match=r"out=.*a_file.*exists and is not a folder"):
        DeerCallback(str(tiny_kg_dir), out=tmp_path / "a_file")


def _args(tmp_path, metric):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], use_cpu=True, metric_for_best_model=metric)


@pytest.mark.parametrize("metric", ["deer/mrrr", "eval_deer/hit@100"])
def test_callback_refuses_a_best_model_metric_it_does_not_report(metric, tiny_kg_dir, tmp_path, no_model_loading):
    from transformers import TrainerControl, TrainerState

    from deer.integrations import DeerCallback

    added = []
    trainer = types.SimpleNamespace(args=_args(tmp_path, metric), add_callback=added.append)
    listed = r"DeerCallback reports deer/hit@1, deer/hit@3, deer/hit@10, deer/mrr, deer/mr, deer/seconds"
    with pytest.raises(ValueError, match=rf"metric_for_best_model='{metric}': {listed}"):
        DeerCallback.attach(trainer, str(tiny_kg_dir))
    assert added == []
    callback = DeerCallback(str(tiny_kg_dir), at_start=True)  # added without attach: refused when training begins
    with pytest.raises(ValueError, match="metric_for_best_model"):
        callback.on_train_begin(_args(tmp_path, metric), TrainerState(), TrainerControl())
    assert callback.results == {}


def test_callback_accepts_the_metrics_it_reports(tiny_kg_dir, tmp_path):
    from deer.integrations import DeerCallback

    for metric in ("deer/mrr", "eval_deer/hit@10", "loss", "eval_other/x"):
        trainer = types.SimpleNamespace(args=_args(tmp_path, metric), add_callback=lambda callback: None)
        DeerCallback.attach(trainer, str(tiny_kg_dir))
    with pytest.raises(ValueError, match="on_evaluate=False"):
        DeerCallback.attach(types.SimpleNamespace(args=_args(tmp_path, "deer/mrr"), add_callback=print), str(tiny_kg_dir),
                            on_evaluate=False)


@pytest.mark.parametrize("code", ["ENOSPC", "EACCES", "EROFS"])
def test_an_out_folder_that_takes_no_data_is_refused_before_the_model_loads(code, tmp_path, tiny_kg_dir, tiny_clm_dir,
                                                                            monkeypatch):
    """With ~20 KiB free where --out points, the check made a file without writing to it, so a full disk was found only
    after all the encoding, at the save. The out folder now takes a small probe write first: refused by name (3 cases)."""
    from tests.write_faults import WRITE_ERRORS, fail_writes

    full = tmp_path / "r" / "full"
    full.mkdir(parents=True)
    fail_writes(monkeypatch, full, WRITE_ERRORS[code])
    assert_refused_before_loading(["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--no-cache",
                                   "--out", str(full / "run")], ["--out", str(full / "run"), f"cannot write in {full}"],
                                  tmp_path / "r", monkeypatch, code)
