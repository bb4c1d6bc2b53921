"""Benchmark: the weight fingerprint over every byte of 1.3B parameters (OPT-1.3B's shapes).

``deer.backends.fingerprints.model_fingerprint`` hashes all of every tensor (names, shapes, dtypes too).  This
times the ways of doing that on tensors shaped like OPT-1.3B's state dict (24 layers of d=2048,
FFN 8192, vocabulary 50272, 2050 positions, lm_head tied to the token embeddings), allocated as
random fp32 tensors without building a model:

* hash algorithm: sha256, sha1, blake2b, md5 (hashlib; sha1/sha256 use the CPU's SHA extensions
  when OpenSSL finds them);
* layout of the work: one hash stream over all tensors in one thread; one digest per tensor,
  tensors in a thread pool; tensors cut into fixed pieces (--chunk-mib), pieces in a thread pool
  (hashlib releases the GIL on large buffers, so threads hash in parallel);
* the old sampled fingerprint (first 2,048 values per tensor; not exact) for reference;
* the chosen way on the same tensors in bfloat16 (hashed as their raw bytes).

Every tensor is read through a uint8 view of its memory (no copy).  Prints a table, writes JSON.

    python benchmarks/bench_fingerprint.py --out results/bench_fingerprint.json
    python benchmarks/bench_fingerprint.py --layers 2 --repeats 1     # smoke test (~0.2B parameters)
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path

import click
import torch

from deer.backends.fingerprints import FINGERPRINT_ALGORITHM, FINGERPRINT_CHUNK_BYTES, _raw_bytes, tensors_fingerprint
from deer.base.files import package_versions, write_json

NO_CHUNKS = 1 << 62  # one piece per tensor


def opt_like_shapes(layers: int = 24, d: int = 2048, ffn: int = 8192, vocab: int = 50272, positions: int = 2050) -> list[tuple[str, tuple]]:
    """(name, shape) of OPT-1.3B's state dict (``lm_head.weight`` is tied, handled by the caller)."""
    shapes = [("model.decoder.embed_tokens.weight", (vocab, d)), ("model.decoder.embed_positions.weight", (positions, d))]
    for i in range(layers):
        prefix = f"model.decoder.layers.{i}."
        for projection in ("k_proj", "v_proj", "q_proj", "out_proj"):
            shapes += [(f"{prefix}self_attn.{projection}.weight", (d, d)), (f"{prefix}self_attn.{projection}.bias", (d,))]
        shapes += [(f"{prefix}self_attn_layer_norm.weight", (d,)), (f"{prefix}self_attn_layer_norm.bias", (d,))]
        shapes += [(f"{prefix}fc1.weight", (ffn, d)), (f"{prefix}fc1.bias", (ffn,)),
                   (f"{prefix}fc2.weight", (d, ffn)), (f"{prefix}fc2.bias", (d,))]
        shapes += [(f"{prefix}final_layer_norm.weight", (d,)), (f"{prefix}final_layer_norm.bias", (d,))]
    shapes += [("model.decoder.final_layer_norm.weight", (d,)), ("model.decoder.final_layer_norm.bias", (d,))]
    return shapes


def allocate(shapes, seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    tensors = [(name, torch.randn(shape, generator=generator)) for name, shape in shapes]
    tensors.append(("lm_head.weight", tensors[0][1]))  # tied, as in OPT
    return tensors


def one_stream(named_tensors, algorithm: str) -> str:
    """Every tensor's bytes through one hash object, in the calling thread (a tied tensor read once)."""
    digest, seen = hashlib.new(algorithm), set()
    for name, tensor in named_tensors:
        digest.update(f"\x1e{name}\x1f{tuple(tensor.shape)}\x1f{tensor.dtype}\x1f".encode())
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            digest.update(_raw_bytes(tensor))
    return digest.hexdigest()[:16]


def sampled_2048(named_tensors) -> str:
    """The fingerprint before: names, shapes and the first 2,048 values of each tensor (not exact)."""
    digest = hashlib.sha256()
    for name, tensor in named_tensors:
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().reshape(-1)[:2048].float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def timed(function, repeats: int) -> tuple[list[float], str]:
    seconds, result = [], ""
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - started)
    return seconds, result


@click.command()
@click.option("--layers", default=24, show_default=True, help="Decoder layers (24: OPT-1.3B).")
@click.option("--repeats", default=3, show_default=True, help="Rounds (each times every way once); the table shows the fastest.")
@click.option("--threads", default=os.cpu_count() or 1, show_default=True, help="Thread-pool size of the threaded ways.")
@click.option("--chunk-mib", default=FINGERPRINT_CHUNK_BYTES >> 20, show_default=True, help="Piece size of the chunked way.")
@click.option("--algorithms", default="sha256,sha1,blake2b,md5", show_default=True)
@click.option("--out", "out_path", default="runs/bench_fingerprint.json", show_default=True)
def main(layers, repeats, threads, chunk_mib, algorithms, out_path):
    load_before = os.getloadavg()
    started = time.perf_counter()
    tensors = allocate(opt_like_shapes(layers=layers))
    allocate_seconds = time.perf_counter() - started
    distinct = {t.data_ptr(): t for _, t in tensors}
    parameters = sum(t.numel() for t in distinct.values())
    gigabytes = sum(t.numel() * t.element_size() for t in distinct.values()) / 1e9
    chunk = chunk_mib << 20
    click.echo(f"{len(tensors)} tensors (OPT-1.3B shapes, {layers} layers, lm_head tied): {parameters / 1e9:.3f}B parameters, "
               f"{gigabytes:.2f} GB fp32, allocated in {allocate_seconds:.1f}s; {os.cpu_count()} CPUs, load {load_before[0]:.2f}")

    ways = [("sampled 2,048 values/tensor (old, not exact)", "sha256", "sample", lambda: sampled_2048(tensors))]
    for algorithm in [a.strip() for a in algorithms.split(",") if a.strip()]:
        ways += [
            (f"{algorithm}, one stream, 1 thread", algorithm, "stream", lambda a=algorithm: one_stream(tensors, a)),
            (f"{algorithm}, per tensor, {threads} threads", algorithm, "per-tensor",
             lambda a=algorithm: tensors_fingerprint(tensors, a, threads=threads, chunk_bytes=NO_CHUNKS)),
            (f"{algorithm}, {chunk_mib} MiB pieces, 1 thread", algorithm, "chunked-1",
             lambda a=algorithm: tensors_fingerprint(tensors, a, threads=1, chunk_bytes=chunk)),
            (f"{algorithm}, {chunk_mib} MiB pieces, {threads} threads", algorithm, "chunked",
             lambda a=algorithm: tensors_fingerprint(tensors, a, threads=threads, chunk_bytes=chunk)),
        ]
    # Rounds: every way once per round, so a burst of load from other processes hits all ways alike.
    results: dict[str, tuple[list[float], str]] = {label: ([], "") for label, *_ in ways}
    for _ in range(repeats):
        for label, _, _, function in ways:
            seconds, fingerprint = timed(function, 1)
            results[label] = (results[label][0] + seconds, fingerprint)
    rows = []
    header = f"{'way':<46}{'best s':>8}{'GB/s':>7}{'fingerprint':>18}  all runs (s)"
    click.echo(header)
    click.echo("-" * len(header))
    for label, algorithm, layout, _function in ways:
        seconds, fingerprint = results[label]
        exact = layout != "sample"
        row = {"way": label, "algorithm": algorithm, "layout": layout, "exact": exact, "seconds": seconds,
               "best_seconds": min(seconds), "gb_per_s": gigabytes / min(seconds) if exact else None, "fingerprint": fingerprint}
        rows.append(row)
        rate = f"{row['gb_per_s']:.2f}" if exact else "-"
        click.echo(f"{label:<46}{min(seconds):>8.2f}{rate:>7}{fingerprint:>18}  {', '.join(f'{s:.2f}' for s in seconds)}")

    # The default (what model_fingerprint does) on the same values in bfloat16: raw 2-byte words.
    default = tensors_fingerprint(tensors)
    tensors = [(name, tensor.to(torch.bfloat16)) for name, tensor in tensors[:-1]]
    tensors.append(("lm_head.weight", tensors[0][1]))
    bf16_seconds, bf16_fingerprint = timed(lambda: tensors_fingerprint(tensors), repeats)
    click.echo(f"{'default on bfloat16 copies (' + f'{gigabytes / 2:.2f} GB)':<46}{min(bf16_seconds):>8.2f}"
               f"{gigabytes / 2 / min(bf16_seconds):>7.2f}{bf16_fingerprint:>18}  {', '.join(f'{s:.2f}' for s in bf16_seconds)}")

    exact_rows = [row for row in rows if row["exact"]]
    fastest = min(exact_rows, key=lambda row: row["best_seconds"])
    load_after = os.getloadavg()
    click.echo(f"fastest exact way: {fastest['way']} ({fastest['best_seconds']:.2f}s); "
               f"default (model_fingerprint): {FINGERPRINT_ALGORITHM}, {FINGERPRINT_CHUNK_BYTES >> 20} MiB pieces, "
               f"{min(8, os.cpu_count() or 1)} threads -> {default}")
    click.echo(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (other processes share these CPUs)")
    write_json(Path(out_path), {
        "tensors": len(tensors), "parameters": parameters, "gigabytes_fp32": gigabytes, "layers": layers,
        "shapes": "OPT-1.3B (d=2048, ffn=8192, vocab=50272, positions=2050, lm_head tied)",
        "allocate_seconds": allocate_seconds, "repeats": repeats, "threads": threads, "chunk_mib": chunk_mib,
        "rows": rows, "fastest_exact": fastest["way"],
        "default": {"algorithm": FINGERPRINT_ALGORITHM, "chunk_mib": FINGERPRINT_CHUNK_BYTES >> 20, "fingerprint": default},
        "bfloat16": {"seconds": bf16_seconds, "gigabytes": gigabytes / 2, "fingerprint": bf16_fingerprint},
        "cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
        "load_average_before": load_before, "load_average_after": load_after,
        "note": "other processes shared the CPUs during the run (see load averages)",
        "versions": package_versions(), "torch_threads": torch.get_num_threads(),
    })
    click.echo(f"wrote {out_path}")


if __name__ == "__main__":
    main()
