"""One check for every bad-input case of the suite: the `deer` command refuses it with one line,
no traceback, no model loaded and nothing written.

``load_model`` is replaced by a function that fails the test, so a refusal that comes only after
the weights are loading ("Loading weights") is caught; the tree under ``root`` is compared before
and after.  Test modules import ``assert_refused_before_loading`` and keep their own cases.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner


def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def assert_refused_before_loading(args: list[str], expected: list[str], root: Path, monkeypatch, name: str = "") -> str:
    """Run ``deer *args`` in-process under ``root`` (cwd ``root/work``, cache ``root/cache``); assert one
    'Error' line containing every part of ``expected``, exit code != 0, no model load, nothing written.
    Returns the error line."""
    from experiments.cli import main

    work = root / "work"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)  # the default output folder (runs/) would appear here
    monkeypatch.setenv("DEER_CACHE_DIR", str(root / "cache"))
    monkeypatch.delenv("DEER_DEBUG", raising=False)
    before = snapshot(root)

    loads = []
    import deer.backends.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: loads.append(a) or pytest.fail(f"{name}: a model was loaded"))
    result = CliRunner().invoke(main, args)

    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output, result.output
    error_lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(error_lines) == 1, result.output
    line = error_lines[0]
    assert "unexpected" not in line, f"{name}: a bug path, not a refusal: {line}"
    for part in expected:
        assert part in line, f"{name}: {part!r} not in {line!r}"
    assert not loads
    assert snapshot(root) == before, "something was written"
    return line


def _model_copy(model: Path, tmp: Path) -> str:
    return str(shutil.copytree(model, tmp / "model_copy"))
