"""Benchmark (issue 12): our DEER encoder against the DEER authors' own package, deer-probe 0.1.1.

The same prompts -- the authors' template style (one shared 8-shot block, head definition,
trailing space) on the WN18RR 500-triple test subset (seed 0): the first N query prompts and the
first M entity tail prompts -- are encoded in one run by

  (a) peer: the package's ``PromptEOL_Encoder`` (one prompt per forward pass, LM head on every
      position), in a subprocess with PYTHONPATH=.peers/deer-probe (its top-level module is also
      ``deer``); its own timer around the encode call, model load excluded
      (benchmarks/authors_peer_encode.py);
  (b) ours, whole: ``PromptEOLEncoder(..., reuse_prefix=False)``, every prompt encoded whole;
  (c) ours, prefix reuse: ``reuse_prefix=True``, the queries' shared token prefix run once.

Both sides must feed identical token ids (checked).  Vectors are compared (max relative L2 error
per prompt, needed <= 1e-5), and so is each query's top 10 of the M entities by cosine.  Work is
counted as 2 x non-embedding parameters x tokens + 4 x layers x hidden x query-key pairs (causal:
L(L+1)/2 per prompt; with prefix reuse P(P+1)/2 once + S*P + S(S+1)/2 per tail of S tokens); the
peer's LM head on every position is counted apart, as its extra work.  FLOP/s are set against the
machine's fp32 GEMM peak, measured in the same run with the same torch thread count: the best of one
2048x2048 torch.mm and F.linear at the model's own layer shapes (512 to 4096 rows), before and after.  "all" rows
add the queries' and the entities' calls (encoded separately, as a probe does).

The paper's compute-time protocol (every WN18RR triple a query, every entity a candidate) is then
extrapolated: every prompt is tokenised, and each method's tokens for it (the peer: every prompt
whole; ours: each distinct prompt once, whole or after its group's shared prefix) are divided by
the tokens/s that method reached on each part in this run.

    python benchmarks/bench_deer_vs_authors.py --queries 500 --entities 964   # the whole subset
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np
import torch

from deer.backends.encoder import PromptEOLEncoder
from deer.backends.models import open_model
from deer.backends.shared_prefix import prefix_groups
from deer.backends.tokenization import batch_token_ids
from deer.base.files import package_versions, write_json
from deer.platform.templates import PromptTemplates, query_prompts
from kg_data import build_queries, load_kg

ROOT = Path(__file__).resolve().parents[1]
PEER_DIR = ROOT / ".peers" / "deer-probe"
PEER_HELPER = Path(__file__).with_name("authors_peer_encode.py")
MAX_REL_ERROR = 1e-5
PARTS = ("queries", "entities")


def gemm_peak(n: int = 2048, repeats: int = 10) -> float:
    """Best fp32 torch.mm GFLOP/s of n x n matrices, at the current torch thread count."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return best_rate(lambda: torch.mm(a, b), 2 * n**3, repeats)


def model_gemm_peak(model, rows: tuple[int, ...] = (512, 1024, 4096), repeats: int = 5) -> float:
    """Best fp32 GFLOP/s of ``F.linear`` at the model's own layer shapes (every distinct
    (in, out) of its linear layers but the LM head) with ``rows`` tokens: on a small model these
    GEMMs can run faster than one large square one, so the peak is the larger of the two."""
    head = model.get_output_embeddings()
    shapes = {tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head}
    best = 0.0
    for out_features, in_features in sorted(shapes):
        weight = torch.randn(out_features, in_features)
        for m in rows:
            x = torch.randn(m, in_features)
            best = max(best, best_rate(lambda: torch.nn.functional.linear(x, weight), 2 * m * in_features * out_features, repeats))  # noqa: B023
    return best


def best_rate(call, flop: int, repeats: int) -> float:
    """GFLOP/s of the fastest of ``repeats`` timed calls (after one untimed warm-up)."""
    call()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return flop / best / 1e9


def run_peer(model_folder: str, parts: dict[str, list[str]], threads: int) -> tuple[dict, dict[str, np.ndarray]]:
    """The package's encoder on each part, in a subprocess: (its peer.json, vectors per part)."""
    with tempfile.TemporaryDirectory() as work:
        job = Path(work) / "job.json"
        job.write_text(json.dumps({"peer_dir": str(PEER_DIR), "model": model_folder, "threads": threads, "parts": parts}))
        env = {**os.environ, "PYTHONPATH": str(PEER_DIR), "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
        result = subprocess.run([sys.executable, str(PEER_HELPER), str(job), work], cwd=work, env=env,
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"deer-probe failed:\n{result.stderr[-4000:]}")
        out = json.loads((Path(work) / "peer.json").read_text())
        return out, {name: np.load(Path(work) / f"{name}.npy") for name in parts}


def our_encoder(loaded, templates: PromptTemplates, token_budget: int, reuse_prefix: bool) -> PromptEOLEncoder:
    """A fresh encoder (fresh work counts), tokenising as the template style says (the peer's way)."""
    options = {"reuse_prefix": reuse_prefix}
    return PromptEOLEncoder(loaded.model, loaded.tokenizer, token_budget=token_budget, show_progress=False,
                            special_tokens=templates.prompt_special_tokens, **options)


def non_embedding_parameters(model) -> int:
    """All parameters but the input embedding matrix (and the LM head when it is not tied to it)."""
    embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    total = sum(p.numel() for p in model.parameters()) - embedding.numel()
    return total - (head.numel() if head.data_ptr() != embedding.data_ptr() else 0)


def work_done(id_lists: list[list[int]], prefix: int = 0) -> tuple[int, int]:
    """(tokens run, causal query-key pairs) for prompts whose first ``prefix`` tokens are run once."""
    tails = [len(ids) - prefix for ids in id_lists]
    tokens = prefix + sum(tails)
    pairs = prefix * (prefix + 1) // 2 + sum(s * prefix + s * (s + 1) // 2 for s in tails)
    return tokens, pairs


def paper_protocol_tokens(kg, templates: PromptTemplates, tokenizer) -> dict[str, dict[str, int]]:
    """Tokens each method feeds for the paper's compute-time protocol (every WN18RR triple as a
    query, every entity a candidate): the peer every prompt whole; ours each distinct prompt once,
    whole or after its group's shared prefix (``prefix_groups``, as the encoder does)."""
    query_ids = batch_token_ids(tokenizer, [templates.query_prompt(kg, tuple(t)) for t in kg.all_triples().tolist()],
                                templates.prompt_special_tokens)
    entity_ids = batch_token_ids(tokenizer, [PromptTemplates.tail_prompt(kg, e) for e in range(kg.n_entities)],
                                 templates.prompt_special_tokens)
    distinct = list(dict.fromkeys(map(tuple, query_ids)))
    groups, rest = prefix_groups(distinct)
    entities = sum(map(len, entity_ids))
    return {
        "prompts": {"queries": len(query_ids), "distinct_queries": len(distinct), "entities": len(entity_ids),
                    "prefix_groups": len(groups)},
        "peer (deer-probe 0.1.1)": {"queries": sum(map(len, query_ids)), "entities": entities},
        "ours, whole prompts": {"queries": sum(map(len, distinct)), "entities": entities},
        "ours, prefix reuse": {"queries": sum(shared + sum(len(distinct[i]) - shared for i in members) for shared, members in groups)
                               + sum(len(distinct[i]) for i in rest), "entities": entities},
    }


def extrapolate(tokens: dict, rows: list[dict]) -> list[dict]:
    """Hours for the protocol's tokens at each method's tokens/s measured here, per part."""
    rate = {(r["method"], r["part"]): r["tokens_per_s"] for r in rows}
    out = []
    for method in (m for m in tokens if m != "prompts"):
        seconds = sum(tokens[method][part] / rate[(method, part)] for part in PARTS)
        out.append({"method": method, **{f"{part}_tokens": tokens[method][part] for part in PARTS}, "hours": seconds / 3600})
    for row in out:
        row["speedup_vs_peer"] = out[0]["hours"] / row["hours"]
    return out


def relative_errors(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    return np.linalg.norm(ours - theirs, axis=1) / np.linalg.norm(theirs, axis=1)


def top10(queries: np.ndarray, entities: np.ndarray) -> np.ndarray:
    """Each query's 10 nearest entities by cosine, best first."""
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    return np.argsort(-(unit(queries) @ unit(entities).T), axis=1, kind="stable")[:, :10]


def authors_style_prompts(n_queries: int, n_entities: int, data_dir=None) -> tuple:
    """(kg, templates, {"queries": the first N query prompts, "entities": the first M entity
    prompts}) of the WN18RR 500-triple test subset (seed 0) in the authors' template style."""
    kg = load_kg("wn18rr", data_dir)
    queries = build_queries(kg, "test", subset=500, seed=0)
    templates = PromptTemplates(k_shot=8, style="authors")
    return kg, templates, {"queries": query_prompts(queries, templates)[:n_queries],
                           "entities": [PromptTemplates.tail_prompt(kg, e) for e in queries.candidates.tolist()[:n_entities]]}


@click.command()
@click.option("--model", "model_name", default="smollm2-135m", show_default=True)
@click.option("--queries", "n_queries", default=100, show_default=True, help="First N query prompts.")
@click.option("--entities", "n_entities", default=200, show_default=True, help="First M entity tail prompts.")
@click.option("--token-budget", default=None, type=int,
              help="Padded tokens per batch for our encoder (default: the encoder's own CPU default).")
@click.option("--data-dir", default=None)
@click.option("--protocol/--no-protocol", default=True, show_default=True,
              help="Also extrapolate the paper's compute-time protocol (all 93,003 triples x 40,943 entities) from the "
                   "tokens/s measured here (tokenising every prompt takes about a minute).")
@click.option("--out", "out_path", default="results/bench_deer_vs_authors.json", show_default=True)
def main(model_name, n_queries, n_entities, token_budget, data_dir, protocol, out_path):
    load_at_start = os.getloadavg()
    threads = torch.get_num_threads()
    kg, templates, parts = authors_style_prompts(n_queries, n_entities, data_dir)
    loaded = open_model(model_name)
    model = loaded.model
    peak_before = max(gemm_peak(), model_gemm_peak(model))

    peer_out, peer_vectors = run_peer(loaded.source, parts, threads)
    ids = {}
    for name, texts in parts.items():
        ids[name] = batch_token_ids(loaded.tokenizer, texts, templates.prompt_special_tokens)  # as our encoder does
        if ids[name] != peer_out["token_ids"][name]:
            bad = next(i for i, (a, b) in enumerate(zip(ids[name], peer_out["token_ids"][name], strict=True)) if a != b)
            raise SystemExit(f"token ids differ from the peer's ({name} prompt {bad}): {parts[name][bad]!r}")

    methods = {"peer (deer-probe 0.1.1)": None, "ours, whole prompts": False, "ours, prefix reuse": True}
    vectors, seconds, stats = {"peer (deer-probe 0.1.1)": peer_vectors}, {"peer (deer-probe 0.1.1)": peer_out["seconds"]}, {}
    for method, reuse in methods.items():
        if reuse is None:
            continue
        our_encoder(loaded, templates, token_budget, reuse).encode(parts["queries"][:2])  # warm-up, untimed
        vectors[method], seconds[method], stats[method] = {}, {}, {}
        for name, texts in parts.items():
            encoder = our_encoder(loaded, templates, token_budget, reuse)
            started = time.perf_counter()
            vectors[method][name] = encoder.encode(texts).embeddings
            seconds[method][name] = time.perf_counter() - started
            stats[method][name] = encoder.stats.as_dict()
    square_peak = gemm_peak()
    shape_peak = model_gemm_peak(model)
    peak = max(peak_before, square_peak, shape_peak)

    per_token = 2 * non_embedding_parameters(model)
    per_pair = 4 * model.config.num_hidden_layers * model.config.hidden_size
    lm_head_per_token = 2 * model.get_output_embeddings().weight.numel()
    rows, peer_seconds = [], {}
    for method in methods:
        totals = dict.fromkeys(("prompts", "tokens", "pairs", "seconds", "gflop", "lm_head_gflop"), 0)
        errors = []
        for name in [*PARTS, "all"]:
            if name == "all":
                row = {"part": "all", **totals, "max_rel_error": max(errors) if errors else None}
            else:
                if method in stats:  # ours: the token lists it ran (identical prompts once), the prefix it reused
                    work = stats[method][name]
                    ran = [list(t) for t in dict.fromkeys(map(tuple, ids[name]))] if work.get("duplicate_prompts") else ids[name]
                    tokens, pairs = work_done(ran, work.get("prefix_tokens", 0))
                    assert tokens == work["tokens"], (tokens, work)
                    error = float(relative_errors(vectors[method][name], peer_vectors[name]).max())
                    errors.append(error)
                else:
                    tokens, pairs = work_done(ids[name])
                    error, work = None, {}
                row = {"part": name, "prompts": len(parts[name]), "tokens": tokens, "pairs": pairs,
                       "seconds": seconds[method][name], "gflop": (per_token * tokens + per_pair * pairs) / 1e9,
                       "lm_head_gflop": lm_head_per_token * tokens / 1e9 if method not in stats else 0.0,
                       "max_rel_error": error, "work": work}
                for key in totals:
                    totals[key] += row[key]
            peer_seconds.setdefault(row["part"], row["seconds"])  # the peer's rows come first
            row.update(method=method, prompts_per_s=row["prompts"] / row["seconds"], tokens_per_s=row["tokens"] / row["seconds"],
                       gflops=row["gflop"] / row["seconds"], pct_peak=100 * row["gflop"] / row["seconds"] / peak,
                       gflops_with_lm_head=(row["gflop"] + row["lm_head_gflop"]) / row["seconds"],
                       speedup_vs_peer=peer_seconds[row["part"]] / row["seconds"])
            rows.append(row)

    top10_identical = {method: int(np.all(top10(v["queries"], v["entities"]) == top10(peer_vectors["queries"], peer_vectors["entities"]),
                                          axis=1).sum()) for method, v in vectors.items() if method in stats}
    duplicates = len(parts["queries"]) - len(set(map(tuple, ids["queries"])))
    click.echo(f"WN18RR test subset 500 (seed 0), authors' style 8-shot shared; {len(parts['queries'])} query prompts "
               f"({duplicates} repeated), {len(parts['entities'])} entity prompts; model {model_name}; torch threads {threads}; "
               f"load average at start {load_at_start[0]:.2f}; fp32 GEMM peak {peak:.1f} GFLOP/s (best of square 2048 and "
               f"the model's linear shapes, before and after: {peak_before:.1f} / square {square_peak:.1f}, shapes "
               f"{shape_peak:.1f}); token ids identical on both sides")
    header = f"{'method':<24}{'part':<9}{'prompts':>8}{'tokens':>8}{'seconds':>9}{'prompts/s':>10}{'tokens/s':>9}" \
             f"{'GFLOP/s':>9}{'%peak':>7}{'speed-up':>9}{'max rel err':>12}"
    click.echo(header)
    for row in rows:
        error = "" if row["max_rel_error"] is None else f"{row['max_rel_error']:.1e}"
        click.echo(f"{row['method']:<24}{row['part']:<9}{row['prompts']:>8}{row['tokens']:>8}{row['seconds']:>9.2f}"
                   f"{row['prompts_per_s']:>10.2f}{row['tokens_per_s']:>9.0f}{row['gflops']:>9.1f}{row['pct_peak']:>7.1f}"
                   f"{row['speedup_vs_peer']:>8.2f}x{error:>12}")
    peer_all = next(r for r in rows if r["part"] == "all")
    click.echo(f"peer with its LM head on every position: {peer_all['gflops_with_lm_head']:.1f} GFLOP/s "
               f"({100 * peer_all['gflops_with_lm_head'] / peak:.1f}% of peak; LM head {peer_all['lm_head_gflop']:.1f} "
               f"of {peer_all['gflop'] + peer_all['lm_head_gflop']:.1f} GFLOP)")
    click.echo("queries whose top 10 entities (cosine) equal the peer's: "
               + "; ".join(f"{m} {k}/{len(parts['queries'])}" for m, k in top10_identical.items()))
    worst = max((r["max_rel_error"] for r in rows if r["max_rel_error"] is not None), default=0.0)
    ok = worst <= MAX_REL_ERROR
    click.echo(f"max relative L2 error against the peer {worst:.1e} ({'<=' if ok else 'ABOVE'} {MAX_REL_ERROR:.0e})")

    projection = None
    if protocol:
        tokens = paper_protocol_tokens(kg, templates, loaded.tokenizer)
        projection = {"prompts": tokens["prompts"], "rows": extrapolate(tokens, rows)}
        click.echo(f"\nthe paper's protocol ({tokens['prompts']['queries']} queries, {tokens['prompts']['distinct_queries']} "
                   f"distinct, x {tokens['prompts']['entities']} entities), extrapolated from the tokens/s above:")
        for row in projection["rows"]:
            click.echo(f"{row['method']:<24}query tokens {row['queries_tokens']:>10}  entity tokens {row['entities_tokens']:>9}  "
                       f"{row['hours']:>6.2f} h  {row['speedup_vs_peer']:.2f}x")

    write_json(Path(out_path), {
        "settings": {"model": model_name, "model_source": loaded.source, "kg": "wn18rr", "split": "test", "subset": 500,
                     "seed": 0, "templates": templates.to_metadata(), "queries": len(parts["queries"]),
                     "repeated_query_prompts": duplicates, "entities": len(parts["entities"]), "token_budget": encoder.token_budget},
        "versions": {**package_versions(), "deer-probe (peer)": peer_out["version"]},
        "torch_threads": threads, "peer_threads": peer_out["threads"], "peer_load_seconds": peer_out["load_seconds"],
        "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg(),
        "gemm_peak_gflops": peak, "gemm_peak_gflops_before": peak_before,
        "gemm_peak_parts_after": {"square_2048": square_peak, "model_linear_shapes": shape_peak},
        "flop_model": {"non_embedding_parameters": non_embedding_parameters(model), "flop_per_token": per_token,
                       "flop_per_query_key_pair": per_pair, "peer_lm_head_flop_per_token": lm_head_per_token},
        "token_ids_identical": True, "max_rel_error": worst, "max_rel_error_ok": ok,
        "top10_identical": top10_identical, "rows": rows, "paper_protocol": projection,
    })
    click.echo(f"wrote {out_path}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
