"""Broken KG folders and the refusal they must meet: helpers shared by the kg_data reader tests."""

from __future__ import annotations

import json

import pytest

from kg_data import KGFormatError
from kg_data.textual import load_textual_kg


def _format_error(folder) -> KGFormatError:
    with pytest.raises(KGFormatError) as error:
        load_textual_kg(folder)
    assert type(error.value) is KGFormatError
    message = str(error.value)
    assert "\n" not in message and "\x00" not in message
    return error.value


def _jsonl_kg(folder, entities=None, relations=None, test=None):
    """A small JSONL KG; each argument replaces that file's records."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "entities": entities or [{"id": "a", "name": "alpha", "description": "first"}, {"id": "b", "name": "beta"}],
        "relations": relations or [{"id": "r", "name": "related to"}],
        "test": test or [{"head": "a", "relation": "r", "tail": "b"}],
    }
    for stem, records in files.items():
        (folder / f"{stem}.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder
