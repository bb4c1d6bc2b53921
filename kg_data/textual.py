"""A user's own textual KG in plain files (TSV or JSONL).

Folder layout (each file either .tsv or .jsonl):

    entities.tsv    id <TAB> name [<TAB> description]      | {"id", "name", "description"?}
    relations.tsv   id <TAB> name                          | {"id", "name"}
    train.tsv       head <TAB> relation <TAB> tail         | {"head", "relation", "tail"}
    valid.tsv       (optional; dev.tsv also accepted)
    test.tsv

Each part comes from exactly one file (entities.tsv next to entities.jsonl, or valid.* next to dev.*,
is ambiguous).  Lines are UTF-8; blank lines are skipped; an empty description becomes "-".  In JSONL,
ids may be integers, a description null or missing; no value may hold a tab or a line break.
"""

from __future__ import annotations

from pathlib import Path

from kg_data.errors import KGFormatError
from kg_data.id_columns import read_entity_texts
from kg_data.kg import BULK_BYTES, EMPTY_DESCRIPTION, SPLIT_STEMS, TextualKG, build_kg
from kg_data.lines import nonempty, read_rows


def _find(folder: Path, *stems: str) -> Path | None:
    """The one file for ``stems`` (e.g. "valid", "dev") as .tsv or .jsonl; None if absent."""
    found = [folder / f"{stem}{suffix}" for stem in stems for suffix in (".tsv", ".jsonl") if (folder / f"{stem}{suffix}").exists()]
    if len(found) > 1:
        *others, last = [path.name for path in found]
        raise KGFormatError(folder, None, f"ambiguous: {', '.join(others)} and {last} are present; keep only one of them")
    return found[0] if found else None


def _refuse_unread_split_files(folder: Path, split_files: dict[str, Path]) -> None:
    """Refuse a split's file that would be ignored (train.txt, Train.tsv) where that split has no .tsv/.jsonl file."""
    for split, stems in SPLIT_STEMS.items():
        if split in split_files:
            continue
        unread = sorted(path.name for path in folder.iterdir() if path.name.split(".")[0].lower() in stems and path.is_file())
        if unread:
            read = " or ".join(f"{stem}{suffix}" for stem in stems for suffix in (".tsv", ".jsonl"))
            raise KGFormatError(folder / unread[0], None, f"not read: the {split} split is read from {read} only, and this "
                                                          f"file would be ignored (no {split} split, its triples missing from "
                                                          f"the known-true filter); rename it to {stems[0]}.tsv (or "
                                                          f"{stems[0]}.jsonl), or move it out of the folder")


def load_textual_kg(folder: Path, name: str | None = None) -> TextualKG:
    """Read a KG folder in the format above; raises KGFormatError naming file and line."""
    folder = Path(folder)
    entities, relations = _find(folder, "entities"), _find(folder, "relations")
    for stem, path in (("entities", entities), ("relations", relations)):
        if path is None:
            raise KGFormatError(folder / f"{stem}.tsv", None, f"missing file (need {stem}.tsv or {stem}.jsonl)")
    split_files = {split: path for split, stems in SPLIT_STEMS.items() if (path := _find(folder, *stems)) is not None}
    _refuse_unread_split_files(folder, split_files)
    if "test" not in split_files and "train" not in split_files:
        raise KGFormatError(folder / "test.tsv", None, "missing file: a KG needs at least train.tsv or test.tsv")
    bulk = read_entity_texts(entities, EMPTY_DESCRIPTION) if entities.suffix == ".tsv" and entities.stat().st_size >= BULK_BYTES else None
    return build_kg(name or folder.name, nonempty(read_rows(entities, "id", "name", "description"), entities, "entities"),
                    nonempty(read_rows(relations, "id", "name"), relations, "relations"), split_files,
                    source=str(folder), entity_texts=bulk)
