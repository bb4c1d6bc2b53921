"""Benchmark: DEER entity encoding, batched PromptEOL encoder vs the peer's per-prompt way.

The peer (`deer-probe` 0.1.1) encodes one prompt at a time through the full causal LM with
``output_hidden_states=True``, so the LM head runs over every position.  Ours sorts by length,
batches under a token budget and runs the base transformer only.  Both give the same vectors
(checked here, max relative difference printed).

    python benchmarks/bench_deer_encoder.py --model smollm2-135m --entities 256 --out runs/bench_deer_encoder.json
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np
import torch

from deer.backends.encoder import PromptEOLEncoder
from deer.backends.models import open_model
from deer.backends.tokenization import token_ids
from deer.base.files import package_versions, write_json
from deer.platform.templates import PromptTemplates
from kg_data import build_queries, load_kg


def peer_style_encode(model, tokenizer, texts):
    """One prompt per forward pass, full model (LM head on every position), last layer, last token."""
    vectors, tokens = [], 0
    with torch.inference_mode():
        for text in texts:
            ids = torch.tensor([token_ids(tokenizer, text)])
            tokens += ids.shape[1]
            output = model(input_ids=ids, output_hidden_states=True)
            vectors.append(output.hidden_states[-1][0, -1].numpy())
    return np.stack(vectors), tokens


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True)
@click.option("--entities", default=256, show_default=True, help="Entity prompts from the WN18RR 500-triple subset.")
@click.option("--token-budget", default=8192, show_default=True)
@click.option("--data-dir", default=None)
@click.option("--out", "out_path", default="runs/bench_deer_encoder.json", show_default=True)
def main(model_name, entities, token_budget, data_dir, out_path):
    torch.manual_seed(0)
    kg = load_kg("wn18rr", data_dir)
    queries = build_queries(kg, "test", subset=500, seed=0)
    texts = [PromptTemplates.tail_prompt(kg, e) for e in queries.candidates[:entities]]
    loaded = open_model(model_name)

    started = time.perf_counter()
    peer_vectors, tokens = peer_style_encode(loaded.model, loaded.tokenizer, texts)
    peer_seconds = time.perf_counter() - started

    encoder = PromptEOLEncoder(loaded.model, loaded.tokenizer, token_budget=token_budget, show_progress=False)
    started = time.perf_counter()
    ours = encoder.encode(texts).embeddings
    ours_seconds = time.perf_counter() - started

    rel_diff = float(np.max(np.abs(ours - peer_vectors)) / np.max(np.abs(peer_vectors)))
    rows = [
        {"method": "peer-style (batch 1, full LM)", "seconds": peer_seconds, "prompts_per_s": len(texts) / peer_seconds,
         "tokens": tokens, "padded_tokens": tokens, "tokens_per_s": tokens / peer_seconds},
        {"method": "deer encoder (batched, no LM head)", "seconds": ours_seconds, "prompts_per_s": len(texts) / ours_seconds,
         "tokens": encoder.stats.tokens, "padded_tokens": encoder.stats.padded_tokens, "tokens_per_s": encoder.stats.tokens / ours_seconds},
    ]
    click.echo(f"{len(texts)} WN18RR entity prompts, model {model_name}, CPU threads {torch.get_num_threads()}")
    click.echo(f"{'method':<38}{'seconds':>9}{'prompts/s':>11}{'tokens':>9}{'padded':>9}{'tokens/s':>10}")
    for row in rows:
        click.echo(f"{row['method']:<38}{row['seconds']:>9.1f}{row['prompts_per_s']:>11.2f}{row['tokens']:>9}{row['padded_tokens']:>9}{row['tokens_per_s']:>10.0f}")
    speedup = peer_seconds / ours_seconds
    click.echo(f"speed-up {speedup:.2f}x; max relative difference of vectors {rel_diff:.2e}")
    write_json(Path(out_path), {"model": model_name, "entities": len(texts), "token_budget": token_budget, "rows": rows,
                                "speedup": speedup, "max_relative_difference": rel_diff, "versions": package_versions(),
                                "torch_threads": torch.get_num_threads()})
    click.echo(f"wrote {out_path}")


if __name__ == "__main__":
    main()
