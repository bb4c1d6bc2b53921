"""Every way the tests make a write fail, in one place: no space (ENOSPC), no permission (EACCES), a read-only disk
(EROFS), under one folder, without a real full disk (and as root, where chmod stops no write).

``fail_writes`` patches the low-level calls that create files and folders (``os.open``, ``io.open``, ``os.mkdir``):
with EACCES and EROFS creating the file fails, as such a disk does; with ENOSPC the file is made and its data refused
by the kernel as on a full disk (the data goes to /dev/full), so a write fails part-way, where a real one does.
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

WRITE_ERRORS = {"ENOSPC": errno.ENOSPC, "EACCES": errno.EACCES, "EROFS": errno.EROFS}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def fail_writes(monkeypatch, under, code: int, name: str = "") -> None:
    """From now on (until ``monkeypatch`` undoes it), writes under ``under`` to a file whose name holds ``name`` (every
    file, and every folder made there, where ``name`` is empty) fail with ``code``."""
    under = Path(os.path.abspath(under))
    real_open, real_io_open, real_mkdir = os.open, io.open, os.mkdir

    def hit(path, folder: bool = False) -> bool:
        if isinstance(path, int):
            return False
        path = Path(os.path.abspath(os.fsdecode(path)))
        inside = path == under or under in path.parents
        return inside and (not name if folder else name in path.name)

    def refused(path) -> OSError:
        return OSError(code, os.strerror(code), os.fsdecode(path))

    def failing_open(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is None and flags & _WRITE_FLAGS and hit(path):
            if code != errno.ENOSPC:
                raise refused(path)
            os.close(real_open(path, flags, mode))  # made, as on a full disk; its data refused
            return real_open("/dev/full", os.O_WRONLY)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def failing_io_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and hit(file):
            if code != errno.ENOSPC:
                raise refused(file)
            real_io_open(file, mode, *args, **kwargs).close()
            return real_io_open("/dev/full", mode, *args, **kwargs)
        return real_io_open(file, mode, *args, **kwargs)

    def failing_mkdir(path, mode=0o777, *, dir_fd=None):
        if dir_fd is None and hit(path, folder=True):
            raise refused(path)
        return real_mkdir(path, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", failing_open)
    monkeypatch.setattr(io, "open", failing_io_open)
    monkeypatch.setattr(os, "mkdir", failing_mkdir)


def no_half_files(folder) -> list[str]:
    """Files a failed write must not leave: the writer's temp files and the save's kept copies."""
    return sorted(str(p) for p in Path(folder).rglob(".*") if p.name.endswith((".tmp", ".before")))
