"""Fidelity table: each optimised path's largest deviation from the plain path, per family and back-end.

Runs the same cases as tests/test_equivalence.py (tiny random models of GPT-2, OPT with
projection, Llama, Qwen2, Gemma-2, Gemma-3, Mistral, GPT-NeoX; eager and SDPA attention) and
prints one row per (family, back-end) with the measured maximum error of the batched encoder
(relative L2), LAMA next-token log-probs, the shared-prefix scorer and the prefix-trie scorer
(nats; both token budgets of the tests).  Writes the numbers to JSON.

    DEER_CACHE_DIR=$PWD/.cache python benchmarks/fidelity_table.py --out results/fidelity.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package, for its cases

from deer.backends.models import resolve_model
from deer.base.files import package_versions, write_json
from tests import test_equivalence as cases
from tests import tiny_models


@click.command()
@click.option("--out", type=click.Path(dir_okay=False), default="results/fidelity.json", show_default=True)
def main(out):
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m").source)
    rows = []
    for name in tiny_models.ARCHITECTURES:
        for backend in tiny_models.BACKENDS:
            try:
                model = tiny_models.build_tiny_model(name, backend, tokenizer)
            except tiny_models.Unavailable as reason:
                rows.append({"family": name, "backend": backend, "skipped": str(reason)})
                continue
            shared = [cases.shared_prefix_error(model, tokenizer, budget) for budget in cases.SHARED_PREFIX_BUDGETS]
            trie = [cases.trie_error(model, tokenizer, budget) for budget in cases.TRIE_BUDGETS]
            rows.append({
                "family": name,
                "backend": backend,
                "encoder_relative": cases.encoder_error(model, tokenizer),
                "lama_nats": cases.lama_error(model, tokenizer),
                "shared_prefix_nats": max(error for error, _ in shared),
                "prefix_trie_nats": max(error for error, _ in trie),
                "mask_backend": sorted({used for _, used in shared + trie}),
            })
    header = "| family | back-end | encoder (rel. L2) | LAMA next token (nats) | shared prefix (nats) | prefix trie (nats) |"
    print(header)
    print("|---|---|---:|---:|---:|---:|")
    for row in rows:
        if "skipped" in row:
            print(f"| {row['family']} | {row['backend']} | skipped: {row['skipped']} | | | |")
            continue
        print(f"| {row['family']} | {row['backend']} | {row['encoder_relative']:.1e} | {row['lama_nats']:.1e} | "
              f"{row['shared_prefix_nats']:.1e} | {row['prefix_trie_nats']:.1e} |")
    write_json(Path(out), {
        "tolerances": {"vectors_relative": tiny_models.VECTOR_RTOL, "scores_nats": tiny_models.SCORE_ATOL},
        "sliding_window": tiny_models.WINDOW,
        "rows": rows,
        "versions": package_versions(),
    })
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
