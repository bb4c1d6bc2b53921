"""A user's own textual KG in plain files (TSV or JSONL).

Folder layout (each file either .tsv or .jsonl):

    entities.tsv    id <TAB> name [<TAB> description]      | {"id", "name", "description"?}
    relations.tsv   id <TAB> name                          | {"id", "name"}
    train.tsv       head <TAB> relation <TAB> tail         | {"head", "relation", "tail"}
    valid.tsv       (optional; dev.tsv also accepted)
    test.tsv

Each part comes from exactly one file: entities.tsv next to entities.jsonl, or valid.* next
to dev.*, is refused as ambiguous.  Lines are UTF-8 (a leading byte-order mark is dropped;
UTF-16 is refused); blank lines are skipped.  An empty description becomes "-".

In JSONL, ids (id, head, relation, tail) are strings or integers (written as decimal
strings), a name is a string, a description a string, null or missing.  No value may hold a
tab or a line break (a TSV file cannot hold one either).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kg_data.errors import KGFormatError
from kg_data.kg import SPLIT_STEMS, TextualKG, build_kg
from kg_data.lines import json_text, read_jsonl, read_tsv


def _find(folder: Path, *stems: str) -> Path | None:
    """The one file for ``stems`` (e.g. "valid", "dev") as .tsv or .jsonl; None if absent."""
    found = [folder / f"{stem}{suffix}" for stem in stems for suffix in (".tsv", ".jsonl") if (folder / f"{stem}{suffix}").exists()]
    if len(found) > 1:
        names = [path.name for path in found]
        listed = f"{', '.join(names[:-1])} and {names[-1]}"
        raise KGFormatError(folder, None, f"ambiguous: {listed} are present; keep only one of them")
    return found[0] if found else None


def _entities(path: Path) -> Iterator[tuple[Path, int, str, str, str]]:
    if path.suffix == ".jsonl":
        for line, record in read_jsonl(path, ("id", "name")):
            yield (path, line, json_text(path, line, record, "id", integer=True), json_text(path, line, record, "name"),
                   json_text(path, line, record, "description", optional=True))
    else:
        for line, fields in read_tsv(path, 3, min_columns=2):
            yield path, line, fields[0], fields[1], fields[2] if len(fields) > 2 else ""


def _relations(path: Path) -> Iterator[tuple[Path, int, str, str]]:
    if path.suffix == ".jsonl":
        for line, record in read_jsonl(path, ("id", "name")):
            yield path, line, json_text(path, line, record, "id", integer=True), json_text(path, line, record, "name")
    else:
        for line, (relation_id, name) in read_tsv(path, 2):
            yield path, line, relation_id, name


def _triples(path: Path) -> Iterator[tuple[Path, int, str, str, str]]:
    if path.suffix == ".jsonl":
        for line, record in read_jsonl(path, ("head", "relation", "tail")):
            head, relation, tail = (json_text(path, line, record, key, integer=True) for key in ("head", "relation", "tail"))
            yield path, line, head, relation, tail
    else:
        for line, (head, relation, tail) in read_tsv(path, 3):
            yield path, line, head, relation, tail


def load_textual_kg(folder: Path, name: str | None = None) -> TextualKG:
    """Read a KG folder in the format above; raises KGFormatError naming file and line."""
    folder = Path(folder)
    entities = _find(folder, "entities")
    relations = _find(folder, "relations")
    for stem, path in (("entities", entities), ("relations", relations)):
        if path is None:
            raise KGFormatError(folder / f"{stem}.tsv", None, f"missing file (need {stem}.tsv or {stem}.jsonl)")
    split_files = {split: path for split, stems in SPLIT_STEMS.items() if (path := _find(folder, *stems)) is not None}
    if "test" not in split_files and "train" not in split_files:
        raise KGFormatError(folder / "test.tsv", None, "missing file: a KG needs at least train.tsv or test.tsv")
    return build_kg(
        name or folder.name,
        _entities(entities),
        _relations(relations),
        {split: _triples(path) for split, path in split_files.items()},
        source=str(folder),
        split_files={split: str(path) for split, path in split_files.items()},
    )
