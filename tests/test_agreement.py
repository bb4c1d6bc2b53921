"""experiments/agreement.py (`deer experiment agreement`): which probes it compares, and the paper's number beside it."""

from __future__ import annotations

import json

import pytest

from tests.hand_made_runs import make_run


def test_agreement_over_run_folders_compares_only_the_probes_asked_for(tmp_path):
    """--probes was dropped with --run: every pair of the folder's probes was compared and reported."""
    from click.testing import CliRunner

    from experiments.cli import main

    make_run("m", {"deer": [1, 2, 3, 4, 5], "bear": [2, 1, 4, 3, 5], "lama": [5, 4, 3, 2, 1]}).save(tmp_path / "run")
    result = CliRunner().invoke(main, ["experiment", "agreement", "--run", str(tmp_path / "run"), "--probes", "deer,bear",
                                       "--bootstrap", "0", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    numbers = json.loads((tmp_path / "out" / "agreement.json").read_text())
    assert [row["pair"] for row in numbers["pairs"]] == ["deer vs bear"]
    assert [row["probe"] for row in numbers["hits"]] == ["deer", "bear"]
    # Without --probes, every probe of the folder is compared (a third probe's too), as before.
    make_run("m", {"deer": [1, 2, 3], "shortest": [3, 2, 1]}).save(tmp_path / "third")
    result = CliRunner().invoke(main, ["experiment", "agreement", "--run", str(tmp_path / "third"), "--bootstrap", "0",
                                       "--out", str(tmp_path / "out3")])
    assert result.exit_code == 0, result.output
    assert [row["pair"] for row in json.loads((tmp_path / "out3" / "agreement.json").read_text())["pairs"]] == ["deer vs shortest"]


@pytest.mark.parametrize("command", ["token-bias", "agreement"])
def test_a_probe_asked_for_that_a_run_folder_lacks_is_refused(command, tmp_path):
    """token-bias --run DIR --probes deer,bear on a folder without BEAR reported DEER alone, exit 0."""
    from click.testing import CliRunner

    from experiments.cli import main

    make_run("m", {"deer": [1, 2, 3, 4, 5], "lama": [5, 4, 3, 2, 1]}).save(tmp_path / "run")
    result = CliRunner().invoke(main, ["experiment", command, "--run", str(tmp_path / "run"), "--probes", "deer,bear",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and f"{tmp_path / 'run'} has no bear ranks" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("kg", "split", "fingerprint", "paper"), [
    ("wn18rr", "test", "e987fa4ff860fefa", True), ("my-own-kg", "test", "e987fa4ff860fefa", False),
    ("wn18rr", "valid", "e987fa4ff860fefa", False), ("wn18rr", "test", "another-kg", False)])
def test_agreement_sets_the_paper_number_only_beside_wn18rr_test_rows(kg, split, fingerprint, paper, tmp_path):
    """same_protocol_as_paper was True, and the paper's 0.50-0.80 shown, for a single-token DEER vs LAMA row on any KG or split."""
    import dataclasses

    from experiments.agreement import run_agreement

    metadata = {probe: {"kg": {"name": kg}, "split": split} for probe in ("deer", "lama")}
    metadata["lama"]["single_token"] = True
    run = make_run("m", {"deer": [1, 2, 3, 4, 5], "lama": [2, 1, 4, 3, 5]}, metadata=metadata)
    run.spec = dataclasses.replace(run.spec, kg_fingerprint=fingerprint, split=split)
    (row,) = run_agreement([run], tmp_path, bootstrap=0)["pairs"]
    assert row["same_protocol_as_paper"] is paper
    assert (row["paper_pearson_r_log"] == "0.50 (OPT-350M) .. 0.80 (OPT-6.7B)") is paper
    assert (row["paper_protocol"] is not None) is paper


def test_the_pinned_wn18rr_fingerprint_is_the_readers():
    """The fingerprint agreement pins is the one the WN18RR reader gives the files kg_data/manifest.json pins."""
    from experiments.agreement import WN18RR_FINGERPRINT
    from kg_data.errors import KGNotFoundError
    from kg_data.load import load_kg
    from kg_data.locate import find_dataset

    try:
        folder = find_dataset("wn18rr")
    except KGNotFoundError:
        pytest.skip("WN18RR is not on disk")
    assert load_kg(str(folder)).fingerprint() == WN18RR_FINGERPRINT
