"""The textual knowledge graph: entities with names and descriptions, named relations, splits."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path

import numpy as np

from kg_data.errors import KGFormatError, KGSplitError
from kg_data.lines import read_rows

EMPTY_DESCRIPTION = "-"
# the file stems each split is read from (a KG folder holds one file per split, .tsv or .jsonl)
SPLIT_STEMS = {"train": ("train",), "valid": ("valid", "dev"), "test": ("test",)}
FINGERPRINT_CHUNK = 100_000  # texts hashed at a time
BULK_BYTES = 1 << 20  # a split file this large is read in bulk (pyarrow), a smaller one line by line


@dataclasses.dataclass
class TextualKG:
    """Entities, relations and triples: ``splits[name]`` is int64 (n_triples, 3) of (head, relation, tail)
    indices into ``entity_ids`` / ``relation_ids``; ``split_files[name]`` the file it was read from."""

    name: str
    entity_ids: Sequence[str]  # a list, or a TextColumn for a KG read in bulk
    entity_names: Sequence[str]
    entity_descriptions: Sequence[str]
    relation_ids: list[str]
    relation_names: list[str]
    splits: dict[str, np.ndarray]
    source: str = ""
    split_files: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: dict = dataclasses.field(default_factory=dict)  # what a reader counted (rows dropped, texts missing, ...)

    @property
    def n_entities(self) -> int:
        return len(self.entity_ids)

    @property
    def n_relations(self) -> int:
        return len(self.relation_ids)

    @cached_property
    def entity_index(self) -> dict[str, int]:
        return {entity_id: i for i, entity_id in enumerate(self.entity_ids)}

    @cached_property
    def relation_index(self) -> dict[str, int]:
        return {relation_id: i for i, relation_id in enumerate(self.relation_ids)}

    def triples(self, split: str) -> np.ndarray:
        """The (n, 3) triples of ``split``; KGSplitError if the KG has no such split."""
        if split not in self.splits:
            where = f" (folder {self.source})" if self.source else ""
            stems = SPLIT_STEMS.get(split)
            files = f" (no {'/'.join(f'{stem}.tsv' for stem in stems)} or .jsonl)" if stems and self.split_files else ""
            raise KGSplitError(f"KG '{self.name}'{where} has no '{split}' split{files}; it has: {', '.join(self.splits)}")
        return self.splits[split]

    def all_triples(self) -> np.ndarray:
        return np.concatenate([t for t in self.splits.values() if len(t)], axis=0)

    def fingerprint(self) -> str:
        """Hash of entity texts, relation names and triples; part of every cache key."""
        digest = hashlib.sha256()
        for part in (self.entity_ids, self.entity_names, self.entity_descriptions, self.relation_ids, self.relation_names):
            for start in range(0, len(part), FINGERPRINT_CHUNK):  # the same bytes as one join, a chunk at a time
                digest.update(("\x1f" if start else "").encode() + "\x1f".join(part[start:start + FINGERPRINT_CHUNK]).encode("utf-8"))
            digest.update(b"\x1e")
        for split in sorted(self.splits):
            digest.update(split.encode())
            digest.update(np.ascontiguousarray(self.splits[split], dtype=np.int64).tobytes())
        return digest.hexdigest()[:16]

    def summary(self) -> dict:
        return {"name": self.name, "source": self.source, "entities": self.n_entities, "relations": self.n_relations,
                **{f"{split}_triples": int(len(triples)) for split, triples in self.splits.items()},
                **({"notes": self.notes} if self.notes else {})}


def build_kg(name: str, entities: Iterable[tuple[Path, int, str, str, str]], relations: Iterable[tuple[Path, int, str, str]],
             split_files: dict[str, Path], source: str, entity_texts: tuple | None = None) -> TextualKG:
    """Assemble a TextualKG, validating ids (errors name file and line): ``entities`` yields (path, line, id, name,
    description), ``relations`` (path, line, id, name); ``entity_texts``: (ids, names, descriptions) read in bulk instead."""
    if entity_texts is not None:  # read in bulk and checked already: the rows are not read
        entity_ids, entity_names, entity_descriptions = entity_texts
    else:
        entity_list = list(entities)
        entity_ids, entity_names = _validated_named_rows([(path, line, i, name) for path, line, i, name, _ in entity_list],
                                                         "entity")
        entity_descriptions = [row[4].strip() or EMPTY_DESCRIPTION for row in entity_list]
        del entity_list
    relation_ids, relation_names = _validated_named_rows(relations, "relation")
    kg = TextualKG(name, entity_ids, entity_names, entity_descriptions, relation_ids, relation_names, {}, source,
                   {split: str(file) for split, file in split_files.items()})
    for split, file in split_files.items():
        fast = _bulk_triples(kg, file)
        if fast is not None:
            kg.splits[split] = fast
            continue
        entity_index, relation_index = kg.entity_index, kg.relation_index
        indices: list[tuple[int, int, int]] = []
        for path, line, head, relation, tail in read_rows(file, "head", "relation", "tail"):
            head, relation, tail = head.strip(), relation.strip(), tail.strip()
            for what, value, index in (("head entity", head, entity_index), ("tail entity", tail, entity_index),
                                       ("relation", relation, relation_index)):
                if value not in index:
                    raise KGFormatError(path, line, f"unknown {what} id '{value}'")
            indices.append((entity_index[head], relation_index[relation], entity_index[tail]))
        kg.splits[split] = np.asarray(indices, dtype=np.int64).reshape(-1, 3)
    return kg


def _bulk_triples(kg: TextualKG, path: Path) -> np.ndarray | None:
    """A large TSV split's triples read in bulk; None otherwise, or for anything unusual (then read line by line)."""
    if path.suffix != ".tsv" or path.stat().st_size < BULK_BYTES:
        return None
    from kg_data.id_columns import index_triples
    from kg_data.text_column import as_arrow

    return index_triples(path, as_arrow(kg.entity_ids), as_arrow(kg.relation_ids))


def _validated_named_rows(rows, kind: str) -> tuple[list[str], list[str]]:
    """(ids, names) from (path, line, id, name) rows, checked."""
    seen: dict[str, tuple[Path, int]] = {}
    names = []
    for path, line, row_id, name in rows:
        row_id = row_id.strip()
        if not row_id:
            raise KGFormatError(path, line, f"empty {kind} id")
        if row_id in seen:
            first_path, first_line = seen[row_id]
            raise KGFormatError(path, line, f"duplicate {kind} id '{row_id}' (first defined at {first_path}:{first_line})")
        if not name.strip():
            raise KGFormatError(path, line, f"empty name for {kind} '{row_id}'")
        seen[row_id] = (path, line)
        names.append(name.strip())
    return list(seen), names


def relation_display_name(relation_id: str) -> str:
    """'_derivationally_related_form' -> 'derivationally related form'."""
    return relation_id.strip().lstrip("_").replace("_", " ")
