"""No lost work: stores write parts by count and by time and on an interrupt, a run on a store
another run is encoding waits and encodes only what is still missing, and probes saving into one
folder at once all end up in it."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deer.base.files import read_table
from deer.embedding_probe import encode_through_store, prompt_keys
from deer.platform.result import RunResult, find_ranks_table, load_results
from deer.platform.stores import EmbeddingStore, PendingParts, flush_seconds, item_keys
from tests.store_faults import SHARD_INDEXES, stored_keys

# Entity encoding of this many synthetic entities takes a few seconds with the tiny model and a
# small token budget: long enough to interrupt it after its first part.
N_ENTITIES = 2500
CLI = [sys.executable, "-c", "from experiments.cli import main; main(prog_name='deer')"]


def write_synthetic_kg(folder: Path, n: int) -> Path:
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ra", "tu", "ne", "so", "vi", "da", "pe", "zu", "fo"]

    def word(k: int) -> str:
        return "".join(rng.choice(syllables) for _ in range(k))

    folder.mkdir(parents=True)
    (folder / "entities.tsv").write_text(
        "".join(f"e{i}\t{word(3)} {word(2)}\ta {word(2)} of the {word(3)} {word(2)} kind\n" for i in range(n)))
    (folder / "relations.tsv").write_text("r0\trelated to\nr1\tpart of\n")
    train = [(f"e{rng.randrange(n)}", f"r{rng.randrange(2)}", f"e{rng.randrange(n)}") for _ in range(50)]
    test = [(f"e{i}", f"r{i % 2}", f"e{i + 1}") for i in range(5)]
    for split, rows in (("train", train), ("valid", test[:1]), ("test", test)):
        (folder / f"{split}.tsv").write_text("".join("\t".join(row) + "\n" for row in rows))
    return folder


def cli_env(cache: Path, **extra: str) -> dict:
    return {**os.environ, "DEER_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "DEER_OFFLINE": "1",
            "OMP_NUM_THREADS": "1", **extra}


def probe_args(kg: Path, model: Path, out: Path, probe: str = "deer") -> list[str]:
    return [*CLI, "probe", "--probe", probe, "--kg", str(kg), "--model", str(model), "--k-shot", "2", "--token-budget", "256",
            "--out", str(out)]


def run_cli(args: list[str], env: dict, log: Path) -> subprocess.CompletedProcess:
    with open(log, "w") as stderr:
        done = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + log.read_text()
    return done


def stored_ids(cache: Path) -> set[bytes]:
    """The prompt keys in the cache's prompt stores (entities and queries, keyed by their text)."""
    return set(stored_keys(cache / "embeddings" / "prompts"))


@pytest.fixture(scope="module")
def large_kg(tmp_path_factory) -> Path:
    return write_synthetic_kg(tmp_path_factory.mktemp("large") / "kg", N_ENTITIES)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, large_kg, tiny_clm_dir) -> Path:
    """An uninterrupted run with its own fresh cache."""
    root = tmp_path_factory.mktemp("reference")
    run_cli(probe_args(large_kg, tiny_clm_dir, root / "out"), cli_env(root / "cache"), root / "stderr.txt")
    return root / "out"


# -- interrupting a probe -------------------------------------------------------------------------


def interrupt_after_first_part(args: list[str], env: dict, parts: str, cache: Path, stderr_path: Path, sig) -> int:
    """Run the CLI, send ``sig`` as soon as a store part matching ``parts`` (a glob under ``cache``)
    is written, and return its exit code."""
    with open(stderr_path, "w") as stderr:
        # A user's Ctrl-C reaches a process whose SIGINT is at its default; the child inherits the test
        # process's disposition, which an earlier test may have left ignored (then Python installs no handler).
        process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 120
            while not list(cache.glob(parts)):
                assert process.poll() is None and time.monotonic() < deadline, f"no part {parts} was written"
                time.sleep(0.02)
            process.send_signal(sig)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    return process.returncode


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_interrupted_probe_keeps_its_parts_and_resumes(tmp_path, large_kg, tiny_clm_dir, reference_run, sig):
    cache, out = tmp_path / "cache", tmp_path / "out"
    env = cli_env(cache, DEER_STORE_FLUSH_SECONDS="0.2")
    args = probe_args(large_kg, tiny_clm_dir, out)
    returncode = interrupt_after_first_part(args, env, f"embeddings/prompts/*/{SHARD_INDEXES}", cache, tmp_path / "stderr.txt", sig)
    kept = stored_ids(cache)
    assert 0 < len(kept) < N_ENTITIES, f"{len(kept)} entities stored: the interrupt did not land mid-encoding"
    assert not out.exists() or not (out / "metrics.json").exists()
    if sig == signal.SIGINT:
        # Ctrl-C: the pending vectors were written, the run stopped with a message, not a traceback
        # (exit 130 from the CLI's interrupt handler; 1 is click's own "Aborted!").
        assert returncode in (1, 130)
        assert "Traceback" not in (tmp_path / "stderr.txt").read_text()

    run_cli(args, env, tmp_path / "rerun.txt")
    cache_info = json.loads((out / "metadata.json").read_text())["deer"]["cache"]
    assert cache_info["entities_from_cache"] == len(kept)
    assert cache_info["entities_encoded_now"] == N_ENTITIES - len(kept)
    assert len(stored_ids(cache)) == N_ENTITIES + cache_info["queries_encoded_now"]  # the entities, then the 5 queries
    assert cache_info["queries_encoded_now"] == 5
    # The resumed run's results are the uninterrupted run's.
    pd.testing.assert_frame_equal(read_table(find_ranks_table(out)), read_table(find_ranks_table(reference_run)))
    assert (out / "metrics.json").read_bytes() == (reference_run / "metrics.json").read_bytes()


def test_two_runs_on_one_cache_encode_each_entity_once(tmp_path, large_kg, tiny_clm_dir):
    env = cli_env(tmp_path / "cache")
    logs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    processes = []
    for name, log in zip("ab", logs, strict=True):
        with open(log, "w") as stderr:
            processes.append(subprocess.Popen(probe_args(large_kg, tiny_clm_dir, tmp_path / name), env=env,
                                              stdout=subprocess.DEVNULL, stderr=stderr))
    for process, log in zip(processes, logs, strict=True):
        assert process.wait(timeout=300) == 0, log.read_text()
    encoded = [json.loads((tmp_path / name / "metadata.json").read_text())["deer"]["cache"]["entities_encoded_now"]
               for name in "ab"]
    assert sum(encoded) == N_ENTITIES, encoded
    assert (tmp_path / "a" / "metrics.json").read_bytes() == (tmp_path / "b" / "metrics.json").read_bytes()


# -- probes saving into one folder ----------------------------------------------------------------


def test_probe_and_lama_into_one_folder_at_once(tmp_path, tiny_kg_dir, tiny_clm_dir):
    env, out = cli_env(tmp_path / "cache"), tmp_path / "out"
    processes = []
    for probe in ("deer", "lama"):
        with open(tmp_path / f"{probe}.txt", "w") as stderr:
            processes.append((probe, subprocess.Popen(probe_args(tiny_kg_dir, tiny_clm_dir, out, probe), env=env,
                                                      stdout=subprocess.DEVNULL, stderr=stderr)))
    for probe, process in processes:
        assert process.wait(timeout=300) == 0, (tmp_path / f"{probe}.txt").read_text()
    table = read_table(find_ranks_table(out))
    assert {"deer_rank_filtered", "lama_rank_filtered"} <= set(table.columns)
    for name in ("metrics.json", "metadata.json"):
        assert set(json.loads((out / name).read_text())) == {"deer", "lama"}


@pytest.fixture()
def tiny_result(tiny_kg_dir, tiny_clm_dir) -> RunResult:
    import deer
    from deer.platform.templates import PromptTemplates
    from kg_data import build_queries
    from kg_data.textual import load_textual_kg

    kg = load_textual_kg(tiny_kg_dir)
    return deer.probe(build_queries(kg, "test"), str(tiny_clm_dir), templates=PromptTemplates(k_shot=2), cache=False,
                      show_progress=False)


def as_probe(result: RunResult, probe: str) -> RunResult:
    """The same result under another probe name (its columns renamed)."""
    table = result.table.rename(columns={c: c.replace("deer_", f"{probe}_", 1) for c in result.table.columns})
    return RunResult.of_probe(probe, table, result.metrics, result.metadata, spec=result.spec)


def save_at_once(results: list[RunResult], folder: Path) -> None:
    """Save each result from its own thread, all released at the same moment."""
    start, errors = threading.Barrier(len(results)), []

    def save(result: RunResult) -> None:
        try:
            start.wait()
            result.save(folder)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=save, args=(result,)) for result in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_results_saved_at_once_all_end_up_in_the_folder(tmp_path, tiny_result):
    probes = [f"p{i}" for i in range(6)]
    for attempt in range(3):
        folder = tmp_path / f"run{attempt}"
        save_at_once([as_probe(tiny_result, probe) for probe in probes], folder)
        assert set(load_results(folder)) == set(probes)
        for name in ("metrics.json", "metadata.json"):
            assert set(json.loads((folder / name).read_text())) == set(probes)
        # exactly the results: no temp file, and no lock file either (its holder removes it; kg_data.locks)
        assert {p.name for p in folder.iterdir()} == {"ranks.parquet", "metrics.json", "metadata.json", "run_spec.json"}


# -- the flush policy and the store ---------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def parts(store: EmbeddingStore, ids="abcdef") -> list[list[str]]:
    """Ids (among ``ids``) of each shard, in write order."""
    by_key = dict(zip(item_keys(list(ids)).tolist(), ids, strict=True))
    return [[by_key[key] for key in np.load(index)["key"].tolist()] for index in sorted(store.folder.glob("shard-*.index.npy"))]


def test_pending_parts_write_by_count_and_by_time(tmp_path):
    store, clock = EmbeddingStore(tmp_path, "entities", {"model": "m"}), Clock()
    pending = PendingParts(store, count=3, seconds=10, clock=clock)
    pending.add(["a", "b"], np.ones((2, 4)))
    assert parts(store) == [] and len(pending) == 2
    pending.add(["c"], np.ones((1, 4)))
    assert parts(store) == [["a", "b", "c"]] and len(pending) == 0
    pending.add(["d"], np.ones((1, 4)))
    clock.now = 9.9
    pending.add(["e"], np.ones((1, 4)))
    assert len(parts(store)) == 1
    clock.now = 10.0  # 10 s after the last write, though fewer than `count` are pending
    pending.add(["f"], np.ones((1, 4)))
    assert parts(store)[1] == ["d", "e", "f"]
    assert EmbeddingStore(tmp_path, "entities", {"model": "m"}).get(["f", "a"]).dtype == np.float32


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_pending_parts_are_written_when_the_work_stops(tmp_path, error):
    store = EmbeddingStore(tmp_path, "entities", {"model": "m"})
    with pytest.raises(error), PendingParts(store, count=100, seconds=100) as pending:
        pending.add(["a", "b"], np.ones((2, 4)))
        raise error
    assert parts(store) == [["a", "b"]]


@pytest.mark.parametrize("error", [None, KeyboardInterrupt])
def test_parts_written_behind_are_all_written_in_order_by_the_exit(tmp_path, error):
    """``behind=True``: a due part goes to a writer thread while items keep coming; by the exit (also
    on Ctrl-C) every part is written, in the order given, with the rows given."""
    store = EmbeddingStore(tmp_path, "entities", {"model": "m"})
    rows = {i: np.full((1, 4), ord(i), np.float32) for i in "abcdef"}
    with contextlib.suppress(KeyboardInterrupt), PendingParts(store, count=2, seconds=100, behind=True) as pending:
        for i in "abcde":
            pending.add([i], rows[i])
        if error:
            raise error
    assert parts(store) == [["a", "b"], ["c", "d"], ["e"]]
    assert np.array_equal(EmbeddingStore(tmp_path, "entities", {"model": "m"}).get(list("abcde")),
                          np.concatenate([rows[i] for i in "abcde"]))


def test_an_error_writing_behind_is_raised_at_the_next_write(tmp_path, monkeypatch):
    store = EmbeddingStore(tmp_path, "entities", {"model": "m"})

    def disk_full(keys, vectors):
        raise OSError("No space left on device")

    monkeypatch.setattr(store, "add", disk_full)
    pending = PendingParts(store, count=1, seconds=100, behind=True)
    pending.add(["a"], np.ones((1, 4)))  # handed to the writer
    with pytest.raises(OSError, match="No space left"):
        pending.add(["b"], np.ones((1, 4)))


def test_flush_interval_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("DEER_STORE_FLUSH_SECONDS", raising=False)
    assert flush_seconds() == 60
    monkeypatch.setenv("DEER_STORE_FLUSH_SECONDS", "0.5")
    assert PendingParts(EmbeddingStore(tmp_path, "entities", {"model": "m"})).seconds == 0.5
    monkeypatch.setenv("DEER_STORE_FLUSH_SECONDS", "soon")
    with pytest.raises(ValueError, match="DEER_STORE_FLUSH_SECONDS"):
        flush_seconds()


def test_two_stores_on_one_folder(tmp_path):
    first = EmbeddingStore(tmp_path, "entities", {"model": "m"})
    second = EmbeddingStore(tmp_path, "entities", {"model": "m"})
    first.add(["a", "b"], np.ones((2, 3)))
    assert second.missing(["a", "b", "c"]) == [0, 1, 2]
    second.refresh()
    assert second.missing(["a", "b", "c"]) == [2]
    second.add(["c"], np.full((1, 3), 2.0))
    first.add(["d"], np.full((1, 3), 3.0))
    first.refresh()
    second.refresh()
    for store in (first, second, EmbeddingStore(tmp_path, "entities", {"model": "m"})):
        assert store.get(["a", "c", "d"]).tolist() == [[1, 1, 1], [2, 2, 2], [3, 3, 3]]
    assert len(parts(first)) == 3


class FakeEncoder:
    """Encodes text i as a vector of len(text)s, one batch per text; records what it encoded."""

    show_progress = False

    def __init__(self):
        self.encoded: list[str] = []

    def tokenize(self, texts):
        return [list(text) for text in texts]

    def encode_ids(self, id_lists, progress=None, on_batch=None, **_):
        for i, ids in enumerate(id_lists):
            self.encoded.append("".join(ids))
            on_batch(np.array([i]), np.full((1, 2), float(len(ids))))


def test_a_run_waits_for_the_store_and_encodes_only_what_is_missing(tmp_path, capfd):
    key = {"model": "m"}
    holder, waiter = EmbeddingStore(tmp_path, "entities", key), EmbeddingStore(tmp_path, "entities", key)
    encoder, result = FakeEncoder(), {}
    texts = ["x", "yy", "zzz"]

    def other_run():
        result["vectors"], result["encoded"] = encode_through_store(encoder, waiter, texts, "entities")

    with holder.locked():
        thread = threading.Thread(target=other_run)
        thread.start()
        deadline = time.monotonic() + 10
        assert (holder.folder / ".lock").read_text() == str(os.getpid())
        while f"waiting for another run encoding into {holder.folder} (pid {os.getpid()})" not in capfd.readouterr().err:
            assert time.monotonic() < deadline, "the second run did not wait"
            time.sleep(0.01)
        holder.add(prompt_keys(["x", "zzz"]), np.full((2, 2), 9.0))
    thread.join(timeout=10)
    assert result["encoded"] == 1 and encoder.encoded == ["yy"]
    assert result["vectors"].tolist() == [[9, 9], [2, 2], [9, 9]]



class InterruptedScorer:
    """Scores two queries, then is interrupted (Ctrl-C) on the third."""

    def __init__(self):
        self.calls = 0

    def score(self, context, continuations):
        self.calls += 1
        if self.calls == 3:
            raise KeyboardInterrupt
        return np.full(len(continuations), float(self.calls), dtype=np.float32)


def test_bear_keeps_the_rows_scored_before_an_interrupt(tmp_path, tiny_kg_dir):
    from bear_ref.kg_probe import bear_kg_scores
    from deer.platform.templates import PromptTemplates
    from kg_data import build_queries
    from kg_data.textual import load_textual_kg

    queries, templates = build_queries(load_textual_kg(tiny_kg_dir), "test"), PromptTemplates(k_shot=2)
    store = EmbeddingStore(tmp_path, "bear", {"model": "m"})
    with pytest.raises(KeyboardInterrupt):
        bear_kg_scores(queries, InterruptedScorer(), templates, store, show_progress=False)
    reopened = EmbeddingStore(tmp_path, "bear", {"model": "m"})
    assert reopened.missing(queries.item_ids()) == [2, 3]
    scorer = InterruptedScorer()
    scorer.calls = 10  # the resumed run scores only queries 2 and 3
    scores, scored_now = bear_kg_scores(queries, scorer, templates, reopened, show_progress=False)
    assert scored_now == 2 and scores[:, 0].tolist() == [1, 2, 11, 12]
