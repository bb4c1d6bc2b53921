"""Download the public data sets pinned in ``manifest.json``: each file is checked against its size and sha256 before
it is renamed into place from a staging ``.part`` file, and the marker ``find_dataset`` looks for comes last, so a
half-fetched data set is never found.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from contextlib import suppress
from pathlib import Path

from kg_data.errors import KGNotFoundError
from kg_data.locate import DATA_DIR_ENV, MANUAL_DATASETS, NAMED_DATASETS, fetched_data_root, find_dataset
from kg_data.locks import held_lock

MANIFEST_PATH = Path(__file__).with_name("manifest.json")
BASE_URL_ENV = "DEER_DATA_BASE_URL"
OFFLINE_ENV = "DEER_OFFLINE"
HUB_OFFLINE_ENVS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")  # the Hugging Face convention, honoured too
STAGING_DIR = ".fetching"
TIMEOUT_S = 60
CHUNK = 1 << 16


class DataFetchError(KGNotFoundError):
    """A data set could not be fetched (offline, network failure, or a checksum mismatch)."""


def load_manifest() -> dict:
    """{name: {"repo", "commit", "license", "marker", "files": [{"path", "url", "bytes", "sha256"}]}}."""
    return json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))


def data_root(data_dir: str | Path | None = None) -> Path:
    """Where data sets are fetched to: ``data_dir``, else $DEER_DATA_DIR, else ``fetched_data_root``."""
    return Path(data_dir or os.environ.get(DATA_DIR_ENV) or fetched_data_root()).expanduser()


def _truthy(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def offline_reason() -> str | None:
    """Why fetching is off ('DEER_OFFLINE=1', 'HF_HUB_OFFLINE=1'), or None; $DEER_OFFLINE=0 turns it on again."""
    if os.environ.get(OFFLINE_ENV, "").strip():
        return f"{OFFLINE_ENV}={os.environ[OFFLINE_ENV]}" if _truthy(os.environ[OFFLINE_ENV]) else None
    return next((f"{name}={os.environ[name]}" for name in HUB_OFFLINE_ENVS if _truthy(os.environ.get(name, ""))), None)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_valid(path: Path, spec: dict) -> bool:
    return path.is_file() and path.stat().st_size == spec["bytes"] and sha256_of(path) == spec["sha256"]


def _entry(name: str, manifest: dict | None) -> dict:
    manifest = manifest if manifest is not None else load_manifest()
    if name not in manifest or name not in NAMED_DATASETS:
        raise ValueError(f"unknown data set '{name}'; known: {', '.join(n for n in manifest if n in NAMED_DATASETS)}")
    return manifest[name]


def manual_instructions(name: str, data_dir=None) -> str:
    """Where to get a data set that is not pinned by checksum (``MANUAL_DATASETS``) and where to put it."""
    return MANUAL_DATASETS[name].format(folder=data_root(data_dir) / NAMED_DATASETS[name])


def _how_to_get(name: str, entry: dict, root: Path) -> str:
    folder = root / NAMED_DATASETS[name]
    paths = [spec["path"] for spec in entry["files"]]
    shown = ", ".join(paths[:6]) + (f", ... ({len(paths)} files; all listed in kg_data/manifest.json)" if len(paths) > 6 else "")
    return (f"'{name}' comes from https://github.com/{entry['repo']} at commit {entry['commit']}. "
            f"Put its files in {folder} (or pass --data-dir DIR / set {DATA_DIR_ENV} to a folder holding "
            f"'{NAMED_DATASETS[name]}/'), or run `deer data fetch {name}` on a machine with network access. "
            f"Expected under the data root: {shown}.")


def _download(url: str, part: Path, spec: dict, progress) -> None:
    """Fill ``part`` from ``url``, resuming with a Range request when a partial file is there."""
    start = part.stat().st_size if part.is_file() else 0
    if start >= spec["bytes"]:
        start = 0  # nothing left to resume (or a stale, too long file): start over
    request = urllib.request.Request(url, headers={"User-Agent": "deer-data-fetch"})
    if start:
        request.add_header("Range", f"bytes={start}-")
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not start:
            raise
        part.unlink()  # the server refused our range: restart from zero
        return _download(url, part, spec, progress)
    with response:
        if response.status != 206:
            start = 0  # the server ignored the Range header and sends the whole file
        progress.update(start)
        with open(part, "ab" if start else "wb") as out:
            written = start
            for block in iter(lambda: response.read(CHUNK), b""):
                out.write(block)
                written += len(block)
                progress.update(len(block))
                # Never read much past the expected size: a wrong file is refused by its checksum anyway.
                if written > spec["bytes"]:
                    break
        # http.client's read(n) returns b"" on a dropped connection instead of raising, so a short
        # body is only noticed here: bytes the server announced (Content-Length) never came.
        if response.length:
            raise ConnectionError(f"connection closed after {written} of {spec['bytes']} bytes")


def _part_path(root: Path, spec: dict) -> Path:
    """Beside its destination: the final rename is atomic."""
    final = root / spec["path"]
    return final.parent / STAGING_DIR / (final.name + ".part")


def _fetch_file(name: str, entry: dict, spec: dict, root: Path, base_url: str | None, progress) -> None:
    part = _part_path(root, spec)
    part.parent.mkdir(parents=True, exist_ok=True)
    url = f"{base_url.rstrip('/')}/{urllib.parse.quote(spec['path'])}" if base_url else spec["url"]
    resumed = part.is_file() and 0 < part.stat().st_size < spec["bytes"]
    try:
        if _is_valid(part, spec):  # complete and verified, but not yet renamed (e.g. the held-back marker)
            progress.update(spec["bytes"])
        else:
            _download(url, part, spec, progress)
    except (OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", None) or error
        raise DataFetchError(f"Could not download {spec['path']} from {url}: {reason}. Fetching again resumes it.\n"
                             f"{_how_to_get(name, entry, root)}") from None
    if not _is_valid(part, spec):
        got = sha256_of(part)
        part.unlink()
        if resumed:
            # The kept half may not belong to this file; one clean download before refusing.
            return _fetch_file(name, entry, spec, root, base_url, progress)
        raise DataFetchError(f"Checksum mismatch for {spec['path']} from {url}: expected sha256 {spec['sha256']} "
                             f"({spec['bytes']} bytes), got {got}. The file was deleted; nothing was installed.")
    os.replace(part, root / spec["path"])


def _remove_empty_folders(root: Path, files: list[dict]) -> None:
    """Remove the staging folders, then every folder on the way to a file that is left empty."""
    folders = {_part_path(root, spec).parent for spec in files}
    folders |= {parent for spec in files for parent in (root / spec["path"]).parents if root in parent.parents}
    for folder in sorted(folders, key=lambda path: len(path.parts), reverse=True):  # the deepest first
        with suppress(OSError):  # absent, or not empty
            folder.rmdir()


def fetch_dataset(name: str, data_dir: str | Path | None = None, base_url: str | None = None,
                  offline: bool | None = None, show_progress: bool = True, manifest: dict | None = None) -> Path:
    """Download data set ``name`` into the data root and return its folder; valid files there are kept.  ``base_url``
    (or $DEER_DATA_BASE_URL) replaces the upstream: URL = base_url + "/" + path.  Raises DataFetchError when offline,
    on network failure, or on a checksum mismatch."""
    if name in MANUAL_DATASETS:
        raise DataFetchError(manual_instructions(name, data_dir))
    entry = _entry(name, manifest)
    root = data_root(data_dir)
    base_url = base_url or os.environ.get(BASE_URL_ENV) or None
    offline = offline_reason() is not None if offline is None else offline
    # The marker last: until it is in place, find_dataset does not see the data set.
    files = sorted(entry["files"], key=lambda spec: spec["path"] == entry["marker"])
    missing = [spec for spec in files if not _is_valid(root / spec["path"], spec)]
    if missing and offline:
        raise DataFetchError(f"The '{name}' data set is missing ({len(missing)} of {len(files)} files) and fetching is off "
                             f"({offline_reason() or 'offline=True'}; {OFFLINE_ENV}=0 turns it on).\n"
                             f"{_how_to_get(name, entry, root)}")
    from tqdm import tqdm

    # One process fetches a data set at a time (DDP ranks, Ray tasks): the others wait, then find its files valid.
    with held_lock(root / f".fetch-{name}.lock", f"waiting for another process fetching {name}"):
        missing = [spec for spec in files if not _is_valid(root / spec["path"], spec)]
        marker = next(spec for spec in files if spec["path"] == entry["marker"])
        if missing and marker not in missing:
            # Repairing a data set: hide it (marker back to staging) until every file is in place.
            _part_path(root, marker).parent.mkdir(parents=True, exist_ok=True)
            os.replace(root / marker["path"], _part_path(root, marker))
            missing.append(marker)
        with tqdm(total=sum(spec["bytes"] for spec in missing), unit="B", unit_scale=True, desc=f"fetching {name}",
                  file=sys.stderr, disable=not show_progress or not missing) as progress:
            try:
                for spec in missing:
                    _fetch_file(name, entry, spec, root, base_url, progress)
            finally:
                _remove_empty_folders(root, files)
    return root / NAMED_DATASETS[name]


def ensure_dataset(name: str, data_dir: str | Path | None = None) -> Path:
    """``find_dataset``, else fetch the data set into the data root (unless $DEER_OFFLINE is set)."""
    try:
        return find_dataset(name, data_dir)
    except KGNotFoundError as not_found:
        if name in MANUAL_DATASETS:
            raise KGNotFoundError(f"{not_found}\n{manual_instructions(name, data_dir)}") from None
        entry, root = _entry(name, None), data_root(data_dir)
        if reason := offline_reason():
            raise DataFetchError(f"{not_found}\nFetching is off ({reason}; {OFFLINE_ENV}=0 turns it on). "
                                 f"{_how_to_get(name, entry, root)}") from None
        print(f"{name} not found locally; fetching it from {entry['repo']}@{entry['commit']} into "
              f"{root / NAMED_DATASETS[name]} (set {OFFLINE_ENV}=1 to prevent)", file=sys.stderr)
        return fetch_dataset(name, data_dir)


def named_or_folder(name_or_path: str | Path, names: tuple[str, ...], data_dir: str | Path | None, marker: str,
                    what: str) -> tuple[str, Path]:
    """(name, folder) of a data set named in ``names`` or of a folder, which must hold ``marker``."""
    if isinstance(name_or_path, str) and name_or_path.lower() in names:
        return name_or_path.lower(), ensure_dataset(name_or_path.lower(), data_dir)
    folder = user_folder(name_or_path)
    if not (folder / marker).is_file():
        raise KGNotFoundError(f"{folder} holds no {marker}; not a {what}")
    return folder.name, folder


def user_folder(path: str | Path) -> Path:
    """A folder a user named, absolute and without '..', so its name says which folder it was ('.' named a KG '')."""
    return Path(os.path.abspath(Path(path).expanduser()))
