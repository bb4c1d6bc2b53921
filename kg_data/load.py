"""Load a knowledge graph by name (`wn18rr`, found or fetched) or from a folder."""

from __future__ import annotations

from pathlib import Path

from kg_data.errors import KGNotFoundError
from kg_data.fetch import ensure_dataset
from kg_data.kg import TextualKG
from kg_data.textual import load_textual_kg
from kg_data.wn18rr import load_wn18rr


def load_kg(kg: str | Path, data_dir: str | Path | None = None) -> TextualKG:
    """Load a KG by name ('wn18rr') or from a folder (str or Path) in the generic TSV/JSONL format."""
    if isinstance(kg, str) and kg.lower() == "wn18rr":
        return load_wn18rr(ensure_dataset("wn18rr", data_dir))
    folder = Path(kg).expanduser()
    if folder.is_dir():
        if (folder / "entity2text.txt").exists():
            return load_wn18rr(folder)
        return load_textual_kg(folder)
    raise KGNotFoundError(
        f"Unknown KG '{kg}': not a named KG (wn18rr) and not a folder. "
        "A KG folder holds entities.tsv, relations.tsv and train/valid/test.tsv (see README)."
    )
