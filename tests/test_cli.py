"""The `deer` command: help, probe on a tiny KG, and clear errors instead of tracebacks."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from experiments.cli import main


def test_help_on_every_command():
    runner = CliRunner()
    for args in ([], ["probe"], ["models"], ["data"]):
        result = runner.invoke(main, [*args, "--help"])
        assert result.exit_code == 0, result.output
        assert "Usage" in result.output


def test_probe_on_tiny_kg(tmp_path, tiny_kg_dir, tiny_clm_dir, monkeypatch):
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    args = ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot", "2", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "Hit@10" in result.output and "random" in result.output
    assert {"metrics.json", "metadata.json"} <= {p.name for p in out.iterdir()}
    metadata = json.loads((out / "metadata.json").read_text())["deer"]
    assert metadata["queries"] == 4 and metadata["candidates"] == 12
    again = CliRunner().invoke(main, args)
    assert "12 entities, 4 queries from cache" in again.output


def test_unavailable_model_is_a_clear_error(tiny_kg_dir):
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", "opt-1.3b"])
    assert result.exit_code == 1
    assert "facebook/opt-1.3b" in result.output and "Traceback" not in result.output


def test_bad_kg_file_is_a_clear_error(tiny_kg_dir):
    (tiny_kg_dir / "test.tsv").write_text("e6\tcapital_of\n")
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir)])
    assert result.exit_code == 1
    assert f"{tiny_kg_dir / 'test.tsv'}:1" in result.output and "columns" in result.output


def test_models_lists_default_as_installed():
    result = CliRunner().invoke(main, ["models", "--json"])
    rows = {row["alias"]: row for row in json.loads(result.output)}
    assert rows["smollm2-135m"]["installed"] is True
    assert rows["opt-1.3b"]["model"] == "facebook/opt-1.3b"


def test_version_from_python_and_the_cli():
    from importlib import metadata

    import bear_ref
    import deer

    installed = metadata.version("deer-probe-toolkit")
    assert deer.__version__ == bear_ref.__version__ == installed
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"deer, version {installed}"


@pytest.mark.parametrize("metadata_says", ["none", "0.1.0"])
def test_the_version_comes_from_the_code_not_installed_metadata(metadata_says):
    """Store keys and run metadata record the toolkit's version: under PYTHONPATH (no metadata) or with a stale
    installation's metadata it was '0+unknown' (every checkout alike) or the old release's, so a store made by
    other code was reused as this code's."""
    import subprocess
    from importlib import metadata

    patch = ("import importlib.metadata as m; real = m.version\n"
             "def version(name):\n"
             "    if name != 'deer-probe-toolkit': return real(name)\n"
             + ("    raise m.PackageNotFoundError(name)\n" if metadata_says == "none" else f"    return {metadata_says!r}\n")
             + "m.version = version\n"
             "import deer; from deer.base.files import package_versions\n"
             "print(deer.__version__, package_versions()['deer-probe-toolkit'])")
    done = subprocess.run([sys.executable, "-c", patch], capture_output=True, text=True, check=True)
    installed = metadata.version("deer-probe-toolkit")  # this checkout's own, freshly installed
    assert done.stdout.split() == [installed, installed]


def test_debug_shows_the_traceback(tiny_kg_dir, monkeypatch):
    from kg_data.errors import KGFormatError

    (tiny_kg_dir / "test.tsv").write_text("e6\tcapital_of\n")
    monkeypatch.delenv("DEER_DEBUG", raising=False)
    quiet = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir)])
    assert quiet.exit_code == 1 and quiet.exception.__class__.__name__ == "SystemExit"
    assert quiet.output.count("\n") == 1 and "test.tsv:1" in quiet.output  # one line, no traceback
    for args, env in ((["--debug", "probe", "--kg", str(tiny_kg_dir)], {}), (["probe", "--kg", str(tiny_kg_dir)], {"DEER_DEBUG": "1"})):
        loud = CliRunner().invoke(main, args, env=env)
        assert loud.exit_code == 1 and isinstance(loud.exception, KGFormatError), loud.output


def test_data_calls_lama_usable(monkeypatch, tmp_path):
    from kg_data import describe_datasets

    (tmp_path / "lama").mkdir()
    (tmp_path / "lama" / "relations.jsonl").write_text("{}\n")
    rows = {row["name"]: row for row in describe_datasets(tmp_path)}
    assert rows["lama"]["found"] and rows["lama"]["usable"] and rows["lama"]["note"] == ""
    output = CliRunner().invoke(main, ["data", "--data-dir", str(tmp_path)]).output
    assert "lama      unusable" not in output
