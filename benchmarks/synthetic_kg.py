"""A synthetic textual KG of any size in Wikidata5M's shape, seeded, for the scale benchmark and tests.

Wikidata5M (transductive): 4,594,485 entities with names and descriptions, 822 relations,
20,614,279 train, 5,163 valid and 5,133 test triples (about 4.5 train triples per entity).  The
generator keeps those proportions at any entity count: names of one to four made-up words,
descriptions of 8 to 40 words from a made-up vocabulary (a few entities have none, as in the real
files), heads drawn with a heavy tail, and each relation preferring its own range of tails.

Two layouts: ``tsv`` (the README's KG folder: entities.tsv, relations.tsv, train/valid/test.tsv)
and ``wikidata5m`` (the published file names and columns, read by ``--kg wikidata5m``).  Files are
written in chunks, so a 4.6M-entity KG never sits in memory as Python strings.

    python benchmarks/synthetic_kg.py OUT_DIR --entities 4594485 [--layout tsv|wikidata5m] [--seed 0]
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import click
import numpy as np

WIKIDATA5M = {"entities": 4_594_485, "relations": 822, "train": 20_614_279, "valid": 5_163, "test": 5_133}
CHUNK = 200_000  # entities (or triples) generated and written at a time
SYLLABLES = np.array([c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")])


def vocabulary(size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` distinct made-up words of two to four syllables."""
    words: dict[str, None] = {}
    while len(words) < size:
        lengths = rng.integers(2, 5, size)
        picks = rng.integers(0, len(SYLLABLES), (size, 4))
        for n, row in zip(lengths, picks, strict=True):
            words["".join(SYLLABLES[row[:n]])] = None
    return np.array(list(words)[:size])


def _phrases(words: np.ndarray, rng: np.random.Generator, n: int, low: int, high: int) -> list[str]:
    """``n`` phrases of ``low``..``high`` words each."""
    lengths = rng.integers(low, high + 1, n)
    flat = words[rng.integers(0, len(words), int(lengths.sum()))]
    ends = np.cumsum(lengths)
    return [" ".join(flat[end - length:end]) for end, length in zip(ends, lengths, strict=True)]


def shape(n_entities: int) -> dict[str, int]:
    """Counts for a KG of ``n_entities`` in Wikidata5M's proportions (valid and test stay at their size,
    as the benchmark ranks the real number of test queries; at most a tenth of the entities each)."""
    scale = n_entities / WIKIDATA5M["entities"]
    return {"entities": n_entities, "relations": min(WIKIDATA5M["relations"], max(1, n_entities // 10)),
            "train": max(1, round(WIKIDATA5M["train"] * scale)),
            "valid": min(WIKIDATA5M["valid"], max(1, n_entities // 10)),
            "test": min(WIKIDATA5M["test"], max(1, n_entities // 10))}


def _triples(rng: np.random.Generator, n: int, n_entities: int, n_relations: int) -> np.ndarray:
    """(n, 3) triples: heads with a heavy tail (Zipf-like), each relation's tails in its own window."""
    heads = np.minimum((rng.pareto(1.2, n) * n_entities / 50).astype(np.int64), n_entities - 1)
    heads = (heads * 2_654_435_761) % n_entities  # spread the popular heads over the id range
    relations = rng.integers(0, n_relations, n)
    window = max(1, n_entities // max(1, n_relations))
    tails = (relations * window + rng.integers(0, max(window * 4, 1), n)) % n_entities
    return np.stack([heads, relations, tails], axis=1)


def write_synthetic_kg(folder: str | Path, n_entities: int, seed: int = 0, layout: str = "tsv",
                       no_description_share: float = 0.01) -> dict:
    """Write the KG under ``folder``; returns its counts (entities, relations, train, valid, test)."""
    if layout not in ("tsv", "wikidata5m"):
        raise ValueError(f"layout must be 'tsv' or 'wikidata5m', got {layout!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    counts = shape(n_entities)
    rng = np.random.default_rng(seed)
    words = vocabulary(20_000, rng)
    names = {"tsv": ("entities.tsv", "relations.tsv", "train.tsv", "valid.tsv", "test.tsv"),
             "wikidata5m": ("wikidata5m_entity.txt", "wikidata5m_relation.txt", "wikidata5m_transductive_train.txt",
                            "wikidata5m_transductive_valid.txt", "wikidata5m_transductive_test.txt")}[layout]
    text_file = folder / "wikidata5m_text.txt" if layout == "wikidata5m" else None
    with open(folder / names[0], "w", encoding="utf-8") as entities, \
            (open(text_file, "w", encoding="utf-8") if text_file else contextlib.nullcontext()) as texts:
        for start in range(0, n_entities, CHUNK):
            n = min(CHUNK, n_entities - start)
            labels = _phrases(words, rng, n, 1, 4)
            descriptions = _phrases(words, rng, n, 8, 40)
            described = rng.random(n) >= no_description_share
            for i in range(n):
                entity = f"Q{start + i + 1}"
                if layout == "tsv":
                    entities.write(f"{entity}\t{labels[i]}\t{descriptions[i] if described[i] else ''}\n")
                else:  # an alias file (first alias = name, sometimes a second) and a description file
                    alias = f"\t{labels[i]} {words[i % len(words)]}" if i % 3 == 0 else ""
                    entities.write(f"{entity}\t{labels[i]}{alias}\n")
                    if described[i]:
                        texts.write(f"{entity}\t{descriptions[i]}\n")
    relation_labels = _phrases(words, rng, counts["relations"], 1, 3)
    with open(folder / names[1], "w", encoding="utf-8") as relations:
        relations.writelines(f"P{r + 1}\t{label}\n" for r, label in enumerate(relation_labels))
    for split, name in zip(("train", "valid", "test"), names[2:], strict=True):
        with open(folder / name, "w", encoding="utf-8") as out:
            for start in range(0, counts[split], CHUNK):
                n = min(CHUNK, counts[split] - start)
                triples = _triples(rng, n, n_entities, counts["relations"])
                if split != "train":  # held-out queries: heads uniform over the entities, not only the popular ones
                    triples[:, 0] = rng.integers(0, n_entities, n)
                out.writelines(f"Q{h + 1}\tP{r + 1}\tQ{t + 1}\n" for h, r, t in triples.tolist())
    return counts


@click.command()
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--entities", "n_entities", type=click.IntRange(min=10), default=100_000, show_default=True)
@click.option("--layout", type=click.Choice(["tsv", "wikidata5m"]), default="tsv", show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
def main(out_dir, n_entities, layout, seed):
    """Write a synthetic KG of N entities in Wikidata5M's shape to OUT_DIR."""
    counts = write_synthetic_kg(out_dir, n_entities, seed, layout)
    click.echo(f"wrote {out_dir}: " + ", ".join(f"{value:,} {key}" for key, value in counts.items()))


if __name__ == "__main__":
    main()
