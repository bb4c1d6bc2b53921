"""deer/base/errors.py: the option checks every layer shares (``OptionError``): a value is used as given or refused by
name, never read as something else."""

from __future__ import annotations

import pytest

import deer
from deer.base.errors import OptionError
from deer.platform.run_options import QuerySelection
from deer.platform.templates import PromptTemplates


def test_text_booleans_are_refused_not_read_as_true(tiny_kg_dir):
    """bool("false") is True: a text or number given for a yes/no option was read as yes."""
    with pytest.raises(OptionError, match="query_trailing_space='false': must be True, False or None"):
        PromptTemplates(query_trailing_space="false")
    with pytest.raises(OptionError, match="exclude_head='False': must be True or False"):
        QuerySelection(exclude_head="False")
    with pytest.raises(OptionError, match="exclude_head"):  # through the API, before any model is looked for
        deer.probe(tiny_kg_dir, "no-such-model-anywhere", exclude_head="False")
    assert PromptTemplates(query_trailing_space=False).query_trailing_space is False
    assert QuerySelection(exclude_head=True).exclude_head is True
