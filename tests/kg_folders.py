"""Small KG folders in their published layouts, shared by several test files: the tiny KG in the README's JSONL layout
(``write_jsonl_kg``) and a few Wikidata5M files (``write_wikidata5m``, its texts in ``WIKIDATA5M_FILES``).  Broken KG
folders are in ``tests/kg_faults.py``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import TINY_ENTITIES, TINY_RELATIONS, TINY_SPLITS


def write_jsonl_kg(folder: Path) -> Path:
    """The tiny KG in the README's JSONL layout (entities.jsonl, relations.jsonl, train/valid/test.jsonl)."""
    folder.mkdir(parents=True)
    lines = {"entities": [{"id": i, "name": n, "description": d} for i, n, d in TINY_ENTITIES],
             "relations": [{"id": i, "name": n} for i, n in TINY_RELATIONS],
             **{split: [{"head": h, "relation": r, "tail": t} for h, r, t in rows] for split, rows in TINY_SPLITS.items()}}
    for stem, records in lines.items():
        (folder / f"{stem}.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder


WIKIDATA5M_FILES = {
    "wikidata5m_entity.txt": "Q1\tBerlin\tberlin city\nQ2\tGermany\nQ3\tParis\nQ9\tNot in any triple\nQ4\t \n",
    "wikidata5m_relation.txt": "P1\tcapital of\tis capital of\nP2\tshares border with\n",
    "wikidata5m_text.txt": "Q1\tBerlin is the capital of Germany.\nQ3\t \nQ9\tUnused.\n",
    "wikidata5m_transductive_train.txt": "Q1\tP1\tQ2\nQ2\tP2\tQ3\nQ4\tP2\tQ2\n",
    "wikidata5m_transductive_valid.txt": "Q3\tP2\tQ2\n",
    "wikidata5m_transductive_test.txt": "Q1\tP2\tQ3\nQ5\tP1\tQ2\nQ1\tP7\tQ2\n",
}


def write_wikidata5m(folder: Path, **changes) -> Path:
    """Wikidata5M's files in its published layout under ``folder``; ``changes`` replace a file's text by its name."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in {**WIKIDATA5M_FILES, **changes}.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder
