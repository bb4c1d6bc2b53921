"""Checks made before any model is loaded: a bad option, device, model folder or output folder is refused at once
with one line naming the option and its value (or the file).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from deer.backends.models import BUNDLED_MODELS, ModelUnavailableError, converted_folder
from deer.base.errors import (  # defined apart so that any core module can use them; imported from here too
    OptionError,
    check_count,
    check_path,
    check_text,
)
from kg_data.errors import DeerWarning, warn  # noqa: F401  (defined with the data readers, which warn too)

DTYPES = ("auto", "float32", "bfloat16", "float16")


def check_run_options(*, subset=None, seed=0, k_shot=None, token_budget=None, dtype=None, device=None,
                      max_instances=None) -> None:
    """The numeric and named options shared by the probes (those given; None is not checked)."""
    for option, value, minimum in (("subset", subset, 1), ("seed", seed, 0), ("k_shot", k_shot, 0),
                                   ("token_budget", token_budget, 1), ("max_instances", max_instances, 1)):
        check_count(option, value, minimum, allow_none=option != "seed")
    if dtype is not None:
        check_text("dtype", dtype, DTYPES)
    if device is not None:
        check_device(device)


def check_device(device: str) -> None:
    """``auto``, or a torch device that exists here (``cuda:1`` on a one-GPU machine does not)."""
    if device == "auto":
        return
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise OptionError("device", device, "not a torch device; use auto, cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only torch build" if torch.version.cuda is None else "no CUDA device visible"
            raise OptionError("device", device, f"CUDA is not available here ({build}); use --device auto or cpu")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise OptionError("device", device, f"this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise OptionError("device", device, "MPS is not available here; use --device auto or cpu")
    elif parsed.type not in ("cpu", "mps"):
        raise OptionError("device", device, "only cpu, cuda and mps devices are supported")


OUT_PROBE_BYTES = 1 << 16  # written (and removed) in the out folder before a run: a disk without room fails now


def check_out_folder(out, option: str = "out") -> None:
    """The folder can be created (or exists) and takes ``OUT_PROBE_BYTES`` of data (not only a file's name: a full
    disk fails here, not after the run), checked without leaving anything behind."""
    if out is None:
        return
    check_path(option, out)
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise OptionError(option, str(out), "exists and is not a folder")
    existing = next(folder for folder in (path, *path.parents) if folder.exists())
    if not existing.is_dir():
        raise OptionError(option, str(out), f"{existing} is a file, so the folder cannot be created there")
    try:
        with tempfile.TemporaryFile(dir=existing) as probe:
            probe.write(bytes(OUT_PROBE_BYTES))
            probe.flush()
            os.fsync(probe.fileno())  # the space taken now, not at some later write-back
    except OSError as error:
        raise OptionError(option, str(out), f"cannot write in {existing} ({error.strerror or error})") from None


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model", "spiece.model")


def check_model_folder(folder: str | Path) -> None:
    """A local Hugging Face folder holds a readable config, whole weights and a tokenizer (else ModelUnavailableError)."""
    folder = Path(folder)
    config = folder / "config.json"
    if not config.exists():
        raise ModelUnavailableError(f"{folder}: no config.json, so it is not a Hugging Face model folder")
    try:
        if not isinstance(json.loads(config.read_text(encoding="utf-8")), dict):
            raise ValueError("not a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ModelUnavailableError(f"{config}: not a readable JSON config ({error})") from None
    present = [name for name in WEIGHT_FILES if (folder / name).exists()]
    if not present:
        raise ModelUnavailableError(f"{folder}: no weights ({' or '.join(WEIGHT_FILES[::2])})")
    for name in present:
        if name == "model.safetensors":
            check_safetensors(folder / name)
        elif name == "model.safetensors.index.json":
            for shard in sorted(set(_index_shards(folder / name))):
                if not (folder / shard).exists():
                    raise ModelUnavailableError(f"{folder / name}: names the shard {shard}, which is missing")
                check_safetensors(folder / shard)
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise ModelUnavailableError(f"{folder}: no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...)")


def _index_shards(index: Path) -> list[str]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return [str(shard) for shard in weight_map.values()]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ModelUnavailableError(f"{index}: not a readable shard index ({error})") from None


def check_safetensors(path: Path) -> None:
    """The file is as long as its header says (8-byte length, JSON header, then the tensors)."""
    size = path.stat().st_size
    broken = f"{path}: truncated or corrupt safetensors file ({size} bytes"
    advice = "download or save the model again"
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ModelUnavailableError(f"{broken}); {advice}")
        header_length = int.from_bytes(head, "little")
        if 8 + header_length > size:
            raise ModelUnavailableError(f"{broken}, its header alone needs {8 + header_length}); {advice}")
        try:
            header = json.loads(handle.read(header_length))
            end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError):
            raise ModelUnavailableError(f"{broken}, unreadable header); {advice}") from None
    if 8 + header_length + end > size:
        raise ModelUnavailableError(f"{broken}, its tensors need {8 + header_length + end}); {advice}")


def check_model_source(model) -> None:
    """A model given by name: a local (or converted bundled) folder is checked now, a missing path refused."""
    if not isinstance(model, (str, os.PathLike)):
        return
    name = str(model)
    if name in BUNDLED_MODELS:
        converted = converted_folder(name)
        if (converted / "config.json").exists():
            check_model_folder(converted)
        return
    path = Path(name).expanduser()
    if path.is_dir():
        check_model_folder(path)
    elif path.exists():
        raise ModelUnavailableError(f"{name}: a file, not a model folder (GGUF files: see `deer models`)")
    elif name.startswith((".", "/", "~")):
        raise ModelUnavailableError(f"{name}: no such model folder")
