"""What identifies a model and its tokenizer in every store key, run spec and metadata: hashes of what computes,
and the cheap stamp that says when they must be taken again."""

from __future__ import annotations

import hashlib
import json
import os

# Fastest exact way measured (benchmarks/bench_fingerprint.py): sha1 with the CPU's SHA extensions.  Not a
# security hash here: it tells checkpoints apart, and the fingerprint keeps 64 bits of it.
FINGERPRINT_ALGORITHM = "sha1"
FINGERPRINT_CHUNK_BYTES = 32 << 20  # big tensors are hashed in pieces of this size, in parallel


def _raw_bytes(tensor):
    """The tensor's memory as a flat uint8 array (its bytes, never a dtype conversion)."""
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)  # cpu(), contiguous(): no copy where none is needed
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return flat.view(torch.uint8).numpy()


def tensors_fingerprint(named_tensors, algorithm: str = FINGERPRINT_ALGORITHM, threads: int | None = None,
                        chunk_bytes: int = FINGERPRINT_CHUNK_BYTES) -> str:
    """Hash of every byte of every tensor, with its name, shape and dtype (hex, 16 characters), in ``chunk_bytes``
    pieces on ``threads`` threads (default: one per CPU, at most 8); tensors that must be copied (on a GPU,
    strided) are copied one at a time, so memory stays bounded."""
    from concurrent.futures import ThreadPoolExecutor, wait

    import torch

    named_tensors = list(named_tensors)
    workers = min(8, os.cpu_count() or 1) if threads is None else threads
    step = max(1, int(chunk_bytes))
    digests: dict[tuple, list] = {}  # one entry per distinct memory region: its pieces' hashes (futures)
    keys = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # hashlib releases the GIL on large buffers
        for _, tensor in named_tensors:
            key = (tensor.device.type, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))
            keys.append(key)
            if key in digests:
                continue
            data = memoryview(_raw_bytes(tensor))
            pieces = [data[start : start + step] for start in range(0, len(data), step)] or [data]
            digests[key] = [pool.submit(hashlib.new, algorithm, piece) for piece in pieces]
            if tensor.device.type != "cpu" or not tensor.is_contiguous() or tensor.dtype == torch.bool:
                wait(digests[key])  # _raw_bytes copied it: finish before the next copy is made
    outer = hashlib.new(algorithm)
    outer.update(f"tensors-{algorithm}-chunk{step}".encode())
    for (name, tensor), key in zip(named_tensors, keys, strict=True):
        tensor_digest = hashlib.new(algorithm)
        for piece in digests[key]:
            tensor_digest.update(piece.result().digest())
        outer.update(f"\x1e{name}\x1f{tuple(tensor.shape)}\x1f{tensor.dtype}\x1f".encode())
        outer.update(tensor_digest.digest())
    return outer.hexdigest()[:16]


def files_fingerprint(paths, algorithm: str = FINGERPRINT_ALGORITHM, threads: int | None = None,
                      chunk_bytes: int = FINGERPRINT_CHUNK_BYTES) -> str:
    """Hash of every byte of the files (a model's weight files, read as stored: an engine that loads its own
    weights is fingerprinted without loading them), with their names (hex, 16 characters); each file is read
    in ``chunk_bytes`` pieces hashed on ``threads`` threads (default: one per CPU, at most 8)."""
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    step = max(1, int(chunk_bytes))
    workers = min(8, os.cpu_count() or 1) if threads is None else threads
    outer = hashlib.new(algorithm)
    outer.update(f"files-{algorithm}-chunk{step}".encode())
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # hashlib releases the GIL on large buffers
        for path in map(Path, paths):
            pieces = []
            with open(path, "rb") as handle:
                for piece in iter(lambda handle=handle: handle.read(step), b""):
                    pieces.append(pool.submit(hashlib.new, algorithm, piece))
                    if len(pieces) > 2 * workers:  # a few pieces in memory at a time, however large the file
                        pieces[-2 * workers - 1].result()
            digest = hashlib.new(algorithm)
            for piece in pieces:
                digest.update(piece.result().digest())
            outer.update(f"\x1e{path.name}\x1f{path.stat().st_size}\x1f".encode())
            outer.update(digest.digest())
    return outer.hexdigest()[:16]


# Config entries that say how a model was saved, loaded or asked to return its outputs, not what it computes
# (also every "_"-prefixed one: the folder it came from, the attention back-end).
CONFIG_ENTRIES_NOT_HASHED = frozenset({"architectures", "dtype", "torch_dtype", "transformers_version", "use_cache",
                                       "output_attentions", "output_hidden_states", "return_dict"})


def config_fingerprint(model) -> str:
    """Hash of the model's configuration as it computes ('' for a model without a transformers config)."""
    to_dict = getattr(getattr(model, "config", None), "to_dict", None)
    if not callable(to_dict):
        return ""

    def computing(value):
        if isinstance(value, dict):  # nested configs (a multimodal model's text_config) alike
            return {key: computing(item) for key, item in value.items()
                    if not str(key).startswith("_") and key not in CONFIG_ENTRIES_NOT_HASHED}
        return value

    return hashlib.sha256(json.dumps(computing(to_dict()), sort_keys=True, default=str).encode()).hexdigest()[:16]


def model_fingerprint(model) -> str:
    """Identifies what the model computes, wherever it was loaded from: its weights' and config's hashes."""
    weights, config = tensors_fingerprint(model.state_dict().items()), config_fingerprint(model)
    return hashlib.sha256(f"{weights}+config-{config}".encode()).hexdigest()[:16] if config else weights


def weights_stamp(model) -> tuple:
    """Changes whenever the weights or the config do, read without hashing a byte: each tensor's address and torch's
    count of its in-place writes (none kept under ``torch.inference_mode``: the address alone), and the config's hash."""
    return (tuple((tensor.data_ptr(), None if tensor.is_inference() else tensor._version) for tensor in model.state_dict().values()),
            config_fingerprint(model))


IN_TRAINING = "in-training:"  # how a training_identity begins: a fingerprint that hashes no weights


def training_identity(model, step: int | None) -> str:
    """A model in training at ``step``, named without reading its weights: nothing may be cached or reused on it."""
    count = sum(parameter.numel() for parameter in model.parameters())
    name = getattr(model.config, "_name_or_path", "") or ""
    return f"{IN_TRAINING}{type(model).__name__}:{name}:{count}:step-{step}"


TOKENIZER_LOADING_SETTINGS = frozenset({"is_local", "local_files_only", "model_max_length", "padding_side", "truncation_side"})


def tokenizer_fingerprint(tokenizer) -> str:
    """Identifies how the tokenizer turns text into ids and back (LAMA reads words from ids): a fast tokenizer's
    pipeline and added tokens; otherwise its vocabulary, scalar settings and SentencePiece model."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # truncation and padding left out: each call sets them for itself
        parts = [part.__getstate__() if part is not None else b"null"
                 for part in (backend.normalizer, backend.pre_tokenizer, backend.model, backend.post_processor, backend.decoder)]
        added = sorted((index, str(token), token.special, token.normalized, token.lstrip, token.rstrip, token.single_word)
                       for index, token in tokenizer.added_tokens_decoder.items())
        return hashlib.sha256(b"\x1e".join([*parts, json.dumps(added, ensure_ascii=False).encode()])).hexdigest()[:16]
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    settings = sorted((key, value) for key, value in getattr(tokenizer, "init_kwargs", {}).items()
                      if isinstance(value, (bool, int, float, str)) and key not in TOKENIZER_LOADING_SETTINGS
                      and not key.endswith(("_file", "name_or_path")))
    proto = getattr(getattr(tokenizer, "sp_model", None), "serialized_model_proto", None)
    digest = hashlib.sha256(json.dumps([vocabulary, settings], ensure_ascii=False).encode())
    digest.update(proto() if callable(proto) else b"")
    return digest.hexdigest()[:16]
