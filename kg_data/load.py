"""Load a knowledge graph by name (`wn18rr`, `wikidata5m`: found, or fetched where pinned) or from a folder."""

from __future__ import annotations

from pathlib import Path

from kg_data.bear import METADATA_FILE
from kg_data.errors import KGNotFoundError
from kg_data.fetch import ensure_dataset, user_folder
from kg_data.kg import TextualKG
from kg_data.lama import RELATIONS_FILE
from kg_data.textual import load_textual_kg
from kg_data.wikidata5m import is_wikidata5m, load_wikidata5m
from kg_data.wn18rr import load_wn18rr

NAMED_KGS = {"wn18rr": load_wn18rr, "wikidata5m": load_wikidata5m}  # a KG by name: its reader

BENCHMARK_NAMES = {"lama": "lama", "bear": "bear", "bear-big": "bear"}


def _has(folder: Path, stem: str) -> bool:
    return any((folder / f"{stem}{suffix}").is_file() for suffix in (".tsv", ".jsonl"))


def dataset_kind(name_or_folder) -> str:
    """'kg', 'lama' or 'bear' by name or by what a folder holds.  A KG folder may hold relations.jsonl too, so its
    entities and a split decide first; anything unrecognised is 'kg' (its loader then says what is missing)."""
    text = str(name_or_folder).lower()
    if text in BENCHMARK_NAMES:
        return BENCHMARK_NAMES[text]
    folder = Path(name_or_folder).expanduser()
    if not folder.is_dir() or (folder / "entity2text.txt").exists():
        return "kg"
    if _has(folder, "entities") and (_has(folder, "train") or _has(folder, "test")):
        return "kg"
    if (folder / RELATIONS_FILE).is_file():
        return "lama"
    if (folder / METADATA_FILE).is_file():
        return "bear"
    return "kg"


def load_kg(kg: str | Path, data_dir: str | Path | None = None) -> TextualKG:
    """Load a KG by name ('wn18rr', 'wikidata5m') or from a folder: WN18RR's or Wikidata5M's files, or the TSV/JSONL format."""
    if isinstance(kg, (str, Path)) and (kind := dataset_kind(kg)) != "kg":
        raise KGNotFoundError(f"'{kg}' is a cloze benchmark ({kind.upper()} format), not a KG: probe it with "
                              f"`deer cloze --dataset {kg}` or experiments.benchmarks.probe_benchmark('{kg}', model)")
    if isinstance(kg, str) and kg.lower() in NAMED_KGS:
        return NAMED_KGS[kg.lower()](ensure_dataset(kg.lower(), data_dir))
    folder = user_folder(kg)
    if folder.is_dir():
        if (folder / "entity2text.txt").exists():
            return load_wn18rr(folder)
        return load_wikidata5m(folder) if is_wikidata5m(folder) else load_textual_kg(folder)
    raise KGNotFoundError(f"Unknown KG '{kg}': not a named KG ({', '.join(NAMED_KGS)}) and not a folder. "
                          "A KG folder holds entities.tsv, relations.tsv and train/valid/test.tsv (see README).")
