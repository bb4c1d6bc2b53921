"""What a run folder holds ranks *for* (:class:`RunSpec`, ``run_spec.json``), and default folder names."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

RUN_SPEC_FILE = "run_spec.json"
DIGEST_CHARS = 10


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def queries_fingerprint(queries) -> str:
    """Hash of the query triples, the candidates (in order) and whether each query's own head is left out."""
    import numpy as np

    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(queries.triples, dtype=np.int64).tobytes())
    digest.update(b"\x1e")
    digest.update(np.ascontiguousarray(queries.candidates, dtype=np.int64).tobytes())
    if getattr(queries, "exclude_head", False):  # ranks among other competitors (absent: the digest as before)
        digest.update(b"\x1eexclude_head")
    return digest.hexdigest()[:16]


def model_identity(loaded) -> dict:
    """The model's side of every run identity (a run spec's, a store's): weights, vocabulary, dtype and BOS policy."""
    from deer.backends.tokenization import bos_policy

    return {"model_fingerprint": str(loaded.fingerprint), "tokenizer_fingerprint": str(loaded.tokenizer_fingerprint),
            "dtype": str(loaded.dtype), "bos": json.loads(_canonical(bos_policy(loaded.tokenizer)))}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything that determines a probe's ranks on a set of queries (device and batch sizes aside)."""

    model_fingerprint: str
    tokenizer_fingerprint: str
    dtype: str
    kg_fingerprint: str
    split: str
    subset: int | None
    subset_seed: int | None
    queries: str
    templates: dict
    bos: dict

    def __hash__(self) -> int:  # dict fields: hash the canonical JSON instead
        return hash(self.to_json())

    @classmethod
    def build(cls, queries, loaded, templates) -> RunSpec:
        """The spec of probing ``queries`` with ``loaded`` and ``templates``."""
        seed = queries.subset_seed
        return cls(**model_identity(loaded), kg_fingerprint=queries.kg.fingerprint(), split=str(queries.split),
                   subset=len(queries) if seed is not None else None, subset_seed=None if seed is None else int(seed),
                   queries=queries_fingerprint(queries), templates=json.loads(_canonical(templates.to_metadata())))

    def to_dict(self) -> dict:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def to_json(self) -> str:
        return _canonical(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> RunSpec:
        """Read a stored spec; fields it lacks (an older format) become None and so differ."""
        if not isinstance(data, dict):
            raise ValueError(f"a run spec is a JSON object, got {type(data).__name__}")
        return cls(**{field.name: data.get(field.name) for field in dataclasses.fields(cls)})

    @classmethod
    def read(cls, folder: Path) -> RunSpec | None:
        """The spec stored in ``folder`` (None if it has none)."""
        from deer.platform.read_back import read_json_object

        path = Path(folder) / RUN_SPEC_FILE
        return cls.from_dict(read_json_object(path)) if path.exists() else None

    def write(self, folder: Path) -> None:
        from deer.base.files import write_json

        write_json(Path(folder) / RUN_SPEC_FILE, self.to_dict(), "the run spec its queries were ranked under")

    def differences(self, other: RunSpec) -> dict[str, tuple[Any, Any]]:
        """``{field: (self's value, other's value)}`` for every field that differs (a dict's down to the key)."""
        found: dict[str, tuple[Any, Any]] = {}
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if _canonical(mine) == _canonical(theirs):
                continue
            if isinstance(mine, dict) and isinstance(theirs, dict):
                for key in sorted(set(mine) | set(theirs)):
                    if _canonical(mine.get(key)) != _canonical(theirs.get(key)):
                        found[f"{field.name}.{key}"] = (mine.get(key), theirs.get(key))
            else:
                found[field.name] = (mine, theirs)
        return found

    def describe_differences(self, other: RunSpec, names: tuple[str, str] = ("this run", "the folder")) -> str:
        """One line per differing field: ``k_shot: this run 3, the folder 2``."""
        return "; ".join(f"{field}: {names[0]} {_short(mine)}, {names[1]} {_short(theirs)}"
                         for field, (mine, theirs) in self.differences(other).items())

    def digest(self, exclude: tuple[str, ...] = ()) -> str:
        """Short hash of the spec (less the ``exclude`` fields)."""
        payload = {k: v for k, v in self.to_dict().items() if k not in exclude}
        return hashlib.sha256(_canonical(payload).encode()).hexdigest()[:DIGEST_CHARS]


def _short(value, limit: int = 60) -> str:
    from kg_data.task import shorten

    return shorten(repr(value) if isinstance(value, str) else _canonical(value), limit)


def _label(name: str) -> str:
    """A path's last part, or a hub id with '/' spelled '--'."""
    return Path(name).name if os.path.sep in name else name.replace("/", "--")


# Spelled out in the readable part of a folder name, so left out of its digest.
NAMED_FIELDS = ("split", "subset")


def run_folder_name(kg: str, model: str, spec: RunSpec | None = None, *, split: str | None = None,
                    subset: int | None = None) -> str:
    """The default name of a run folder: ``KG-SPLIT-SUBSET|all-MODEL-DIGEST``, DIGEST hashing the spec's other fields;
    without a ``spec`` (the BEAR data set), from ``split``/``subset`` and no digest."""
    if spec is not None:
        split, subset = spec.split, spec.subset
    name = f"{_label(kg)}-{split}-{subset if subset is not None else 'all'}-{_label(model)}"
    return name if spec is None else f"{name}-{spec.digest(exclude=NAMED_FIELDS)}"


def spec_folder(folder: Path | None, runs_dir: Path, kg: str, model: str, spec: RunSpec, suffix: str = "",
                check: bool = True) -> Path:
    """``folder``, or the default one for ``spec`` under ``runs_dir``; with ``check``, another spec's is refused now."""
    out = Path(folder) if folder else Path(runs_dir) / (run_folder_name(kg, model, spec) + suffix)
    if check:
        check_folder_spec(out, spec)
    return out


def check_folder_spec(folder: Path, spec: RunSpec) -> None:
    """Raise ValueError unless ``folder`` is new or holds runs of exactly ``spec``."""
    folder = Path(folder)
    stored = RunSpec.read(folder)
    if stored is None:
        # Ranks, or another kind of run's metrics/metadata, that this write would merge into unchecked.
        held = sorted(p.name for p in folder.glob("*") if p.name.startswith("ranks.") or p.name in ("metrics.json", "metadata.json"))
        if held:
            raise ValueError(f"{folder} holds {', '.join(held)} written without a run spec ({RUN_SPEC_FILE}), "
                             "so they cannot be checked against this run; use another --out folder "
                             "(or leave --out out for a fresh default one)")
        return
    if stored.differences(spec):
        raise ValueError(f"{folder} holds ranks made with another run spec ({spec.describe_differences(stored)}); "
                         "ranks of different settings never share a folder: use another --out folder "
                         "(or leave --out out: the default folder name is made from the spec)")
