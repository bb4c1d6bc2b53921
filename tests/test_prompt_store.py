"""LAMA's vocabulary (any cloze candidate set) is encoded once per model: DEER's candidate vectors go
into a store keyed by the prompt's text, so a run with other facts or relations reads them back, an
interrupted run keeps what it finished, and an encoding of thousands of prompts is announced."""

from __future__ import annotations

import json
import signal
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deer.embedding_probe import LARGE_ENCODING
from deer.platform.validate import DeerWarning
from tests.benchmark_folders import write_lama
from tests.cli_processes import CLI, cli_env, interrupt_after_first_part, run_cli
from tests.store_faults import SHARD_INDEXES, stored_keys

N_WORDS = LARGE_ENCODING + 500  # more than the announcement threshold


@pytest.fixture(scope="module")
def big_vocabulary_lama(tmp_path_factory, smollm2_dir) -> Path:
    """The small LAMA folder with a common vocabulary of N_WORDS words that are one token (with
    their leading space) for SmolLM2's tokenizer, which the tiny test model uses."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    words = sorted({tokenizer.convert_tokens_to_string([t]).strip() for t in tokenizer.get_vocab()
                    if t.startswith("Ġ") and t[1:].isalpha() and t[1:].isascii() and len(t) > 3})
    assert len(words) > N_WORDS
    folder = write_lama(tmp_path_factory.mktemp("lama") / "lama")
    vocabulary = ["Paris", "London", "actor", "France", "lawyer", "gold"] + words[:N_WORDS]
    (folder / "common_vocab_cased.txt").write_text("\n".join(vocabulary) + "\n")
    return folder


def deer_on_lama(lama: Path, model: Path, out: Path, cache: Path | None, max_facts: int):
    from experiments.benchmarks import probe_benchmark

    return probe_benchmark(lama, str(model), probes=["deer"], candidate_kinds=["common-vocab"], max_facts=max_facts,
                           bootstrap=0, out=out, cache=cache is not None, cache_dir=cache, token_budget=256, show_progress=False)


def test_the_vocabulary_is_encoded_once_for_every_max_facts(tmp_path, big_vocabulary_lama, tiny_clm_dir):
    cache = tmp_path / "cache"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = deer_on_lama(big_vocabulary_lama, tiny_clm_dir, tmp_path / "one", cache, max_facts=1)
    prompts = first["metadata"]["deer"]["candidate_prompts"]
    assert prompts["prompts"] > LARGE_ENCODING and prompts["encoded_now"] == prompts["prompts"] and prompts["from_store"] == 0
    announced = [str(w.message) for w in caught if issubclass(w.category, DeerWarning) and "to encode" in str(w.message)]
    assert len(announced) == 1, announced
    assert announced[0].startswith(f"candidates: {prompts['prompts']:,} prompts (")
    assert announced[0].endswith(f"tokens) to encode; each finished batch is stored in {prompts['store']} (an interrupted run keeps it)")

    second = deer_on_lama(big_vocabulary_lama, tiny_clm_dir, tmp_path / "two", cache, max_facts=2)
    assert second["metadata"]["deer"]["candidate_prompts"] == {**prompts, "encoded_now": 0, "from_store": prompts["prompts"]}
    assert len(second["table"]) > len(first["table"])  # another task, the same vocabulary

    # Vectors read back from the store rank exactly as vectors encoded in this run.
    fresh = deer_on_lama(big_vocabulary_lama, tiny_clm_dir, tmp_path / "fresh", None, max_facts=2)
    assert fresh["metadata"]["deer"]["candidate_prompts"]["store"] is None
    pd.testing.assert_series_equal(second["table"]["deer_rank"], fresh["table"]["deer_rank"])
    np.testing.assert_allclose(second["table"]["deer_gold_score"], fresh["table"]["deer_gold_score"], atol=1e-6)


def test_an_interrupted_vocabulary_encoding_resumes_with_what_is_missing(tmp_path, big_vocabulary_lama, tiny_clm_dir):
    cache, out = tmp_path / "cache", tmp_path / "out"
    env = cli_env(cache, DEER_STORE_FLUSH_SECONDS="0.2")
    args = [*CLI, "cloze", "--dataset", str(big_vocabulary_lama), "--model", str(tiny_clm_dir), "--probes", "deer",
            "--candidates", "common-vocab", "--max-facts", "1", "--bootstrap", "0", "--token-budget", "64", "--out", str(out)]
    returncode = interrupt_after_first_part(args, env, f"embeddings/prompts/*/{SHARD_INDEXES}", cache, tmp_path / "stderr.txt",
                                            signal.SIGINT)
    log = (tmp_path / "stderr.txt").read_text()
    assert returncode == 130, log
    assert "prompts (" in log and "to encode; each finished batch is stored in" in log and "Traceback" not in log
    kept = len(stored_keys(cache / "embeddings" / "prompts"))

    run_cli(args, env, tmp_path / "rerun.txt")
    prompts = json.loads((out / "cloze" / "metadata.json").read_text())["deer"]["candidate_prompts"]
    assert 0 < kept < prompts["prompts"], f"{kept} prompts stored: the interrupt did not land mid-encoding"
    assert (prompts["from_store"], prompts["encoded_now"]) == (kept, prompts["prompts"] - kept)


STORE_FILES = ("key.json", ".vectors.npy", ".index.npy", "")


@pytest.mark.parametrize("code", ["ENOSPC", "EACCES", "EROFS"])
@pytest.mark.parametrize("place", STORE_FILES)
def test_a_run_whose_cache_cannot_be_written_finishes_as_without_one(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch, place,
                                                                     code):
    """Only the cache's disk full (or not writable) failed the whole run, though --out had room. Now every cause x
    every file DEER's prompt store and BEAR's score store write (4 places x 3 causes: 12 runs): the run finishes with
    the ranks of a run without a cache, says so in a DeerWarning naming the file, records it in metadata.json, and
    its result is saved and read back whole."""
    import deer
    from deer.backends.models import open_model
    from deer.runner import run_kg
    from kg_data import build_queries, load_kg
    from tests.write_faults import WRITE_ERRORS, fail_writes

    queries, loaded = build_queries(load_kg(str(tiny_kg_dir)), "test"), open_model(str(tiny_clm_dir))
    plain = run_kg(["deer", "bear"], queries, loaded, show_progress=False)
    fail_writes(monkeypatch, tmp_path / "cache", WRITE_ERRORS[code], place)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = run_kg(["deer", "bear"], queries, loaded, cache=True, cache_dir=tmp_path / "cache", out=tmp_path / "out",
                     show_progress=False)
    monkeypatch.undo()
    told = [str(w.message) for w in caught if issubclass(w.category, DeerWarning) and "without storing" in str(w.message)]
    assert len(told) == 2 and all(str(tmp_path / "cache") in line and f"[{code}]" in line for line in told), told
    for probe in ("deer", "bear"):
        for rank_type in ("raw", "filtered"):
            np.testing.assert_array_equal(run.ranks(rank_type, probe), plain.ranks(rank_type, probe))
        assert run.table[f"{probe}_top10"].tolist() == plain.table[f"{probe}_top10"].tolist()
        assert f"[{code}]" in run.metadata_of(probe)["cache"]["store_not_written"]
    stored = deer.load_result(tmp_path / "out")
    assert stored.metadata_of("deer")["cache"]["store_not_written"] == run.metadata_of("deer")["cache"]["store_not_written"]
    np.testing.assert_array_equal(stored.ranks("filtered", "bear"), plain.ranks("filtered", "bear"))
