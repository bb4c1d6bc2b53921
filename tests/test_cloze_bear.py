"""experiments/cloze_bear.py: DEER beside BEAR, the report of a cloze run on a BEAR-format data set; a run that makes
no such comparison leaves no earlier one in its folder.  (Which stored BEAR run a cloze run takes is
bear_ref/benchmark.py's: tests/test_benchmark.py.)"""

from __future__ import annotations

import json

from click.testing import CliRunner

from experiments.cli import main
from tests.benchmark_folders import write_dataset


def test_a_cloze_run_again_into_its_folder_leaves_no_earlier_deer_vs_bear_comparison(tmp_path, tiny_clm_dir):
    """`deer cloze --probes deer` then `--probes bear` into one --out: the second run makes no DEER-vs-BEAR comparison,
    but the first run's bear_dataset/ (DEER's BEAR-format numbers) stayed beside its files, exit 0."""
    folder = write_dataset(tmp_path / "BEARmini")
    command = ["cloze", "--dataset", str(folder), "--model", str(tiny_clm_dir), "--bootstrap", "0", "--out", str(tmp_path / "run")]
    first = CliRunner().invoke(main, [*command, "--probes", "deer"])
    assert first.exit_code == 0 and (tmp_path / "run" / "bear_dataset" / "report.json").is_file(), first.output
    second = CliRunner().invoke(main, [*command, "--probes", "bear"])
    assert second.exit_code == 0, second.output
    assert list(json.loads((tmp_path / "run" / "cloze" / "metadata.json").read_text())) == ["bear"]
    assert not (tmp_path / "run" / "bear_dataset").exists()
