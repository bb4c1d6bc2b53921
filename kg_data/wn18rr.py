"""WN18RR with the KG-BERT entity texts (`entity2text.txt`: "<offset>\\t<name>, <definition>")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from kg_data.errors import KGFormatError
from kg_data.kg import TextualKG, build_kg, relation_display_name
from kg_data.lines import nonempty, read_tsv

SPLIT_FILES = {"train": "train.tsv", "valid": "dev.tsv", "test": "test.tsv"}


def split_entity_text(text: str) -> tuple[str, str]:
    """Split "name, definition" at the first ", " (no WordNet lemma contains a comma)."""
    name, _, description = text.partition(", ")
    return name, description


# another KG in WN18RR's KG-BERT layout (entity2text.txt), which this reader would read by WordNet's rules
NOT_WN18RR = "this folder is not WN18RR; convert it to the generic TSV/JSONL KG format (entities.tsv, relations.tsv)"


def _relations(folder: Path) -> Iterator[tuple[Path, int, str, str]]:
    """Relations in first-seen order over the split files (relations.txt is optional), named from their ids."""
    path = folder / "relations.txt"
    if path.exists():
        relation_ids = [fields[0] for _, fields in nonempty(read_tsv(path, 1), path, "relations")]
    else:
        rows = (fields for file_name in SPLIT_FILES.values() for _, fields in read_tsv(folder / file_name, 3))
        relation_ids = list(dict.fromkeys(relation.strip() for _, relation, _ in rows))
    _refuse_other_relation_names(folder / "relation2text.txt")  # read after the entities (a generator): their ids first
    yield from ((path, line, relation_id, relation_display_name(relation_id))
                for line, relation_id in enumerate(relation_ids, start=1))


def _refuse_other_relation_names(path: Path) -> None:
    """Refuse a relation2text.txt name that is not its id's ("_has_part" -> "has part"): the folder is another KG in
    the KG-BERT layout, whose names this reader would ignore and whose entity texts it would cut at WordNet's ", "."""
    for line, fields in read_tsv(path, 2) if path.exists() else ():
        if fields[1].strip() != relation_display_name(fields[0]):
            raise KGFormatError(path, line, f"relation {fields[0]!r} is named {fields[1].strip()!r}, not as in WN18RR "
                                            f"({relation_display_name(fields[0])!r}): {NOT_WN18RR}")


def load_wn18rr(folder: Path) -> TextualKG:
    """Read WN18RR from a folder holding the KG-BERT files (see shared/data/wn18rr/README.md)."""
    folder = Path(folder)
    entities = folder / "entity2text.txt"
    paths = {split: folder / file_name for split, file_name in SPLIT_FILES.items()}
    for path in (entities, *paths.values()):
        if not path.exists():
            raise KGFormatError(path, None, "missing WN18RR file")
    rows = ((entities, line, _wordnet_id(entities, line, entity_id), *split_entity_text(text))
            for line, (entity_id, text) in read_tsv(entities, 2))
    return build_kg("wn18rr", nonempty(rows, entities, "entities"), _relations(folder), paths, source=str(folder))


def _wordnet_id(path: Path, line: int, entity_id: str) -> str:
    """``entity_id``, refused unless it is a WordNet synset offset (8 digits): another KG-BERT folder would be read as
    WN18RR, its names cut at WordNet's ", " ("Paris, Texas" named "Paris")."""
    if not re.fullmatch(r"[0-9]{8}", entity_id.strip()):
        raise KGFormatError(path, line, f"id {entity_id!r} is not a WordNet synset offset (8 digits): {NOT_WN18RR}")
    return entity_id
