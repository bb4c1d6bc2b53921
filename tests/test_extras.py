"""Optional extras (gguf, plots): without the package, the one feature that needs it says which
extra to install, and nothing else is affected."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from deer.backends.models import ModelUnavailableError, resolve_model
from deer.base.extras import MissingExtraError, import_extra
from experiments.cli import main


def _hide(monkeypatch, package: str) -> None:
    """Make ``package`` (and its already imported submodules) unimportable, as if not installed."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, package, None)


def test_import_extra_names_the_extra(monkeypatch):
    _hide(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtraError, match=r"pip install 'deer-probe-toolkit\[plots\]'"):
        import_extra("matplotlib.figure", "plots", "Figures")


def test_import_extra_leaves_other_import_errors_alone(tmp_path, monkeypatch):
    # An installed extra whose own dependency is missing is a broken install, not a missing extra.
    (tmp_path / "broken_extra").mkdir()
    (tmp_path / "broken_extra" / "__init__.py").write_text("import no_such_dependency_of_broken_extra\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as error:
        import_extra("broken_extra", "broken", "Testing")
    assert not isinstance(error.value, MissingExtraError)
    assert error.value.name == "no_such_dependency_of_broken_extra"


def test_bundled_model_without_gguf_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))  # nothing converted yet
    _hide(monkeypatch, "gguf")
    with pytest.raises(ModelUnavailableError) as error:
        resolve_model("smollm2-135m")
    assert "pip install 'deer-probe-toolkit[gguf]'" in str(error.value)
    assert not (tmp_path / "cache" / "models" / "smollm2-135m").exists()


def test_cli_without_gguf_is_a_one_line_error(tmp_path, tiny_kg_dir, monkeypatch):
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    _hide(monkeypatch, "gguf")
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", "smollm2-135m", "--k-shot", "2"])
    assert result.exit_code == 1, result.output
    error_line = next(line for line in result.output.splitlines() if line.startswith("Error: "))
    assert "pip install 'deer-probe-toolkit[gguf]'" in error_line
    assert "Traceback" not in result.output


def test_a_figure_without_matplotlib_names_the_extra(monkeypatch):
    from experiments import plots

    _hide(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtraError) as error:
        plots.leaderboard_bars(["a", "b"], [0.2, 0.1], [0.01, 0.02], "hit@10")
    message = str(error.value)
    assert "\n" not in message and "pip install 'deer-probe-toolkit[plots]'" in message


def test_experiments_import_without_matplotlib():
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import experiments.plots, experiments.token_bias, experiments.agreement, experiments.screen, "
        "experiments.compute_time, experiments.cli\n"
        "from experiments.report import ExperimentOutput, markdown_table\n"
        "assert 'matplotlib.figure' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
