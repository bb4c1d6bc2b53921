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


def test_probe_with_ray_workers_opens_the_model_once_on_the_driver(tiny_kg_dir, tiny_clm_dir, tmp_path, model_loads, monkeypatch):
    """--ray-workers: the driver's one opened backend gives the workers' store key and then runs the probe
    (the Ray encoding itself is replaced here; tests/test_ray_runs.py runs it where Ray is installed)."""
    from deer.backends import ModelBackend
    from deer.backends.models import LoadedModel
    from experiments import ray_runs

    handed = []

    def encode_on_ray(kg, model_name, templates, *, loaded=None, **options):
        handed.append(loaded)
        return tmp_path / "store"

    monkeypatch.setattr(ray_runs, "encode_entities_on_ray", encode_on_ray)
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--ray-workers", "2",
                                       "--out", str(tmp_path / "run")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len(handed) == 1 and isinstance(handed[0], ModelBackend) and isinstance(handed[0].loaded, LoadedModel)
    assert model_loads["loads"] == {str(tiny_clm_dir): 1} and model_loads["fingerprints"] == 1


def test_ray_workers_encode_only_prompts_that_fit_as_the_run_will_cut_them(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """--ray-workers encodes the entities before the run: the run's length guard comes first, so a tail prompt
    the model cannot take is refused before any worker starts, and with --long-prompts truncate-descriptions
    the workers get the descriptions cut as the run cuts them (their vectors are the ones the run reads)."""
    from experiments import ray_runs

    lines = (tiny_kg_dir / "entities.tsv").read_text().splitlines()
    lines[2] = "e2\tanimal\t" + "a living organism " * 2000  # its tail prompt: more than the tiny model's 2048 positions
    (tiny_kg_dir / "entities.tsv").write_text("\n".join(lines) + "\n")
    handed = []

    def encode_on_ray(kg, model_name, templates, *, entities=None, **options):
        handed.append([kg.entity_descriptions[e] for e in entities])
        return tmp_path / "store"

    monkeypatch.setattr(ray_runs, "encode_entities_on_ray", encode_on_ray)
    command = ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--ray-workers", "2", "--k-shot", "2"]
    refused = CliRunner().invoke(main, [*command, "--out", str(tmp_path / "refused")])
    assert refused.exit_code == 1 and "entity 'e2'" in refused.output and "tail prompt" in refused.output, refused.output
    assert handed == []  # no worker was given anything
    cut = CliRunner().invoke(main, [*command, "--long-prompts", "truncate-descriptions", "--out", str(tmp_path / "cut")])
    assert cut.exit_code == 0, cut.output
    metadata = json.loads((tmp_path / "cut" / "metadata.json").read_text())["deer"]
    assert list(metadata["length_guard"]["truncated_descriptions"]) == ["e2"]
    assert len(handed) == 1 and max(len(d) for d in handed[0]) < 2000 * 18  # the cut description, not the whole


def test_ray_workers_guard_the_kg_once_before_the_workers_start(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """s12: with --long-prompts truncate-descriptions, --ray-workers ran the run's length guard again (after the one that
    names the run folder) before encode_entities_on_ray's own check: every tail prompt made and counted three times
    before any worker started.  Now one guard runs before the workers (in either mode), then only that check."""
    from deer.platform import inputs, length_guard
    from experiments import ray_runs
    from tests.conftest import write_tiny_kg

    checks, guards, at_start = [], [], []
    too_long, guard = length_guard.LengthCheck.too_long, length_guard.guard_lengths

    def counted(self, backend, limit):
        checks.extend([self.kind] if self.kind == "tail prompt" else [])
        return too_long(self, backend, limit)

    def guarded(*args, **kwargs):  # the tail prompts' checks each guard makes
        before = len(checks)
        try:
            return guard(*args, **kwargs)
        finally:
            guards.append(len(checks) - before)

    def starting(*args, **kwargs):
        at_start.append((list(guards), len(checks)))
        raise RuntimeError("the workers would start here")

    monkeypatch.setattr(length_guard.LengthCheck, "too_long", counted)
    for module in (inputs, length_guard):
        monkeypatch.setattr(module, "guard_lengths", guarded)
    monkeypatch.setattr(ray_runs, "ray_session", starting)
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    long_kg = write_tiny_kg(tmp_path / "long_kg")
    lines = (long_kg / "entities.tsv").read_text().splitlines()
    lines[2] = "e2\tanimal\t" + "a living organism " * 2000  # cut with truncate-descriptions
    (long_kg / "entities.tsv").write_text("\n".join(lines) + "\n")
    for kg, mode in ((tiny_kg_dir, "error"), (long_kg, "truncate-descriptions")):
        checks.clear(), guards.clear(), at_start.clear()
        CliRunner().invoke(main, ["probe", "--kg", str(kg), "--model", str(tiny_clm_dir), "--long-prompts", mode,
                                  "--ray-workers", "2", "--out", str(tmp_path / mode)])
        ((guarded_before, checked_before),) = at_start  # the workers were reached
        assert len(guarded_before) == 1 and checked_before == guarded_before[0] + 1, (mode, guarded_before, checked_before)
