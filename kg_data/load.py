"""Load a knowledge graph by name (`wn18rr`, `wikidata5m`: found, or fetched where pinned) or from a folder, or a cloze
benchmark (LAMA, a BEAR-format data set) by name or folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kg_data.bear import METADATA_FILE, BearDataset, load_bear_dataset
from kg_data.cloze import CANDIDATE_KINDS, MODES, check_lama_queries, check_modes
from kg_data.errors import KGFormatError, KGNotFoundError
from kg_data.fetch import ensure_dataset, user_folder
from kg_data.kg import TextualKG
from kg_data.lama import COMMON_VOCAB_FILE, RELATIONS_FILE, LamaDataset, load_lama
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


def load_benchmark(dataset, data_dir=None, *, relations: Sequence[str] | None = None, sources: Sequence[str] | None = None,
                   max_facts: int | None = None, seed: int = 0, modes: Sequence[str] = MODES,
                   candidate_kinds: Sequence[str] = CANDIDATE_KINDS) -> LamaDataset | BearDataset:
    """A cloze benchmark ('lama', 'bear', 'bear-big' or a folder, ``dataset_kind``) read and checked with no model:
    ``relations`` (and LAMA's ``sources``), at most ``max_facts`` per relation sampled with ``seed``, to be queried in
    ``modes`` over ``candidate_kinds``; what a BEAR-format data set cannot honour is refused by name, as is data giving
    no query (a bad file is an error naming it)."""
    check_modes(modes, candidate_kinds)
    kind = dataset_kind(dataset)
    if kind == "kg":
        raise ValueError(f"{dataset}: not 'lama', 'bear', 'bear-big', nor a folder holding {RELATIONS_FILE} (LAMA) "
                         f"or {METADATA_FILE} (BEAR format)")
    if kind == "bear":
        _refuse_lama_only_selection(dataset, sources, modes, candidate_kinds)
        return load_bear_dataset(dataset, data_dir, relations=relations, max_instances=max_facts, seed=seed)
    data = load_lama(dataset, data_dir, sources=sources, relations=relations, max_facts=max_facts, seed=seed)
    if "common-vocab" in candidate_kinds and not data.common_vocab:
        raise KGFormatError(Path(data.path) / COMMON_VOCAB_FILE, None,
                            "missing or empty: the common-vocabulary candidates need it (or rank the relation's objects only)")
    check_lama_queries(data, modes)
    return data


def _refuse_lama_only_selection(dataset, sources, modes, candidate_kinds) -> None:
    """ValueError naming what a BEAR-format data set (templates and each relation's answers only) cannot honour."""
    if "relation" not in candidate_kinds:
        raise ValueError(f"{dataset}: candidate kinds {list(candidate_kinds)}: a BEAR-format data set ranks each "
                         "relation's answers only (kind 'relation'); common-vocab is LAMA's")
    if sources:
        raise ValueError(f"{dataset}: sources {list(sources)} are LAMA's (TREx, Google_RE, Squad); a BEAR-format "
                         "data set has none: drop sources, or probe LAMA")
    if "template" not in modes:
        raise ValueError(f"{dataset}: modes {list(modes)}: a BEAR-format data set has templates only (mode "
                         "'template'); template-free (evidence sentences) is LAMA's")
