"""deer/platform/validate.py: a run's options and folders checked before any model loads."""

from __future__ import annotations

import pytest

from tests.refusals import assert_refused_before_loading


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
