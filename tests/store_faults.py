"""Every way the tests damage stored work, in one place.

The tests say what they damage (a cache's stored vectors or score rows, a run's resume parts) and how;
only this module knows how that work is laid out on disk, so a new store layout (memory-mapped shards)
changes this module and no test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

# Damage that a store must notice in what it reads back.
VECTOR_FAULTS = ("narrow", "nan", "truncate", "flip", "empty", "not-numpy", "pickle")
# Damage that a run must notice in a resume part (a table of finished rows).
TABLE_FAULTS = ("truncate", "flip", "empty", "not-a-table", "rows", "columns", "value")
RANK_EDIT = 5  # 'value': added to each rank of a part; the table stays valid, only its numbers differ from what was written
NARROW = 7  # the width of 'narrow' vectors: never a model's hidden size or a tiny KG's candidate count


SHARD_INDEXES = "shard-*.index.npy"  # one per written shard: what exists once a shard is whole


def stored_vector_files(root) -> list[Path]:
    """The files holding stored vectors or score rows under ``root`` (a cache root or one store's folder)."""
    return sorted(Path(root).rglob("shard-*.vectors.npy"))


def set_aside_vector_files(root) -> list[Path]:
    """The stored vector files under ``root`` that a store set aside."""
    return sorted(Path(root).rglob("shard-*.vectors.npy.bad"))


def stored_parts(root) -> list[Path]:
    """One path per whole stored part (shard) under ``root``: what an interrupted run has kept."""
    return sorted(Path(root).rglob(SHARD_INDEXES))


def stored_keys(root) -> list[bytes]:
    """The item keys (``deer.platform.stores.item_keys``) stored under ``root``, part by part, in order."""
    return [key for index in stored_parts(root) for key in np.load(index)["key"].tolist()]


def _index_of(vectors_file: Path) -> Path:
    return vectors_file.with_name(vectors_file.name.replace(".vectors.npy", ".index.npy"))


def _rewrite(path: Path, vectors: np.ndarray, as_written: bool) -> None:
    """New vectors in place of a shard's; ``as_written``: with its index's checksums made to match (as if the
    writer had stored them), else the checksums of what was written stay."""
    np.save(path, vectors)
    if as_written:
        from deer.platform.stores import row_checksums

        index = np.load(_index_of(path))
        index["checksum"] = row_checksums(vectors)
        np.save(_index_of(path), index)


def _value_byte(path: Path) -> int:
    """The position of a byte of stored values: in a parquet table the last of its first column's
    pages (its middle is often the footer's schema text, which no value depends on), else the middle."""
    if path.suffix != ".parquet":
        return path.stat().st_size // 2
    import pyarrow.parquet as pq

    column = pq.ParquetFile(path).metadata.row_group(0).column(0)
    return (column.dictionary_page_offset or column.data_page_offset) + column.total_compressed_size - 1


def damage_bytes(path: Path, how: str) -> None:
    """Damage a file whatever it holds: 'truncate' (its first half kept), 'flip' (a byte of its stored
    values inverted), 'empty', or 'not-numpy' / 'not-a-table' (replaced by a line of text)."""
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flip":
        flipped = bytearray(data)
        flipped[_value_byte(path)] ^= 0xFF
        path.write_bytes(bytes(flipped))
    elif how == "empty":
        path.write_bytes(b"")
    elif how in ("not-numpy", "not-a-table"):
        path.write_text("this is not what was stored here\n")
    else:
        raise ValueError(f"unknown damage {how!r}")


def corrupt_stored_vectors(root, how: str) -> list[Path]:
    """Damage every stored vector file under ``root`` (``VECTOR_FAULTS``): 'narrow' vectors 7 wide,
    'nan' (one value of each file NaN, as if written so), 'pickle' (the ids stored as pickled objects), or
    the bytes damaged (``damage_bytes``); also 'minus-inf' (one value -inf as if written so: a possible
    log-likelihood).  Returns the damaged files: the names the warnings must give."""
    files = stored_vector_files(root)
    assert files, f"nothing stored under {root}"
    for path in files:
        if how == "pickle":  # the file a store reads first: named in its warning
            np.save(_index_of(path), np.load(_index_of(path)).astype(object), allow_pickle=True)
        elif how in ("narrow", "nan", "minus-inf"):
            vectors = np.load(path)
            if how == "narrow":
                _rewrite(path, np.ascontiguousarray(vectors[:, :NARROW]), as_written=True)
            else:
                vectors[0, 0] = np.nan if how == "nan" else -np.inf
                _rewrite(path, vectors, as_written=True)
        else:
            damage_bytes(path, how)
    return [_index_of(path) for path in files] if how == "pickle" else files


def resume_parts(out) -> list[Path]:
    """A run's resume parts under its output folder ``out`` (a cloze run's per-probe rows, a BEAR data
    set's per-relation rows)."""
    return sorted(Path(out).rglob("parts/*/*.parquet"))


def set_aside_resume_parts(out) -> list[Path]:
    return sorted(Path(out).rglob("parts/*/*.parquet.bad"))


def _edit_ranks(path: Path) -> None:
    """``RANK_EDIT`` added to every rank of a parquet part, all else kept: its schema and key-value metadata (what
    the writer recorded of it) as written, as a tool that keeps a file's metadata would rewrite it."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    ranks = [i for i, name in enumerate(table.column_names) if name.endswith("_rank")]
    assert ranks, f"{path} holds no rank column"
    for i in ranks:
        table = table.set_column(i, table.field(i), pc.add(table.column(i), RANK_EDIT))
    pq.write_table(table, path)
    assert pq.read_schema(path).metadata == table.schema.metadata


def corrupt_resume_parts(out, how: str) -> list[Path]:
    """Damage every resume part under ``out`` (``TABLE_FAULTS``): 'rows' (its last row dropped), 'columns'
    (its first column dropped), 'value' (``RANK_EDIT`` added to its ranks: a valid table of other numbers), or the
    bytes damaged (``damage_bytes``).  Returns the damaged files."""
    parts = resume_parts(out)
    assert parts, f"no resume part under {out}"
    for path in parts:
        if how == "value":
            _edit_ranks(path)
        elif how in ("rows", "columns"):
            table = pd.read_parquet(path)
            table = table.iloc[:-1] if how == "rows" else table.drop(columns=table.columns[0])
            table.to_parquet(path, index=False)
        else:
            damage_bytes(path, how)
    return parts
