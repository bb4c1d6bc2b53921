"""Cross-process locks and the process umask (issue 21, bugs 3 and 11)."""

from __future__ import annotations

import os
import threading
import time

from deer.backends import models
from deer.base import files


def test_a_bundled_model_is_converted_once_by_concurrent_processes(tmp_path, monkeypatch):
    """Bug 3: two processes resolving the same bundled model each converted it, and one deleted the
    folder the other was loading; the conversion now runs under a lock and the second finds it done
    (flock locks open files, so two threads contend as two processes do)."""
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path))
    conversions = []

    def slow_conversion(alias, target):
        conversions.append(alias)
        time.sleep(0.5)  # long enough for the other caller to arrive meanwhile
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(models, "_convert_gguf", slow_conversion)
    start = threading.Barrier(2)
    resolved = []

    def resolve():
        start.wait()
        resolved.append(models.resolve_model("smollm2-135m"))

    threads = [threading.Thread(target=resolve) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert conversions == ["smollm2-135m"]
    assert len(resolved) == 2


def test_writing_a_file_leaves_the_process_umask_alone(tmp_path, monkeypatch):
    """Bug 11: every write set the process umask to 0 and back (a race for any other thread creating
    files meanwhile); the umask is now read once, and new files still get the mode it allows."""
    expected_mode = files.NEW_FILE_MODE

    def no_umask(mask):
        raise AssertionError("os.umask called during a write")

    monkeypatch.setattr(os, "umask", no_umask)
    files.atomic_write_bytes(tmp_path / "a.txt", b"x")
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == expected_mode
    monkeypatch.undo()
    mask = os.umask(0)
    os.umask(mask)
    assert expected_mode == 0o666 & ~mask
