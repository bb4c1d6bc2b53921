"""Find named data sets (`wn18rr`, `bear`, ...) on disk: the folders searched and what marks each set."""

from __future__ import annotations

import os
from pathlib import Path

from kg_data.errors import KGNotFoundError

DATA_DIR_ENV = "DEER_DATA_DIR"
CACHE_DIR_ENV = "DEER_CACHE_DIR"
# Sub-folder of the data dir for each named data set.
NAMED_DATASETS = {"wn18rr": "wn18rr", "bear": "bear/BEAR", "bear-big": "bear/BEAR-big", "lama": "lama", "wikidata5m": "wikidata5m"}
# The file that marks each named data set's folder (``deer data fetch`` installs it last).
MARKERS = {"wn18rr": "entity2text.txt", "bear": "metadata_relations.json", "bear-big": "metadata_relations.json",
           "lama": "relations.jsonl", "wikidata5m": "wikidata5m_transductive_test.txt"}
# Data sets not pinned by checksum here: `deer data fetch` says where to get them instead of downloading.
MANUAL_DATASETS = {"wikidata5m": (
    "Wikidata5M (Wang et al. 2021, KEPLER; CC BY 4.0) is published at https://deepgraphlearning.github.io/project/wikidata5m "
    "as three archives: wikidata5m_transductive.tar.gz (the split, about 168 MB), wikidata5m_alias.tar.gz (entity and "
    "relation aliases, about 197 MB) and wikidata5m_text.txt.gz (descriptions, about 1.04 GB). Extract all three into {folder} (it then holds wikidata5m_entity.txt, wikidata5m_relation.txt, wikidata5m_text.txt "
    "and wikidata5m_transductive_{{train,valid,test}}.txt), or pass that folder as --kg. Its files are not pinned by "
    "checksum here, so `deer data fetch wikidata5m` does not download them.")}


def cache_root() -> Path:
    """The one folder the toolkit keeps things in (``$DEER_CACHE_DIR``, else ``~/.cache/deer``)."""
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
    """Data roots in search order: --data-dir alone when given (a folder named on purpose is not swapped for
    another copy), else $DEER_DATA_DIR, then ``default_data_dirs``."""
    if data_dir:
        return [Path(data_dir).expanduser()]
    roots = [Path(root).expanduser() for root in (os.environ.get(DATA_DIR_ENV),) if root]
    return list(dict.fromkeys(roots + default_data_dirs()))


def find_dataset(name: str, data_dir: str | Path | None = None) -> Path:
    """Folder of a named data set; KGNotFoundError names the folder given, else lists every place tried."""
    sub = NAMED_DATASETS[name]
    tried, misnamed = [], []
    for root in candidate_data_dirs(data_dir):
        # Accept both a data root (holding wn18rr/) and the data set folder itself.
        for folder in (root / sub, root):
            tried.append(folder)
            if _looks_like(name, folder):
                if folder == root and (why := _misnamed(name, folder)):
                    misnamed.append(why)
                    continue
                return folder
    if data_dir and misnamed:
        raise ValueError(f"--data-dir {misnamed[0]}. Pass the data root that holds {sub}/ for '{name}', or ask for the "
                         "data set that folder is.")
    if data_dir:
        root, marker = Path(data_dir).expanduser(), MARKERS[name]
        raise KGNotFoundError(
            f"--data-dir {root} holds no '{name}' data set (expected {root / sub / marker}, or {root / marker}); "
            f"a data folder given is the only one searched. Fetch it there with `deer data fetch {name} --data-dir {root}`; "
            "`deer data` lists where the data sets are found without one.")
    listing = "\n  ".join(str(p) for p in tried) + "".join(f"\n  (passed over: {note})" for note in misnamed)
    raise KGNotFoundError(f"Could not find the '{name}' data. Looked in:\n  {listing}\n"
                          f"Pass --data-dir DIR (a folder holding '{sub}/') or set {DATA_DIR_ENV}.")


def _looks_like(name: str, folder: Path) -> bool:
    return (folder / MARKERS[name]).is_file()


def _misnamed(name: str, folder: Path) -> str | None:
    """Why ``folder``, holding ``name``'s marker, is not taken as ``name``'s: another data set shares the marker (BEAR
    and BEAR-big) and the folder does not carry ``name``'s folder name; None when it may be taken."""
    shared = [other for other in NAMED_DATASETS if other != name and MARKERS[other] == MARKERS[name]]
    own, folder_name = Path(NAMED_DATASETS[name]).name, folder.resolve().name
    if not shared or folder_name.lower() == own.lower():
        return None
    for other in shared:
        if folder_name.lower() == Path(NAMED_DATASETS[other]).name.lower():
            return (f"{folder} is the '{other}' data set's folder ({NAMED_DATASETS[other]}), not the '{name}' data set's "
                    f"({NAMED_DATASETS[name]}); the two share their marker file {MARKERS[name]}")
    return (f"{folder} holds {MARKERS[name]} but is named '{folder_name}', not '{own}': '{name}' shares that marker file with "
            f"{', '.join(repr(other) for other in shared)}, so a data set's own folder is known by its name")


def describe_datasets(data_dir: str | Path | None = None) -> list[dict]:
    """Rows for `deer data`: each named data set, where it was found (or not), and whether a probe can use it."""
    rows = []
    for name in NAMED_DATASETS:
        try:
            path = str(find_dataset(name, data_dir))
        except (KGNotFoundError, ValueError):  # ValueError: --data-dir is another data set's folder
            path = ""
        rows.append({"name": name, "found": bool(path), "path": path, "usable": bool(path), "note": ""})
    return rows
