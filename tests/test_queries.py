"""kg_data/queries.py: queries, their subsets and seeds."""

from __future__ import annotations

import numpy as np
import pytest

from kg_data import build_queries
from kg_data.queries import sample_subset
from kg_data.textual import load_textual_kg


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"subset": 0}, "subset must be >= 1, got 0"),
        ({"subset": -3}, "subset must be >= 1, got -3"),
        ({"subset": 1.5}, "subset must be an integer >= 1, got 1.5"),
        ({"subset": True}, "subset must be an integer >= 1, got True"),
        ({"subset": "2"}, "subset must be an integer >= 1, got '2'"),
        ({"subset": 500}, "subset 500 is larger than the test split (4 triples)"),
        ({"subset": 2, "seed": -1}, "seed must be >= 0, got -1"),
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"subset": 2, "seed": 0.5}, "seed must be an integer >= 0, got 0.5"),
    ],
)
def test_subset_and_seed_checks(tiny_kg_dir, kwargs, message):
    kg = load_textual_kg(tiny_kg_dir)
    with pytest.raises(ValueError) as error:
        build_queries(kg, "test", **kwargs)
    assert type(error.value) is ValueError and str(error.value) == message


def test_subset_accepts_numpy_integers(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    assert len(sample_subset(kg, "test", np.int64(2), np.int64(3))) == 2
    assert len(build_queries(kg, "test", subset=4, seed=0)) == 4
