"""The vllm backend against the hf backend, on the real SmolLM2-135M in float32, through the public run functions:
DEER vectors within 1e-5 relative and the same ranks, BEAR statement scores within 1e-4 nats (3e-5 relative) and the same ranks
and predictions (a KG, a constructed BEAR data set, a relation of the real one), LAMA the same ranks; what it
refuses before any engine starts (a masked LM, an engine option vLLM lacks, a device it does not run on).

vLLM lives in its own environment (it pins its own torch and transformers): ``bash scripts/install_vllm.sh``,
then ``.venv-vllm/bin/python -m pytest tests/test_vllm_backend.py``.  Every test shares one model's two engines
(pooling, generating: ``deer.backends.vllm_backend.SHARED``), started by the first test that needs each."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed in this environment: build it with `bash scripts/install_vllm.sh`, then run "
                "`.venv-vllm/bin/python -m pytest tests/test_vllm_backend.py`", allow_module_level=True)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bear_ref  # noqa: E402
import deer  # noqa: E402
from bear_ref.cloze_scoring import single_token_words  # noqa: E402
from deer.backends import open_backend  # noqa: E402
from deer.backends import vllm_backend as vb  # noqa: E402
from deer.backends.models import open_model  # noqa: E402
from deer.base.errors import OptionError  # noqa: E402
from deer.base.model_spec import ModelSpec  # noqa: E402
from deer.runner import run_cloze  # noqa: E402
from kg_data.bear import fill_statement, load_bear_dataset  # noqa: E402
from kg_data.cloze import lama_cloze_task  # noqa: E402
from kg_data.lama import load_lama  # noqa: E402
from kg_data.load import load_kg  # noqa: E402
from kg_data.queries import build_queries  # noqa: E402
from tests.benchmark_folders import (
    write_dataset,  # noqa: E402
    write_lama,  # noqa: E402
)

VECTOR_RTOL = 1e-5  # relative, float32 (as tests/tiny_models.py)
# Statement scores: 1e-4 nats, or 3e-5 relative where larger.  vLLM's CPU build sums float32 log-probs from other
# kernels: on ten P30 instances of the real BEAR (30 gold statements, 6-11 scored tokens, -30 to -65 nats) it was
# 1.4e-4 nats from the plain backend (the oracle; 1.8e-5 nats per token), the hf backend 4.1e-5; over all of P30
# (450 gold statements) at most 6.2e-4 nats (1.4e-5 relative) from hf, and a LAMA statement of -79 nats 3.9e-4
# (1.7e-5 relative).  Every rank and prediction was the same.
SCORE_TOLERANCE = {"atol": 1e-4, "rtol": 3e-5}


def relative_error(a, b) -> float:
    return float(np.max(np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)))


@pytest.fixture(scope="module")
def queries(tmp_path_factory):
    from tests.conftest import write_tiny_kg

    return build_queries(load_kg(write_tiny_kg(tmp_path_factory.mktemp("kg") / "tiny")), "train")


@pytest.fixture(scope="module")
def hf_model(smollm2_dir):
    return open_model(str(smollm2_dir), dtype="float32")


@pytest.fixture()
def no_engine(monkeypatch):
    """Any engine start fails the test: what is refused must be refused before one starts."""
    def refuse(*args, **kwargs):
        raise AssertionError("an engine was started")

    monkeypatch.setattr(vb, "start_engine", refuse)


@pytest.mark.parametrize("run", [deer.probe, bear_ref.bear, bear_ref.lama], ids=["deer", "bear", "lama"])
def test_every_probe_on_a_kg_equals_the_hf_backend(queries, hf_model, smollm2_dir, run):
    hf = run(queries, hf_model, k_shot=2, show_progress=False)
    vllm = run(queries, str(smollm2_dir), dtype="float32", k_shot=2, backend="vllm", show_progress=False)
    assert vllm.metadata["backend"] == "vllm" and hf.metadata["backend"] == "hf"
    for column in (f"{hf.probe}_rank_raw", f"{hf.probe}_rank_filtered"):
        assert vllm.table[column].tolist() == hf.table[column].tolist(), column
    assert set(vllm.arrays) == set(hf.arrays)
    for name, vectors in hf.arrays.items():  # DEER's and LAMA's query vectors, DEER's entity vectors
        assert relative_error(vllm.arrays[name], vectors) < VECTOR_RTOL, name


def test_statement_and_next_token_scores_equal_the_hf_backend(smollm2_dir, hf_model):
    """Through the seam itself: summed statement log-likelihoods (``score`` and ``score_statements``, a one-token
    statement among them) within 1e-4 nats (3e-5 relative), the same order; next-token log-probs of given ids, the same."""
    fast, engine = open_backend("hf", hf_model), open_backend("vllm", str(smollm2_dir), dtype="float32")
    context, continuations = "The capital of France is", [" Paris.", " Berlin.", " Rome.", " a city."]
    statements = [context + c for c in continuations] + ["Paris", "Paris is the capital of France."]
    expected = fast.statement_scorer().score_statements(statements)
    got = engine.statement_scorer().score_statements(statements)
    np.testing.assert_allclose(got, expected, **SCORE_TOLERANCE)
    assert np.argsort(-got).tolist() == np.argsort(-expected).tolist()
    np.testing.assert_allclose(engine.statement_scorer().score(context, continuations), got[:4], **SCORE_TOLERANCE)
    ids = np.asarray(fast.tokenizer([" Paris", " Berlin", " the"], add_special_tokens=False)["input_ids"]).ravel()
    prompts = [context, "Berlin is the capital of"]
    hf_out, vllm_out = (backend.encoder().encode(prompts, next_token_ids=ids) for backend in (fast, engine))
    np.testing.assert_allclose(vllm_out.next_token_logprobs, hf_out.next_token_logprobs, **SCORE_TOLERANCE)
    assert relative_error(vllm_out.embeddings, hf_out.embeddings) < VECTOR_RTOL


def bear_dataset_tables(folder, model, tmp_path, *extra) -> dict:
    from click.testing import CliRunner

    from experiments.cli import main

    tables = {}
    for backend in ("hf", "vllm"):
        out = tmp_path / backend
        result = CliRunner().invoke(main, ["bear-dataset", "--dataset", str(folder), "--model", str(model), "--dtype", "float32",
                                           "--backend", backend, "--out", str(out), *extra])
        assert result.exit_code == 0, result.output
        assert json.loads((out / "metadata.json").read_text())["bear"]["backend"] == backend
        tables[backend] = pd.read_parquet(out / "instances.parquet")
    return tables


@pytest.mark.parametrize("dataset", ["constructed", "BEAR P30"])
def test_a_bear_data_set_gives_the_hf_predictions(smollm2_dir, tmp_path, dataset):
    """`deer bear-dataset --backend vllm`: the same instances, predictions and ranks, gold scores within 1e-4 nats (3e-5 relative);
    on a constructed data set, and on ten instances of the real BEAR's P30 where the data set is here."""
    if dataset == "constructed":
        folder, extra = write_dataset(tmp_path / "BEARmini"), []
    else:
        try:
            folder = load_bear_dataset("bear", relations=["P30"], max_instances=10).path
        except Exception as error:  # noqa: BLE001 - optional data
            pytest.skip(f"BEAR not available: {error}")
        extra = ["--relations", "P30", "--max-instances", "10"]
    tables = bear_dataset_tables(folder, smollm2_dir, tmp_path, *extra)
    hf, vllm = tables["hf"], tables["vllm"]
    columns = ["relation", "template", "row", "predicted_id", "rank"]
    assert len(hf) and vllm[columns].equals(hf[columns])
    np.testing.assert_allclose(vllm["gold_score"], hf["gold_score"], **SCORE_TOLERANCE)


def test_a_lama_cloze_run_gives_the_hf_ranks(tmp_path, hf_model):
    """run_cloze on a small LAMA set (DEER, LAMA and BEAR): the same ranks and predictions, gold scores alike."""
    data = load_lama(write_lama(tmp_path / "lama"))
    task = lama_cloze_task(data, single_token_words(hf_model.tokenizer, data.common_vocab, masked=False))
    hf = run_cloze(task, hf_model, show_progress=False)
    vllm = run_cloze(task, hf_model, show_progress=False, backend="vllm")
    assert vllm.metadata_of("lama")["backend"] == "vllm"
    for probe in ("deer", "lama", "bear"):
        for column in (f"{probe}_rank", f"{probe}_predicted"):  # NaN where a probe ranks no candidate of the query
            pd.testing.assert_series_equal(vllm.table[column], hf.table[column])
        np.testing.assert_allclose(vllm.table[f"{probe}_gold_score"], hf.table[f"{probe}_gold_score"], **SCORE_TOLERANCE)


def test_stores_keep_the_engines_vectors_apart(queries, smollm2_dir, tmp_path):
    """A store filled by the hf backend is not read by the vllm backend (their vectors differ in the last bits);
    the vllm backend's own store is read back on a second run."""
    def encoded(backend):
        result = deer.probe(queries, str(smollm2_dir), dtype="float32", k_shot=2, backend=backend, cache=True,
                            cache_dir=tmp_path / "cache", show_progress=False)
        return result.metadata["cache"]["entities_encoded_now"]

    assert encoded("hf") > 0
    assert encoded("vllm") > 0  # not read from hf's store
    assert encoded("vllm") == 0  # its own


def test_a_masked_lm_is_refused_by_name_before_any_engine_starts(tmp_path, no_engine):
    from transformers import BertConfig

    folder = tmp_path / "tiny-bert"
    BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
               architectures=["BertForMaskedLM"]).save_pretrained(folder)  # no weights: refused from config.json alone
    with pytest.raises(OptionError, match=r"backend='vllm': .*tiny-bert is a masked LM \(BertForMaskedLM\); the vllm backend "
                                          "runs causal LMs only"):
        open_backend("vllm", str(folder))


def test_engine_options_reach_the_engine_and_unknown_ones_are_refused_by_name(smollm2_dir, monkeypatch, no_engine):
    name = str(smollm2_dir)
    for option in ("max_num_seqz", "runner"):  # a typo; one the backend sets itself
        with pytest.raises(OptionError, match=f"model_kwargs='{option}=1'"):
            open_backend("vllm", ModelSpec(name, {option: 1}))
    with pytest.raises(OptionError, match="device='cuda'.*this vLLM runs on cpu"):
        open_backend("vllm", name, device="cuda")
    with pytest.raises(OptionError, match="model=.*the vllm backend loads the weights itself"):
        open_backend("vllm", (object(), object()))
    started = []
    monkeypatch.setattr(vb, "start_engine", lambda model, runner: started.append((model.options, model.dtype, runner)) or "engine")
    backend = open_backend("vllm", ModelSpec(name, {"max_model_len": 256, "max_num_seqs": 8}), dtype="float32")
    assert backend.max_positions == 256 and backend.loaded.dtype == "float32" and backend.device.type == "cpu"
    vb.release_engines()
    assert backend.engines.engine("pooling") == "engine"
    assert started == [({"max_model_len": 256, "max_num_seqs": 8}, "float32", "pooling")]
    vb.release_engines()  # the recorded engine is no engine: the next test starts real ones


def test_the_fingerprint_hashes_the_weight_files_not_where_they_are(smollm2_dir, tmp_path, no_engine):
    """Content-addressed from the files: a copy elsewhere has the same fingerprint, one changed byte another;
    an engine option that changes only speed leaves it, one that changes what is computed does not."""
    copy = tmp_path / "copy"
    shutil.copytree(smollm2_dir, copy)
    first = open_backend("vllm", str(smollm2_dir)).loaded
    assert open_backend("vllm", str(copy)).loaded.fingerprint == first.fingerprint
    assert open_backend("vllm", ModelSpec(str(copy), {"max_model_len": 512})).loaded.fingerprint == first.fingerprint
    assert open_backend("vllm", ModelSpec(str(copy), {"quantization": "fp8"})).loaded.fingerprint != first.fingerprint
    weights = next(copy.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert open_backend("vllm", str(copy)).loaded.fingerprint != first.fingerprint
    statement = fill_statement("The capital of [X] is [Y].", "France", "Paris")
    assert open_backend("vllm", str(copy)).token_counts([statement]) == [len(first.tokenizer(statement)["input_ids"]) + 1]


def test_the_gpu_benchmark_runs_its_vllm_rows_on_the_cpu(tmp_path, smollm2_dir):
    """``benchmarks/bench_gpu.py --vllm`` end to end (tiny KG, a constructed BEAR relation), so that it works the
    first time a GPU runs it: the vllm rows give the hf backend's DEER ranks and BEAR predictions."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import write_tiny_kg

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"
    bear, out = write_dataset(tmp_path / "data" / "BEARmini"), tmp_path / "gpu"
    done = subprocess.run([sys.executable, str(script), "--model", str(smollm2_dir), "--kg", str(write_tiny_kg(tmp_path / "kg")),
                           "--device", "cpu", "--k-shot", "2", "--bear-sample", "1", "--bear-dataset", str(bear),
                           "--bear-relations", "P36", "--no-paper-protocol", "--peak-size", "256", "--vllm",
                           "--vllm-model-arg", "max_num_seqs=64", "--out", str(out)],
                          env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "bench_gpu.json").read_text())
    rows = {(row["part"].split(" (")[0], row["backend"]): row for row in report["parts"]}
    assert report["settings"]["vllm_model_args"] == ["max_num_seqs=64"]
    assert rows[("vllm engines start", "vllm")]["seconds"] > 0
    deer_row = rows[("deer 4 queries x 12 entities", "vllm")]
    assert deer_row["tokens"] > 0 and deer_row["ranks_differing"] == 0 and deer_row["ranks_as_hf"] == 4
    assert rows[("bear data set", "vllm")]["predictions_as_hf"] == "9/9"  # 3 instances x 3 templates
    assert rows[("bear data set", "vllm")]["bear_score"] == rows[("bear data set", "hf")]["bear_score"]
