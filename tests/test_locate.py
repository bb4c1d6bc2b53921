"""kg_data/locate.py: where a data set is looked for; an explicit data folder is the only one searched, through the
CLI and the API."""

from __future__ import annotations

import pytest

import deer
from kg_data.errors import KGNotFoundError
from tests.conftest import TINY_ENTITIES
from tests.kg_faults import _wn18rr_format
from tests.refusals import _model_copy, assert_refused_before_loading


def test_cli_data_dir_without_the_data_set_is_refused_not_swapped(tmp_path, tiny_clm_dir, monkeypatch):
    monkeypatch.setenv("DEER_DATA_DIR", str(_wn18rr_format(tmp_path / "elsewhere")))  # found before the fix
    monkeypatch.setenv("DEER_OFFLINE", "1")
    given = tmp_path / "given"
    given.mkdir()
    model = _model_copy(tiny_clm_dir, tmp_path)
    assert_refused_before_loading(
        ["probe", "--kg", "wn18rr", "--data-dir", str(given), "--model", model, "--k-shot", "0"],
        [f"--data-dir {given} holds no 'wn18rr' data set", str(given / "wn18rr" / "entity2text.txt"),
         "deer data fetch wn18rr", "deer data`"], tmp_path, monkeypatch, "empty --data-dir")


def test_api_data_dir_is_the_only_place_looked_and_the_search_order_stays_without_it(tmp_path, monkeypatch, no_model_loading):
    monkeypatch.setenv("DEER_DATA_DIR", str(_wn18rr_format(tmp_path / "elsewhere")))
    monkeypatch.setenv("DEER_OFFLINE", "1")
    (tmp_path / "given").mkdir()
    with pytest.raises(KGNotFoundError, match=r"holds no 'wn18rr' data set \(expected .*given/wn18rr/entity2text.txt"):
        deer.probe("wn18rr", data_dir=tmp_path / "given", show_progress=False)
    assert deer.load_queries("wn18rr").kg.n_entities == len(TINY_ENTITIES)  # $DEER_DATA_DIR still searched
