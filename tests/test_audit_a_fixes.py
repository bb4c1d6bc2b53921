"""Audit A's defects (s9): stored work reused only for what it was made with.

A1: run_probes reused a folder's ranks whatever probe options they were made with.
"""

from __future__ import annotations

import json

import pytest

from deer.platform.templates import PromptTemplates
from experiments.runs import run_probes
from kg_data import build_queries, load_kg


def _quiet(*_args) -> None:
    return None


def test_run_probes_reuses_a_probes_ranks_only_for_the_options_they_were_made_with(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """A1: the folder's LAMA ranks (single_token=False) were handed back, logged as reused, when single_token=True
    was asked; now each probe's options are recorded and other options are refused by name."""
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    templates, folder = PromptTemplates(), tmp_path / "run"
    first = run_probes(queries, str(tiny_clm_dir), ["lama"], folder, templates, log=_quiet)
    assert json.loads((folder / "metadata.json").read_text())["lama"]["options"] == {"single_token": False}
    again = run_probes(queries, str(tiny_clm_dir), ["lama"], folder, templates, log=_quiet,
                       probe_options={"lama": {"single_token": False}})
    assert again.experiment["reused"] == ["lama"]  # the same options: read back
    assert again.ranks("filtered", "lama").tolist() == first.ranks("filtered", "lama").tolist()
    with pytest.raises(ValueError, match=r"single_token: the folder False, asked True") as refused:
        run_probes(queries, str(tiny_clm_dir), ["lama"], folder, templates, log=_quiet,
                   probe_options={"lama": {"single_token": True}})
    assert str(folder) in str(refused.value)

