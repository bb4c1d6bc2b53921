"""Benchmark (issue 30): DEER's whole pipeline on synthetic KGs in Wikidata5M's shape, at any size.

For each entity count: a seeded synthetic KG (``synthetic_kg.py``, TSV layout) is written under
``--work`` (outside the clone: the 4.6M-entity KG's vectors take 38 GB), then one process per KG runs
the stages one by one, each timed with its peak RSS (sampled every 0.2 s from /proc):

    model     the bundled SmolLM2 (its tokenizer is the real one; its RSS is the baseline)
    read      kg_data.load_kg on the folder (entities line by line, splits in bulk)
    queries   every test triple as a query among all entities, known-true filters from arrays
    probe     deer.runner.run_probe("deer", ...) on the ``hash`` backend (``hash_backend.py``): entity
              prompts made, tokenized and "encoded" a chunk at a time into the sharded store, the
              queries the same way, then every query ranked exactly against every entity, streamed
              over the shards; its timings split prompts + tokenization + store writes, the stand-in
              forward passes (hash vectors), and the ranking

The stand-in forward passes are reported apart: they are what the model's forward passes would
cost, which ``--encoding-sample`` measures for real (the bundled model on N Wikidata5M-shaped entities)
and projects to the whole KG.  Results: a table and ``OUT/scale.json`` (merged across runs).

    python benchmarks/bench_scale.py --entities 100000 --entities 1000000 --entities 4594485 --work /work/scale
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakRss:
    """The process's peak RSS per stage, sampled by a thread."""

    def __init__(self, every: float = 0.2):
        self.stage, self.peaks, self.every = "start", {}, every
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self._stop.is_set():
            self.peaks[self.stage] = max(self.peaks.get(self.stage, 0), rss_bytes())
            time.sleep(self.every)

    def enter(self, stage: str) -> None:
        self.peaks[self.stage] = max(self.peaks.get(self.stage, 0), rss_bytes())
        self.stage = stage
        self.peaks[stage] = rss_bytes()

    def stop(self) -> dict:
        self.enter("end")
        self._stop.set()
        return self.peaks


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def run_one(kg_folder: Path, cache: Path, model: str) -> dict:
    """The stages on one KG, in this process: {stage: seconds}, {stage: peak RSS}, sizes."""
    from hash_backend import WIDTH

    from deer.backends import register_backend
    from deer.backends.models import open_model
    from deer.runner import run_probe
    from kg_data.load import load_kg
    from kg_data.queries import build_queries

    register_backend("hash", "hash_backend:HashBackend")
    peaks, seconds = PeakRss(), {}

    def stage(name, work):
        peaks.enter(name)
        started = time.perf_counter()
        value = work()
        seconds[name] = time.perf_counter() - started
        return value

    loaded = stage("model", lambda: open_model(model))
    kg = stage("read", lambda: load_kg(kg_folder))
    queries = stage("queries", lambda: build_queries(kg, "test"))
    result = stage("probe", lambda: run_probe("deer", queries, loaded, backend="hash", cache=True, cache_dir=cache,
                                              show_progress=False))
    rss = peaks.stop()
    timings, work = result.metadata["timings"], result.metadata["work"]
    forward = work["forward_seconds"]
    return {
        "entities": kg.n_entities, "train_triples": int(len(kg.splits["train"])), "queries": len(queries), "width": WIDTH,
        "seconds": {**seconds, "entities_seconds": timings["entities_seconds"], "queries_seconds": timings["queries_seconds"],
                    "ranking_seconds": timings["ranking_seconds"], "stand_in_forward_seconds": forward,
                    "pipeline_seconds": seconds["read"] + seconds["queries"] + seconds["probe"] - forward},
        "peak_rss_bytes": rss, "model_rss_bytes": rss["model"],
        "store_bytes": folder_bytes(cache), "kg_bytes": folder_bytes(kg_folder),
        "tokens": work["tokens"], "hit@10": result.metrics["hit@10"], "mrr": result.metrics["mrr"],
        "encoded_now": result.metadata["cache"]["entities_encoded_now"],
    }


def measure_encoding_sample(n: int, work: Path, model: str) -> dict:
    """The real encoder's rate on ``n`` Wikidata5M-shaped entities (their tail prompts) with the bundled model."""
    from synthetic_kg import write_synthetic_kg

    from deer.backends.encoder import PromptEOLEncoder
    from deer.backends.models import open_model
    from deer.platform.templates import PromptTemplates
    from kg_data.textual import load_textual_kg

    folder = work / f"sample-{n}"
    if not (folder / "test.tsv").exists():
        write_synthetic_kg(folder, n, seed=0)
    kg = load_textual_kg(folder)
    loaded = open_model(model)
    encoder = PromptEOLEncoder(loaded.model, loaded.tokenizer, show_progress=True)
    texts = [PromptTemplates.tail_prompt(kg, e) for e in range(kg.n_entities)]
    started = time.perf_counter()
    encoder.encode(texts, description="sample")
    elapsed = time.perf_counter() - started
    stats = encoder.stats.as_dict()
    import torch

    return {"model": model, "entities": n, "seconds": elapsed, "tokens": stats["tokens"], "torch_threads": torch.get_num_threads(),
            "tokens_per_second": stats["tokens"] / elapsed, "prompts_per_second": n / elapsed}


def table(rows: list[dict]) -> str:
    from deer.platform.tables import text_table

    gb = 1 << 30
    shown = [{"entities": r["entities"], "read": r["seconds"]["read"], "queries": r["seconds"]["queries"],
              "prompts": r["seconds"]["entities_seconds"] - r["seconds"]["stand_in_forward_seconds"],
              "forward": r["seconds"]["stand_in_forward_seconds"], "ranking": r["seconds"]["ranking_seconds"],
              "pipeline": r["seconds"]["pipeline_seconds"],
              "rss": max(r["peak_rss_bytes"].values()) / gb, "over_model": (max(r["peak_rss_bytes"].values()) - r["model_rss_bytes"]) / gb,
              "store": r["store_bytes"] / gb} for r in rows]
    columns = (("entities", ">10,"), ("read s", ">8.1f", "read"), ("queries s", ">10.1f", "queries"),
               ("prompts+store s", ">16.1f", "prompts"), ("stand-in fwd s", ">15.1f", "forward"),
               ("ranking s", ">10.1f", "ranking"), ("pipeline s", ">11.1f", "pipeline"), ("peak RSS GB", ">12.2f", "rss"),
               ("over model GB", ">14.2f", "over_model"), ("store GB", ">9.2f", "store"))
    return text_table(shown, columns)


@click.command()
@click.option("--entities", "sizes", type=click.IntRange(min=10), multiple=True,
              help="Entity counts of the KGs to run the pipeline on (repeatable).")
@click.option("--work", type=click.Path(file_okay=False), default="/tmp/deer-scale", show_default=True,
              help="Scratch folder for the KGs and stores (tens of GB at 4.6M entities); outside the clone.")
@click.option("--model", default="smollm2-135m", show_default=True)
@click.option("--keep", is_flag=True, help="Keep each KG's store (default: deleted after its row, to free the disk).")
@click.option("--encoding-sample", type=click.IntRange(min=0), default=0, help="Also measure the real encoder on N entities.")
@click.option("--out", default="results/scale", show_default=True)
@click.option("--one", "one_kg", hidden=True, default=None)
@click.option("--one-cache", hidden=True, default=None)
def main(sizes, work, model, keep, encoding_sample, out, one_kg, one_cache):
    """Write synthetic KGs of each size and run DEER's pipeline on each (one process per KG)."""
    if one_kg:  # the child process: one KG's stages, as JSON on stdout's last line
        print(json.dumps(run_one(Path(one_kg), Path(one_cache), model)))
        return
    if not sizes and not encoding_sample:
        raise click.UsageError("give --entities N (repeatable) and/or --encoding-sample N")
    from synthetic_kg import write_synthetic_kg

    from deer.base.files import package_versions, write_json

    work = Path(work)
    results_file = Path(out) / "scale.json"
    stored = json.loads(results_file.read_text()) if results_file.exists() else {"rows": {}}
    for n in sizes:
        folder, cache = work / f"kg-{n}", work / f"cache-{n}"
        if not (folder / "test.tsv").exists():
            started = time.perf_counter()
            write_synthetic_kg(folder, n, seed=0)
            click.echo(f"wrote the {n:,}-entity KG in {time.perf_counter() - started:.0f} s")
        done = subprocess.run([sys.executable, __file__, "--one", str(folder), "--one-cache", str(cache), "--model", model],
                              stdout=subprocess.PIPE, text=True, check=True, cwd=HERE.parent)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        stored["rows"][str(n)] = row
        stored.update(cpus=os.cpu_count(), versions=package_versions())
        write_json(results_file, stored)  # after each row: a long run keeps what it finished
        click.echo(table([row]))
        if not keep:
            shutil.rmtree(cache, ignore_errors=True)
    if encoding_sample:
        stored["encoding_sample"] = measure_encoding_sample(encoding_sample, work, model)
    stored.update(cpus=os.cpu_count(), versions=package_versions())
    write_json(results_file, stored)
    rows = [stored["rows"][key] for key in sorted(stored["rows"], key=int)]
    click.echo("\n" + table(rows))
    (Path(out) / "scale.md").write_text(table(rows) + "\n")


if __name__ == "__main__":
    main()
