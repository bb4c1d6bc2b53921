"""Broken KG folders and the refusal they must meet: helpers shared by the kg_data reader tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kg_data import KGFormatError
from kg_data.textual import load_textual_kg
from tests.conftest import TINY_ENTITIES, TINY_SPLITS


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


def _wn18rr_format(folder: Path) -> Path:
    """The tiny KG in WN18RR's files (entity2text.txt, train/dev/test.tsv; ids "e3" as synset offsets "00000003"):
    a data set a fallback could find."""
    def offset(entity_id: str) -> str:
        return f"{int(entity_id[1:]):08d}"

    (folder / "wn18rr").mkdir(parents=True)
    (folder / "wn18rr" / "entity2text.txt").write_text("".join(f"{offset(i)}\t{n}, {d}\n" for i, n, d in TINY_ENTITIES))
    for split, file_name in (("train", "train.tsv"), ("valid", "dev.tsv"), ("test", "test.tsv")):
        (folder / "wn18rr" / file_name).write_text("".join(f"{offset(h)}\t{r}\t{offset(t)}\n" for h, r, t in TINY_SPLITS[split]))
    return folder
