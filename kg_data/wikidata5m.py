"""Wikidata5M (Wang et al. 2021, KEPLER), transductive setting, from its published files.

    wikidata5m_entity.txt     Q-id <TAB> alias <TAB> alias ...    (wikidata5m_alias.tar.gz)
    wikidata5m_relation.txt   P-id <TAB> alias <TAB> alias ...
    wikidata5m_text.txt       Q-id <TAB> description              (wikidata5m_text.txt.gz)
    wikidata5m_transductive_{train,valid,test}.txt   head <TAB> relation <TAB> tail

The entities are those named by a triple of the three splits (the alias file also lists the inductive setting's), in
the alias file's order, named by their first alias; an entity without a text gets the empty description ("-"), an id
on two text lines its first; a triple naming an entity or relation with no alias is dropped.  Each rule is counted in
``TextualKG.notes``; a dropped triple or text line is also said in a ``DeerWarning`` (how many, why, which ids).  Files are
read in bulk, each checked first as text (``kg_data.lines.check_text_file``: not empty, not compressed, not UTF-16); a
line that is not plain is named with its file and line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kg_data.errors import KGFormatError, some_of, warn
from kg_data.id_columns import indices_in, read_columns, split_first
from kg_data.kg import EMPTY_DESCRIPTION, TextualKG
from kg_data.lines import check_text_file, read_tsv
from kg_data.text_column import TextColumn

ENTITY_FILE, RELATION_FILE, TEXT_FILE = "wikidata5m_entity.txt", "wikidata5m_relation.txt", "wikidata5m_text.txt"
SPLIT_FILES = {split: f"wikidata5m_transductive_{split}.txt" for split in ("train", "valid", "test")}
# each file read, and the published archive it comes from
ARCHIVES = {ENTITY_FILE: "wikidata5m_alias.tar.gz", RELATION_FILE: "wikidata5m_alias.tar.gz", TEXT_FILE: "wikidata5m_text.txt.gz",
            **dict.fromkeys(SPLIT_FILES.values(), "wikidata5m_transductive.tar.gz")}


def wikidata5m_files(folder: Path) -> list[str]:
    """The Wikidata5M files ``folder`` holds (any one makes it a Wikidata5M folder, whose missing files are then named)."""
    return [name for name in ARCHIVES if (Path(folder) / name).is_file()]


def _columns(path: Path, n_columns: int | None) -> pa.Table:
    """The file's columns; a file pyarrow cannot read plainly is read line by line to name the line."""
    if not path.is_file():
        raise KGFormatError(path, None, f"missing Wikidata5M file: extract it from {ARCHIVES[path.name]} into {path.parent} "
                                        "(`deer data fetch wikidata5m` says where to get it)")
    check_text_file(path, empty_ok=False)  # each published file holds lines: an empty one is an extract that failed
    table = read_columns(path, n_columns)
    if table is None:
        for _ in read_tsv(path, n_columns or sys.maxsize, min_columns=n_columns or 1):
            pass  # raises naming the first bad line (a line of the alias and text files has any number of tabs)
        raise KGFormatError(path, None, "not a plain tab-separated UTF-8 file")
    return table


def _refuse_padded(path: Path, ids: pa.Array | pa.ChunkedArray) -> None:
    """Refuse an id with whitespace around it: it would match no id, and its triple be dropped under a wrong reason."""
    padded = pc.not_equal(pc.utf8_trim_whitespace(ids), ids)
    if pc.any(padded).as_py():
        raise KGFormatError(path, None, f"id {pc.filter(ids, padded)[0].as_py()!r} has whitespace around it; remove it "
                                        "(ids are matched exactly)")


def _named(path: Path) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(ids, first aliases, whether a line has more aliases) of an alias file; lines with a blank first alias left out."""
    ids, aliases = split_first(_columns(path, None).column(0).combine_chunks())
    names, others = split_first(aliases)
    names = pc.utf8_trim_whitespace(names)
    named = np.flatnonzero(pc.not_equal(names, "").to_numpy(zero_copy_only=False))
    if len(named) == 0:
        raise KGFormatError(path, None, "no entries with a name")
    ids = ids.take(named)
    _refuse_padded(path, ids)
    if pc.count_distinct(ids).as_py() != len(ids):  # a second line would be one more entity, never gold nor filtered
        seen: set[str] = set()
        repeated = next(i for i in ids.to_pylist() if i in seen or seen.add(i))
        raise KGFormatError(path, None, f"id '{repeated}' is listed more than once; give each id one line (its aliases "
                                        "tab-separated on that line)")
    return ids, names.take(named), pc.not_equal(others, "").to_numpy(zero_copy_only=False)[named]


def load_wikidata5m(folder: str | Path) -> TextualKG:
    """Read the transductive Wikidata5M from ``folder`` (the six files above)."""
    folder = Path(folder)
    tables = {split: _columns(folder / name, 3) for split, name in SPLIT_FILES.items()}
    listed_ids, listed_names, more_aliases = _named(folder / ENTITY_FILE)
    relation_ids, relation_names, _ = _named(folder / RELATION_FILE)
    used = pc.unique(pa.chunked_array([c for t in tables.values() for c in (t.column(0).chunks + t.column(2).chunks)],
                                      type=pa.string()))
    keep = np.flatnonzero(pc.is_in(listed_ids, value_set=used).to_numpy(zero_copy_only=False))
    entity_ids, entity_names = listed_ids.take(keep), listed_names.take(keep)
    text_ids, texts = split_first(_columns(folder / TEXT_FILE, None).column(0).combine_chunks())
    _refuse_padded(folder / TEXT_FILE, text_ids)
    texts = pc.utf8_trim_whitespace(texts)
    text_row = indices_in(entity_ids, text_ids)
    text_row[text_row >= 0] = np.where(pc.equal(texts.take(text_row[text_row >= 0]), "").to_numpy(zero_copy_only=False),
                                       -1, text_row[text_row >= 0])  # a blank text is no description
    described = text_row >= 0
    descriptions = pc.if_else(pa.array(described), texts.take(np.where(described, text_row, 0)), EMPTY_DESCRIPTION) \
        if len(texts) else pa.array([EMPTY_DESCRIPTION] * len(entity_ids))
    splits, dropped, unnamed = {}, {}, {}
    for split, table in tables.items():
        triples = np.stack([indices_in(table.column(i), vocabulary) for i, vocabulary in
                            enumerate((entity_ids, relation_ids, entity_ids))], axis=1) if table.num_rows else np.zeros((0, 3), np.int64)
        known = (triples >= 0).all(axis=1)
        if not known.all():  # a dropped triple: for want of an alias, not for a stray space (only these rows are looked at)
            unknown = table.filter(pa.array(~known))
            for column in unknown.columns:
                _refuse_padded(folder / SPLIT_FILES[split], column)
        splits[split], dropped[split] = triples[known], int((~known).sum())
        if dropped[split]:
            unnamed[split] = _ids_without_alias(table.filter(pa.array(~known)), triples[~known])
    notes = {"alias_file_entities_not_in_a_triple": int(len(listed_ids) - len(keep)),
             "entities_without_description": int((~described).sum()),
             "entities_with_more_aliases": int(more_aliases[keep].sum()),
             "entities_without_alias": int(len(used) - len(keep)), "triples_dropped_without_alias": dropped}
    repeated_texts = len(text_ids) - pc.count_distinct(text_ids).as_py()
    if repeated_texts:  # the release is read as its loaders read it, one text per id: the first used here, and counted
        notes["text_lines_repeating_an_id"] = int(repeated_texts)
    _say_what_was_dropped(folder, {split: table.num_rows for split, table in tables.items()}, dropped, unnamed,
                          int(repeated_texts))
    return TextualKG("wikidata5m", TextColumn(entity_ids), TextColumn(entity_names), TextColumn(descriptions),
                     relation_ids.to_pylist(), relation_names.to_pylist(), splits, str(folder),
                     {split: str(folder / name) for split, name in SPLIT_FILES.items()}, notes)


def _ids_without_alias(rows: pa.Table, triples: np.ndarray) -> list[str]:
    """The ids of dropped ``rows`` that have no alias (their index in ``triples`` is -1), each once."""
    return list(dict.fromkeys(value for column, found in zip(rows.columns, triples.T, strict=True)
                              for value, index in zip(column.to_pylist(), found.tolist(), strict=True) if index < 0))


def _say_what_was_dropped(folder: Path, read: dict[str, int], dropped: dict[str, int], unnamed: dict[str, list[str]],
                          repeated_texts: int) -> None:
    """A DeerWarning saying how many triples of each split (and text lines) were left out and why, naming the ids: the
    metrics cover fewer queries than the test file holds."""
    said = [f"{split}: {dropped[split]} of {read[split]} triples dropped, {read[split] - dropped[split]} kept (ids without an "
            f"alias: {some_of(unnamed[split], 5)})" for split in read if dropped[split]]
    if said:
        warn(f"Wikidata5M {folder}: {'; '.join(said)}. A triple is read only where its head, relation and tail each have a "
             f"name, the first alias on their line of {ENTITY_FILE} or {RELATION_FILE}; counted in the KG's notes "
             "(metadata.json: kg.notes.triples_dropped_without_alias)")
    if repeated_texts:
        warn(f"Wikidata5M {folder / TEXT_FILE}: {repeated_texts} lines give an id a second text, left out (an entity's "
             "description is its first text); counted in the KG's notes (text_lines_repeating_an_id)")
