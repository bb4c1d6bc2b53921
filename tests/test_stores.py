"""deer/platform/stores.py: the stores of vectors, score rows and parts, what they are keyed by, and when they are written."""

from __future__ import annotations

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
