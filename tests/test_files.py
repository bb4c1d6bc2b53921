"""The one atomic writer (``deer.base.files``): a write that fails (no space, no permission, a read-only disk) names
the file and what was being written, and leaves no temp file and no changed file; ``restored_on_failure`` puts a
folder's files back as they were when a save of several files fails part-way."""

from __future__ import annotations

import errno

import numpy as np
import pandas as pd
import pytest

from deer.base import files
from deer.base.files import WriteError, restored_on_failure
from tests.write_faults import WRITE_ERRORS, fail_writes, no_half_files

WRITERS = {
    "bytes": lambda path: files.atomic_write_bytes(path, b"new", "some bytes"),
    "with": lambda path: files.atomic_write_with(path, lambda handle: np.save(handle, np.ones((64, 64))), "an array"),
    "json": lambda path: files.write_json(path, {"new": 1}, "a JSON object"),
    "text": lambda path: files.write_text(path, "new text", "a text"),
    "parquet": lambda path: files.write_table(path.with_suffix(".parquet"), pd.DataFrame({"a": [1, 2]}), "a table"),
    "csv": lambda path: files.write_table(path.with_suffix(".csv"), pd.DataFrame({"a": [1, 2]}), "a table"),
}
WHAT = {"bytes": "some bytes", "with": "an array", "json": "a JSON object", "text": "a text", "parquet": "a table",
        "csv": "a table"}


@pytest.mark.parametrize("existing", [False, True], ids=["new-file", "existing-file"])
@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("code", list(WRITE_ERRORS))
def test_a_failed_write_names_the_file_and_leaves_it_as_it_was(tmp_path, monkeypatch, code, writer, existing):
    """Before, an OSError came out as '[Errno 28] No space left on device', naming no file: every writer's failure, for
    every cause (3 causes x 6 writers x a new or an existing file: 36 cases), names the file and what was written."""
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "file"
    target = target.with_suffix({"parquet": ".parquet", "csv": ".csv"}.get(writer, ".bin"))
    if existing:
        target.write_bytes(b"old")
    fail_writes(monkeypatch, folder, WRITE_ERRORS[code])
    with pytest.raises(WriteError) as raised:
        WRITERS[writer](target)
    monkeypatch.undo()
    error = raised.value
    assert isinstance(error, OSError) and error.errno == WRITE_ERRORS[code] and error.path == target
    assert str(target) in str(error) and WHAT[writer] in str(error) and f"[{code}]" in str(error), str(error)
    assert (target.read_bytes() == b"old") if existing else not target.exists()
    assert no_half_files(folder) == [] and sorted(p.name for p in folder.iterdir()) == ([target.name] if existing else [])


def test_a_folder_that_cannot_be_made_is_named(tmp_path, monkeypatch):
    fail_writes(monkeypatch, tmp_path / "out", errno.EACCES)
    with pytest.raises(WriteError, match=f"could not write {tmp_path / 'out' / 'sub' / 'file.json'}.*Permission denied"):
        files.write_json(tmp_path / "out" / "sub" / "file.json", {})


@pytest.mark.parametrize("failing", ["kept.json", "new.json", "second.json"])
@pytest.mark.parametrize("code", list(WRITE_ERRORS))
def test_a_save_of_several_files_that_fails_leaves_the_folder_as_it_was(tmp_path, monkeypatch, code, failing):
    """A file replaced, one removed and one made, the write of any failing: every file is back as it was (9 cases)."""
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("kept.json", "removed.json", "second.json"):
        (folder / name).write_text(f"old {name}")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    fail_writes(monkeypatch, folder, WRITE_ERRORS[code], failing)
    with pytest.raises(WriteError, match=failing):
        with restored_on_failure([folder / name for name in ("kept.json", "removed.json", "new.json", "second.json")]):
            (folder / "removed.json").unlink()
            for name in ("kept.json", "new.json", "second.json"):
                files.write_json(folder / name, {"new": name})
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_save_that_succeeds_keeps_what_it_wrote_and_no_copy(tmp_path):
    (tmp_path / "a.json").write_text("old")
    with restored_on_failure([tmp_path / "a.json", tmp_path / "b.json"]):
        files.write_json(tmp_path / "a.json", {"new": 1})
        files.write_json(tmp_path / "b.json", {"new": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"] and "new" in (tmp_path / "a.json").read_text()
