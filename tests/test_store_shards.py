"""The sharded store on its own: lookups, blocks, shards from other processes, and every damage
named, set aside and its items missing again (the CLI-level checks are in test_read_back.py)."""

from __future__ import annotations

import errno
import warnings

import numpy as np
import pytest

from deer.platform.stores import EmbeddingStore, StoreDamaged
from deer.platform.validate import DeerWarning
from tests.write_faults import WRITE_ERRORS, fail_writes, no_half_files

IDS = [f"item-{i}" for i in range(12)]
VECTORS = np.arange(12 * 5, dtype=np.float32).reshape(12, 5) / 7


def _store(root, width=5, **options):
    return EmbeddingStore(root, "prompts", {"model": "m"}, width=width, **options)


def test_rows_come_back_in_the_order_asked_from_any_shard(tmp_path):
    store = _store(tmp_path)
    store.add(IDS[:7], VECTORS[:7])
    store.add(IDS[5:], VECTORS[5:])  # two ids stored twice: the first copy is kept
    order = [11, 0, 6, 5, 3]
    assert np.array_equal(store.get([IDS[i] for i in order]), VECTORS[order])
    assert store.missing(IDS + ["other"]) == [12] and len(store) == 12
    blocks = list(store.blocks(IDS[::-1], 5))  # shard by shard, as stored; positions in the ids given
    assert [len(positions) for positions, _ in blocks] == [5, 2, 5]  # 7 rows in the first shard, 5 kept from the second
    assert all(np.all(np.diff(positions) > 0) for positions, _ in blocks)
    positions = np.concatenate([p for p, _ in blocks])
    assert sorted(positions.tolist()) == list(range(12))
    assert np.array_equal(np.concatenate([v for _, v in blocks]), VECTORS[::-1][positions])


def test_a_repeated_id_and_a_row_of_another_shards_copy_read_as_asked(tmp_path):
    """A run of rows that asks for one row twice and skips one (kept from an earlier shard) has as many rows as
    the span it covers: each row is still the one asked for (the 4.6M-entity benchmark's prompts: identical
    prompts in two chunks, so one shard's copy is never read, and an id asked for twice)."""
    store = _store(tmp_path)
    store.add(IDS[3:4], VECTORS[3:4])  # id 3 first stored alone: the second shard's row for it is never read
    store.add(IDS[:8], VECTORS[:8])
    asked = [IDS[i] for i in (0, 1, 2, 2, 4, 5, 6, 7)]  # rows 0..7 of the second shard minus row 3, row 2 twice
    blocks = list(store.blocks(asked, 8))
    assert len(blocks) == 1
    positions, vectors = blocks[0]
    assert np.array_equal(vectors, VECTORS[[0, 1, 2, 2, 4, 5, 6, 7]][positions])
    assert np.array_equal(store.get(asked), VECTORS[[0, 1, 2, 2, 4, 5, 6, 7]])


def test_a_second_process_sees_new_shards_after_refresh(tmp_path):
    first, second = _store(tmp_path), _store(tmp_path)
    first.add(IDS[:4], VECTORS[:4])
    assert second.missing(IDS[:4]) == [0, 1, 2, 3]
    with second.locked():
        assert second.missing(IDS[:4]) == []
    assert np.array_equal(second.get(IDS[:4]), VECTORS[:4])


def test_rows_with_nan_are_not_stored_and_minus_inf_is_a_value_where_allowed(tmp_path):
    bad = VECTORS[:3].copy()
    bad[1, 2] = np.nan
    store = _store(tmp_path)
    with pytest.warns(DeerWarning, match="1 of 3 results hold NaN"):
        store.add(IDS[:3], bad)
    assert store.missing(IDS[:3]) == [] and np.isnan(store.get(IDS[1:2])).any()  # used by this run,
    assert _store(tmp_path).missing(IDS[:3]) == [1]  # computed again by the next
    scores = _store(tmp_path / "scores", minus_inf=True)
    rows = VECTORS[:2].copy()
    rows[0, 0] = -np.inf
    scores.add(IDS[:2], rows)
    assert np.array_equal(_store(tmp_path / "scores", minus_inf=True).get(IDS[:2]), rows)


def _damage(path, how):
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[-5] ^= 0xFF
    elif how == "truncate":
        data = data[: len(data) // 2]
    elif how == "empty":
        data = b""
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate", "empty", "narrow", "nan", "index-pickle", "index-missing"])
def test_every_damage_is_named_set_aside_and_its_items_missing_again(tmp_path, how):
    store = _store(tmp_path)
    store.add(IDS[:6], VECTORS[:6])
    store.add(IDS[6:], VECTORS[6:])
    vectors_file = sorted(store.folder.glob("*.vectors.npy"))[0]
    index_file = vectors_file.with_name(vectors_file.name.replace(".vectors.", ".index."))
    if how == "narrow":
        np.save(vectors_file, VECTORS[:6, :3])
    elif how == "nan":  # written as a writer would (checksums match), yet holds NaN
        np.save(vectors_file, np.where(VECTORS[:6] > 1, np.nan, VECTORS[:6]).astype(np.float32))
    elif how == "index-pickle":
        np.save(index_file, np.array([{"not": "an index"}], dtype=object), allow_pickle=True)
    elif how == "index-missing":
        index_file.rename(tmp_path / "elsewhere.npy")
    else:
        _damage(vectors_file, how)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reopened = _store(tmp_path)  # damage to a file's form is found on opening,
        if not reopened.missing(IDS):
            with pytest.raises(StoreDamaged):  # damage to its values when they are read
                reopened.get(IDS)
    if how == "index-missing":  # an index-less shard is an unfinished write: never read, nothing to say
        assert reopened.missing(IDS) == list(range(6))
        return
    messages = [str(w.message) for w in caught if issubclass(w.category, DeerWarning)]
    assert len(messages) == 1 and vectors_file.name.split(".")[0] in messages[0], messages
    assert reopened.missing(IDS) == list(range(6))
    assert not vectors_file.exists() and not index_file.exists()
    stamp_file = vectors_file.with_name(vectors_file.name.replace(".vectors.npy", ".stamp.json"))
    assert sorted(p.name for p in store.folder.glob("*.bad")) == sorted(f.name + ".bad" for f in (vectors_file, index_file, stamp_file))
    reopened.add(IDS[:6], VECTORS[:6])  # computed again: the store is whole, and a new store reads it silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.array_equal(_store(tmp_path).get(IDS), VECTORS)


@pytest.mark.parametrize("copied", ["whole shard", "without its stamp", "with a stamp of this store's"])
def test_a_shard_copied_in_from_another_store_is_refused(tmp_path, copied):
    """Another model's store holds vectors for the same ids (prompts): its shard copied by hand into this
    store's folder was read as this store's vectors.  Now it is refused on opening, named, and its items missing."""
    import shutil

    other = EmbeddingStore(tmp_path, "prompts", {"model": "another"}, width=5)
    other.add(IDS[:6], -VECTORS[:6])
    store = _store(tmp_path)
    store.add(IDS[6:], VECTORS[6:])
    own_stamp = next(store.folder.glob("shard-*.stamp.json"))
    for path in other.folder.glob("shard-*"):
        if path.name.endswith(".stamp.json") and copied != "whole shard":
            if copied == "with a stamp of this store's":
                shutil.copy(own_stamp, store.folder / path.name)
            continue
        shutil.copy(path, store.folder / path.name)
    with pytest.warns(DeerWarning, match="not written by this store"):
        reopened = _store(tmp_path)
    assert reopened.missing(IDS) == list(range(6))
    assert np.array_equal(reopened.get(IDS[6:]), VECTORS[6:])  # its own shard is read as before


def test_a_shard_another_process_set_aside_is_missing_here_too(tmp_path):
    """Two processes on one store: the one that finds a shard damaged sets it aside; the other, which had indexed it,
    read its file by name and failed with FileNotFoundError.  Now it is damage here too: StoreDamaged, items missing."""
    first, second = _store(tmp_path), _store(tmp_path)
    first.add(IDS, VECTORS)
    second.refresh()
    _damage(next(first.folder.glob("*.vectors.npy")), "flip")
    with pytest.warns(DeerWarning), pytest.raises(StoreDamaged):
        first.get(IDS)
    gone = r"it is gone since this store was opened; set aside as \S+\.bad by another run"  # a .bad there: another run's
    with pytest.warns(DeerWarning, match=gone), pytest.raises(StoreDamaged):
        second.get(IDS)
    assert second.missing(IDS) == list(range(12))
    second.add(IDS, VECTORS)  # computed again by either: both read it
    first.refresh()
    assert np.array_equal(first.get(IDS), VECTORS) and np.array_equal(second.get(IDS), VECTORS)


@pytest.mark.parametrize("when", ["before opening", "after opening"])
def test_a_missing_vectors_file_is_named_missing_not_set_aside_by_another_run(tmp_path, when):
    """A shard whose vectors file is simply gone (deleted; no ``.bad`` of it anywhere) was reported as "set aside as
    ....bad by another run": no such file or run exists.  It is named missing, its items computed again."""
    store = _store(tmp_path)
    store.add(IDS, VECTORS)
    (vectors_file,) = store.folder.glob("*.vectors.npy")
    opened = _store(tmp_path) if when == "after opening" else None
    vectors_file.unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if opened is None:
            opened = _store(tmp_path)
        else:
            with pytest.raises(StoreDamaged):
                opened.get(IDS)
    (message,) = [str(w.message) for w in caught if w.category is DeerWarning]
    assert message.startswith(f"{vectors_file}: ") and "no file to set aside" in message, message
    assert "another run" not in message and "set aside as" not in message, message
    assert not vectors_file.with_name(vectors_file.name + ".bad").exists()
    assert opened.missing(IDS) == list(range(12))
    opened.add(IDS, VECTORS)
    assert np.array_equal(_store(tmp_path).get(IDS), VECTORS)


STORE_PLACES = ("key.json", ".vectors.npy", ".stamp.json", ".index.npy", ".lock", "")


@pytest.mark.parametrize("code", list(WRITE_ERRORS))
@pytest.mark.parametrize("place", STORE_PLACES)
def test_a_store_that_cannot_be_written_is_named_and_holds_its_rows_in_memory(tmp_path, monkeypatch, place, code):
    """A store write failing for want of space or permission failed the whole run. Every cause x every file the store
    writes (its key, a shard's vectors, stamp and index, its lock, or all of its folder: 18 cases): a DeerWarning names
    the file, the store holds what it was given in memory (read back as given), and a later store reads no part of it."""
    fail_writes(monkeypatch, tmp_path, WRITE_ERRORS[code], place)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = _store(tmp_path)
        with store.locked():
            store.add(IDS[:7], VECTORS[:7])
        store.add(IDS[7:], VECTORS[7:])
    monkeypatch.undo()
    told = [str(w.message) for w in caught if issubclass(w.category, DeerWarning)]
    if code == "ENOSPC" and place == ".lock":  # a lock file takes no space: the store is written
        assert told == [] and store.unwritable is None and len(_store(tmp_path)) == 12
        return
    assert len(told) == 1 and str(tmp_path) in told[0] and place in told[0].split(":")[0] and "without storing" in told[0]
    assert store.unwritable and f"[{code}]" in store.unwritable
    assert store.missing(IDS) == [] and np.array_equal(store.get(IDS[::-1]), VECTORS[::-1])
    assert np.array_equal(np.concatenate([v for _, v in store.blocks(IDS, 5)]), VECTORS)
    assert _store(tmp_path).missing(IDS) == list(range(12))  # nothing stored after the first failure
    assert no_half_files(tmp_path) == [] and not list(tmp_path.rglob("shard-*.vectors.npy"))


def test_a_store_write_failing_otherwise_is_raised_naming_the_file(tmp_path, monkeypatch):
    """Only a want of space or permission turns storing off; another failure (an I/O error) stands, named."""
    from deer.base.files import WriteError

    store = _store(tmp_path)
    fail_writes(monkeypatch, tmp_path, errno.EIO, ".vectors.npy")
    with pytest.raises(WriteError, match=r"\.vectors\.npy \(a shard's vectors\): Input/output error"):
        store.add(IDS, VECTORS)
