"""Find named data sets (`wn18rr`, `bear`, ...) on disk: the folders searched and what marks each set."""

from __future__ import annotations

import os
from pathlib import Path

from kg_data.errors import KGNotFoundError

DATA_DIR_ENV = "DEER_DATA_DIR"
CACHE_DIR_ENV = "DEER_CACHE_DIR"
# Sub-folder of the data dir for each named data set.
NAMED_DATASETS = {"wn18rr": "wn18rr", "bear": "bear/BEAR", "bear-big": "bear/BEAR-big", "lama": "lama"}


def cache_root() -> Path:
    """The one folder the toolkit keeps things in: fetched data, converted models, embedding and
    score stores, error logs (``$DEER_CACHE_DIR``, else ``~/.cache/deer``)."""
    return Path(os.environ.get(CACHE_DIR_ENV, Path.home() / ".cache" / "deer")).expanduser()


def fetched_data_root() -> Path:
    """Where ``deer fetch`` puts data sets when no folder is named: ``<cache root>/data``."""
    return cache_root() / "data"


def default_data_dirs() -> list[Path]:
    """`shared/data` next to or above the current folder and this checkout; the fetched data."""
    roots = []
    for base in (Path.cwd(), Path(__file__).resolve().parent.parent):
        roots += [base / "shared" / "data", base.parent / "shared" / "data"]
    return roots + [fetched_data_root()]


def candidate_data_dirs(data_dir: str | Path | None = None) -> list[Path]:
    """Data roots in the order they are searched: --data-dir, $DEER_DATA_DIR, then defaults.

    The defaults are `shared/data` next to (or above) the current folder and this checkout,
    and `<cache root>/data` (``cache_root``) for data fetched on a networked machine.
    """
    roots: list[Path] = []
    if data_dir:
        roots.append(Path(data_dir).expanduser())
    if os.environ.get(DATA_DIR_ENV):
        roots.append(Path(os.environ[DATA_DIR_ENV]).expanduser())
    roots += default_data_dirs()
    unique: list[Path] = []
    for root in roots:
        if root not in unique:
            unique.append(root)
    return unique


def find_dataset(name: str, data_dir: str | Path | None = None) -> Path:
    """Folder of a named data set; KGNotFoundError lists every place that was tried."""
    sub = NAMED_DATASETS[name]
    tried = []
    for root in candidate_data_dirs(data_dir):
        # Accept both a data root (holding wn18rr/) and the data set folder itself.
        for folder in (root / sub, root):
            tried.append(folder)
            if _looks_like(name, folder):
                return folder
    listing = "\n  ".join(str(p) for p in tried)
    raise KGNotFoundError(
        f"Could not find the '{name}' data. Looked in:\n  {listing}\n"
        f"Pass --data-dir DIR (a folder holding '{sub}/') or set {DATA_DIR_ENV}."
    )


def _looks_like(name: str, folder: Path) -> bool:
    markers = {
        "wn18rr": "entity2text.txt",
        "bear": "metadata_relations.json",
        "bear-big": "metadata_relations.json",
        "lama": "relations.jsonl",
    }
    return (folder / markers[name]).is_file()


# Named data sets found on disk that no probe reads yet, and why (``deer data`` says so).
NOT_YET_USABLE: dict[str, str] = {}  # data sets found but not yet readable (none since the LAMA reader)


def describe_datasets(data_dir: str | Path | None = None) -> list[dict]:
    """Rows for `deer data`: each named data set, where it was found (or not), and whether a probe can use it."""
    rows = []
    for name in NAMED_DATASETS:
        try:
            row = {"name": name, "found": True, "path": str(find_dataset(name, data_dir))}
        except KGNotFoundError:
            row = {"name": name, "found": False, "path": ""}
        row["usable"] = row["found"] and name not in NOT_YET_USABLE
        row["note"] = NOT_YET_USABLE.get(name, "")
        rows.append(row)
    return rows
