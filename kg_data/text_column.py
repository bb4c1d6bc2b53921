"""Texts kept in one Arrow buffer, read as a sequence of str: a KG of millions of entities holds its
names and descriptions as their UTF-8 bytes and an offset each, not as millions of Python strings."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

ITERATION_CHUNK = 65_536


class TextColumn(Sequence):
    """A read-only sequence of str over an Arrow string array; a slice comes back as a list."""

    def __init__(self, array: pa.Array | pa.ChunkedArray):
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks() if array.num_chunks else pa.array([], pa.large_string())
        self.array = array.cast(pa.large_string())  # 64-bit offsets: more than 2 GB of text is fine

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, index):
        if isinstance(index, slice):
            rows = range(*index.indices(len(self.array)))
            if rows.step == 1:
                return self.array.slice(rows.start, len(rows)).to_pylist()
            return self.array.take(np.arange(rows.start, rows.stop, rows.step, dtype=np.int64)).to_pylist()
        if isinstance(index, (int, np.integer)):
            position = int(index) + (len(self.array) if index < 0 else 0)
            if not 0 <= position < len(self.array):
                raise IndexError("TextColumn index out of range")
            return self.array[position].as_py()
        raise TypeError(f"TextColumn indices must be integers or slices, not {type(index).__name__}")

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self.array), ITERATION_CHUNK):
            yield from self.array.slice(start, ITERATION_CHUNK).to_pylist()

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # a sequence compared by value

    def __repr__(self) -> str:
        return f"TextColumn({len(self):,} texts)"


def as_arrow(texts: Sequence[str]) -> pa.Array:
    """The texts as an Arrow large-string array (a TextColumn's own, else converted)."""
    return texts.array if isinstance(texts, TextColumn) else pa.array(list(texts), pa.large_string())
