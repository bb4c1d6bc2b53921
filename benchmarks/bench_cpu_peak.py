"""The encoder's share of the CPU's GEMM peak, eager and under ``torch.compile`` (issue 23), in one run.

The PromptEOL encoder spends its time in the transformer's matmuls and in the element-wise work
between them (norms, activations, rotary embeddings, softmax), which eager PyTorch runs as separate
kernels.  ``torch.compile`` (inductor) fuses the element-wise work.  This measures, on the same
WN18RR entity prompts and interleaved over ``--rounds`` so that a shared machine's drift hits every
variant alike:

* the dense fp32 GEMM peak (best of three square matmuls of ``--peak-size``);
* the encoder, eager (today's path) and with the base model compiled (``dynamic=True``: batches differ
  in length), each as achieved FLOP/s = 2 x non-embedding parameters x tokens fed (padding included) /
  forward seconds, and as a share of the peak; the compiled vectors' largest difference from eager's.

    python benchmarks/bench_cpu_peak.py --entities 256 --rounds 3 --out results/bench_cpu_peak.json
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import click
import numpy as np
import torch
from bench_gpu import matmul_parameters, measured_peak  # run as a script: benchmarks/ is on sys.path

from deer.backends.encoder import PromptEOLEncoder
from deer.backends.models import open_model
from deer.base.files import package_versions, write_json
from deer.platform.tables import text_table
from deer.platform.templates import PromptTemplates
from kg_data import load_kg


def encode(model, tokenizer, texts: list[str]) -> tuple[np.ndarray, dict]:
    encoder = PromptEOLEncoder(model, tokenizer, show_progress=False)
    vectors = encoder.encode(texts).embeddings
    return vectors, encoder.stats.as_dict()


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True)
@click.option("--entities", "n_entities", default=256, show_default=True, help="First N WN18RR entity tail prompts.")
@click.option("--rounds", default=3, show_default=True)
@click.option("--peak-size", default=2048, show_default=True)
@click.option("--out", "out_path", default="results/bench_cpu_peak.json", show_default=True)
def main(model_name, n_entities, rounds, peak_size, out_path):
    load_at_start = os.getloadavg()[0]
    kg = load_kg("wn18rr")
    texts = [PromptTemplates.tail_prompt(kg, e) for e in range(n_entities)]
    loaded = open_model(model_name, dtype="float32", device="cpu")
    model, tokenizer = loaded.model, loaded.tokenizer
    flops_per_token = 2 * matmul_parameters(model)
    eager_base = model.model
    compiled_base = torch.compile(eager_base, dynamic=True)
    started = time.perf_counter()
    model.model = compiled_base
    encode(model, tokenizer, texts)  # compiles (not timed)
    compile_seconds = time.perf_counter() - started
    model.model = eager_base
    rates: dict[str, list[float]] = {"gemm peak": [], "eager": [], "compiled": []}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(rounds):
        rates["gemm peak"].append(measured_peak(torch.device("cpu"), torch.float32, peak_size))
        for name, base in (("eager", eager_base), ("compiled", compiled_base)):
            model.model = base
            vectors[name], stats = encode(model, tokenizer, texts)
            rates[name].append(flops_per_token * stats["padded_tokens"] / stats["forward_seconds"])
    model.model = eager_base
    peak = statistics.median(rates["gemm peak"])
    rows = [{"variant": name, "gflops_median": statistics.median(values) / 1e9, "gflops": [v / 1e9 for v in values],
             "share_of_peak": statistics.median(values) / peak}
            for name, values in rates.items()]
    difference = float(np.max(np.abs(vectors["compiled"] - vectors["eager"])))
    report = {"model": loaded.metadata(), "entities": n_entities, "rounds": rounds, "peak_size": peak_size,
              "torch_threads": torch.get_num_threads(), "load_average_at_start": load_at_start,
              "compile_seconds": compile_seconds, "rows": rows, "max_abs_difference_compiled_vs_eager": difference,
              "flops_per_token": flops_per_token, "versions": package_versions()}
    write_json(Path(out_path), report)
    click.echo(f"{model_name}, {n_entities} entity prompts, {rounds} rounds, {torch.get_num_threads()} threads, "
               f"load average at start {load_at_start:.2f}; compiling took {compile_seconds:.0f} s")
    columns = [("variant", "<12"), ("GFLOP/s", ">9.1f", "gflops_median"), ("share of peak", ">15.2f", "share_of_peak"),
               ("   rounds", "", "gflops", lambda values: "   " + " ".join(f"{v:.1f}" for v in values))]
    click.echo(text_table(rows, columns))
    click.echo(f"max |compiled - eager| = {difference:.2e}; JSON: {out_path}")


if __name__ == "__main__":
    main()
