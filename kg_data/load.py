"""Load a knowledge graph by name (`wn18rr`, `wikidata5m`: found, or fetched where pinned) or from a folder."""

from __future__ import annotations

from pathlib import Path

from kg_data.bear import METADATA_FILE
from kg_data.errors import KGFormatError, KGNotFoundError
from kg_data.fetch import ensure_dataset, user_folder
from kg_data.kg import TextualKG
from kg_data.lama import RELATIONS_FILE
from kg_data.textual import load_textual_kg
from kg_data.wikidata5m import load_wikidata5m, wikidata5m_files
from kg_data.wn18rr import load_wn18rr

NAMED_KGS = {"wn18rr": load_wn18rr, "wikidata5m": load_wikidata5m}  # a KG by name: its reader

BENCHMARK_NAMES = {"lama": "lama", "bear": "bear", "bear-big": "bear"}


def folder_layouts(folder: Path) -> dict[str, list[str]]:
    """The KG layouts whose files ``folder`` holds, each with those files: {"WN18RR": [...], "Wikidata5M": [...],
    "TSV/JSONL": [...]} (only those present).  Any one of a layout's files marks it, so its missing files are named."""
    layouts = {"WN18RR": [name for name in ("entity2text.txt",) if (folder / name).is_file()],
               "Wikidata5M": wikidata5m_files(folder),
               "TSV/JSONL": [f"{stem}{suffix}" for stem in ("entities", "relations") for suffix in (".tsv", ".jsonl")
                             if (folder / f"{stem}{suffix}").is_file()]}
    return {layout: files for layout, files in layouts.items() if files}


def load_kg_folder(folder: Path) -> TextualKG:
    """The KG in ``folder``, read by the layout its files mark; a folder holding two KGs' files is refused as ambiguous
    (one of them would be read and the other ignored without a word)."""
    layouts = folder_layouts(folder)
    if len(layouts) > 1:
        held = " and ".join(f"{layout}'s ({', '.join(files)})" for layout, files in layouts.items())
        raise KGFormatError(folder, None, f"ambiguous: holds the files of two KGs, {held}; keep one KG per folder (move "
                                          "the other's files out)")
    layout = next(iter(layouts), "TSV/JSONL")  # none: the TSV/JSONL reader names what is missing
    return {"WN18RR": load_wn18rr, "Wikidata5M": load_wikidata5m, "TSV/JSONL": load_textual_kg}[layout](folder)


def _has(folder: Path, stem: str) -> bool:
    return any((folder / f"{stem}{suffix}").is_file() for suffix in (".tsv", ".jsonl"))


def dataset_kind(name_or_folder) -> str:
    """'kg', 'lama' or 'bear' by name or by what a folder holds.  A KG folder may hold relations.jsonl too, so its
    entities and a split (or Wikidata5M's files) decide first; anything unrecognised is 'kg' (its loader then says what is missing)."""
    text = str(name_or_folder).lower()
    if text in BENCHMARK_NAMES:
        return BENCHMARK_NAMES[text]
    folder = Path(name_or_folder).expanduser()
    if not folder.is_dir() or (folder / "entity2text.txt").exists():
        return "kg"
    if _has(folder, "entities") and (_has(folder, "train") or _has(folder, "test")) or wikidata5m_files(folder):
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
        return load_kg_folder(folder)
    raise KGNotFoundError(f"Unknown KG '{kg}': not a named KG ({', '.join(NAMED_KGS)}) and not a folder. "
                          "A KG folder holds entities.tsv, relations.tsv and train/valid/test.tsv (see README).")
