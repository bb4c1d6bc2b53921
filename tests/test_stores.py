"""deer/platform/stores.py: the stores of vectors, score rows and parts, what they are keyed by, and when they are written."""

from __future__ import annotations

import contextlib
import os
import threading
import time

import numpy as np
import pytest

from deer.embedding_probe import encode_through_store, prompt_keys
from deer.platform.stores import EmbeddingStore, PendingParts, flush_seconds, item_keys
from kg_data import build_queries, load_kg


def test_stored_vectors_and_score_rows_of_another_toolkit_version_are_made_again(tiny_kg_dir, tiny_clm_dir, tmp_path,
                                                                                   monkeypatch):
    """The prompt and BEAR score stores were keyed by hand-bumped ENCODER_VERSION / SCORER_VERSION alone: a release that
    changed how a text is encoded or scored without bumping them (the causal-RoBERTa position offset did not) read the
    older release's vectors and rows as its own.  The keys now hold the toolkit's version, as the cloze parts' do."""
    import deer
    from deer.backends.models import open_model
    from deer.runner import run_kg

    queries, loaded, cache = build_queries(load_kg(tiny_kg_dir), "test"), open_model(str(tiny_clm_dir)), tmp_path / "cache"

    def cached_run():
        run = run_kg(["deer", "bear"], queries, loaded, show_progress=False, cache=True, cache_dir=cache)
        return {probe: run.metadata_of(probe)["cache"] for probe in ("deer", "bear")}

    monkeypatch.setattr(deer, "__version__", "0.0.1")
    cached_run()
    assert cached_run()["deer"]["entities_from_cache"] == len(queries.candidates)  # the same version: read back
    monkeypatch.setattr(deer, "__version__", "0.0.2")
    again = cached_run()
    assert again["deer"]["entities_from_cache"] == again["deer"]["queries_from_cache"] == 0
    assert again["bear"]["queries_from_cache"] == 0


def test_cloze_and_bear_dataset_parts_of_another_toolkit_version_are_scored_again(tiny_clm_dir, tmp_path, monkeypatch):
    """s12-b: a cloze run's and the BEAR data set's parts were keyed by model, task, rules and backend but by nothing of
    the code that scored them: after an upgrade that scores a probe otherwise, a rerun into the same --out resumed the
    old version's numbers as its own.  The toolkit's version is part of both keys now."""
    import deer
    from bear_ref.dataset import run_bear_dataset
    from deer.backends.models import open_model
    from deer.runner import run_cloze
    from kg_data.bear import load_bear_dataset
    from kg_data.cloze import bear_cloze_task
    from tests.benchmark_folders import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    loaded = open_model(str(tiny_clm_dir))

    def runs():
        cloze = run_cloze(bear_cloze_task(data), loaded, ["bear"], tmp_path / "cloze", show_progress=False)
        dataset = run_bear_dataset(data, loaded, tmp_path / "dataset", {"relations": None}, show_progress=False)
        return cloze.metadata_of("bear")["resumed"], dataset.metadata["relations_resumed"]

    runs()
    assert runs() == (True, ["P36", "P37"])  # the same version: resumed
    monkeypatch.setattr(deer, "__version__", "9.9.9")  # another version, which may score otherwise
    assert runs() == (False, [])


def test_row_checksums_see_a_changed_word_but_not_words_moved_within_a_row():
    """A7: row_checksums' docstring said "any changed word changes it"; a plain sum misses words swapped within a row.
    The stored format stays; what the sum sees and misses is pinned here as its docstring now says."""
    import numpy as np

    from deer.platform.stores import row_checksums

    rows = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], np.float32)
    one_word = rows.copy()
    one_word[0, 1] = 2.5
    assert (row_checksums(one_word) != row_checksums(rows)).tolist() == [True, False]
    moved = rows.copy()
    moved[0, [0, 3]] = moved[0, [3, 0]]
    moved[1] = moved[1, ::-1]
    assert (row_checksums(moved) == row_checksums(rows)).all()  # not seen: the same words, the same sum
    assert "does not see words moved within a row" in row_checksums.__doc__


# -- parts written by count, by time and when the work stops; a run waits for a store another run encodes ---


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
