"""A user's own textual KG in plain files (TSV or JSONL).

Folder layout (each file either .tsv or .jsonl):

    entities.tsv    id <TAB> name [<TAB> description]      | {"id", "name", "description"?}
    relations.tsv   id <TAB> name                          | {"id", "name"}
    train.tsv       head <TAB> relation <TAB> tail         | {"head", "relation", "tail"}
    valid.tsv       (optional; dev.tsv also accepted)
    test.tsv

Lines are UTF-8; blank lines are skipped.  An empty description becomes "-".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kg_data.errors import KGFormatError
from kg_data.kg import TextualKG, build_kg
from kg_data.lines import read_jsonl, read_tsv


def _find(folder: Path, stem: str) -> Path | None:
    for suffix in (".tsv", ".jsonl"):
        if (folder / f"{stem}{suffix}").exists():
            return folder / f"{stem}{suffix}"
    return None


def _entities(path: Path) -> Iterator[tuple[Path, int, str, str, str]]:
    if path.suffix == ".jsonl":
        for line, record in read_jsonl(path, ("id", "name")):
            yield path, line, str(record["id"]), str(record["name"]), str(record.get("description") or "")
    else:
        for line, fields in read_tsv(path, 3, min_columns=2):
            yield path, line, fields[0], fields[1], fields[2] if len(fields) > 2 else ""


def _relations(path: Path) -> Iterator[tuple[Path, int, str, str]]:
    if path.suffix == ".jsonl":
        for line, record in read_jsonl(path, ("id", "name")):
            yield path, line, str(record["id"]), str(record["name"])
    else:
        for line, (relation_id, name) in read_tsv(path, 2):
            yield path, line, relation_id, name


def _triples(path: Path) -> Iterator[tuple[Path, int, str, str, str]]:
    if path.suffix == ".jsonl":
        for line, record in read_jsonl(path, ("head", "relation", "tail")):
            yield path, line, str(record["head"]), str(record["relation"]), str(record["tail"])
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
    split_files = {}
    for split, stems in (("train", ("train",)), ("valid", ("valid", "dev")), ("test", ("test",))):
        for stem in stems:
            path = _find(folder, stem)
            if path is not None:
                split_files[split] = path
                break
    if "test" not in split_files and "train" not in split_files:
        raise KGFormatError(folder / "test.tsv", None, "missing file: a KG needs at least train.tsv or test.tsv")
    return build_kg(
        name or folder.name,
        _entities(entities),
        _relations(relations),
        {split: _triples(path) for split, path in split_files.items()},
        source=str(folder),
    )
