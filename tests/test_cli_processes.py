"""The `deer` command run as separate processes (``tests/cli_processes.py``): an interrupted probe keeps its parts and
resumes to the same ranks, two runs on one cache encode each entity once, and probes saving into one folder at once
all end up in it."""

from __future__ import annotations

import json
import random
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from deer.base.files import read_table
from deer.platform.result import find_ranks_table
from tests.cli_processes import CLI, cli_env, interrupt_after_first_part, run_cli
from tests.store_faults import SHARD_INDEXES, stored_keys

# Entity encoding of this many synthetic entities takes a few seconds with the tiny model and a
# small token budget: long enough to interrupt it after its first part.
N_ENTITIES = 2500


def write_synthetic_kg(folder: Path, n: int) -> Path:
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ra", "tu", "ne", "so", "vi", "da", "pe", "zu", "fo"]

    def word(k: int) -> str:
        return "".join(rng.choice(syllables) for _ in range(k))

    folder.mkdir(parents=True)
    (folder / "entities.tsv").write_text(
        "".join(f"e{i}\t{word(3)} {word(2)}\ta {word(2)} of the {word(3)} {word(2)} kind\n" for i in range(n)))
    (folder / "relations.tsv").write_text("r0\trelated to\nr1\tpart of\n")
    train = [(f"e{rng.randrange(n)}", f"r{rng.randrange(2)}", f"e{rng.randrange(n)}") for _ in range(50)]
    test = [(f"e{i}", f"r{i % 2}", f"e{i + 1}") for i in range(5)]
    for split, rows in (("train", train), ("valid", test[:1]), ("test", test)):
        (folder / f"{split}.tsv").write_text("".join("\t".join(row) + "\n" for row in rows))
    return folder


def probe_args(kg: Path, model: Path, out: Path, probe: str = "deer") -> list[str]:
    return [*CLI, "probe", "--probe", probe, "--kg", str(kg), "--model", str(model), "--k-shot", "2", "--token-budget", "256",
            "--out", str(out)]


def stored_ids(cache: Path) -> set[bytes]:
    """The prompt keys in the cache's prompt stores (entities and queries, keyed by their text)."""
    return set(stored_keys(cache / "embeddings" / "prompts"))


@pytest.fixture(scope="module")
def large_kg(tmp_path_factory) -> Path:
    return write_synthetic_kg(tmp_path_factory.mktemp("large") / "kg", N_ENTITIES)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, large_kg, tiny_clm_dir) -> Path:
    """An uninterrupted run with its own fresh cache."""
    root = tmp_path_factory.mktemp("reference")
    run_cli(probe_args(large_kg, tiny_clm_dir, root / "out"), cli_env(root / "cache"), root / "stderr.txt")
    return root / "out"


# -- interrupting a probe -------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_interrupted_probe_keeps_its_parts_and_resumes(tmp_path, large_kg, tiny_clm_dir, reference_run, sig):
    cache, out = tmp_path / "cache", tmp_path / "out"
    env = cli_env(cache, DEER_STORE_FLUSH_SECONDS="0.2")
    args = probe_args(large_kg, tiny_clm_dir, out)
    returncode = interrupt_after_first_part(args, env, f"embeddings/prompts/*/{SHARD_INDEXES}", cache, tmp_path / "stderr.txt", sig)
    kept = stored_ids(cache)
    assert 0 < len(kept) < N_ENTITIES, f"{len(kept)} entities stored: the interrupt did not land mid-encoding"
    assert not out.exists() or not (out / "metrics.json").exists()
    if sig == signal.SIGINT:
        # Ctrl-C: the pending vectors were written, the run stopped with a message, not a traceback
        # (exit 130 from the CLI's interrupt handler; 1 is click's own "Aborted!").
        assert returncode in (1, 130)
        assert "Traceback" not in (tmp_path / "stderr.txt").read_text()

    run_cli(args, env, tmp_path / "rerun.txt")
    cache_info = json.loads((out / "metadata.json").read_text())["deer"]["cache"]
    assert cache_info["entities_from_cache"] == len(kept)
    assert cache_info["entities_encoded_now"] == N_ENTITIES - len(kept)
    assert len(stored_ids(cache)) == N_ENTITIES + cache_info["queries_encoded_now"]  # the entities, then the 5 queries
    assert cache_info["queries_encoded_now"] == 5
    # The resumed run's results are the uninterrupted run's.
    pd.testing.assert_frame_equal(read_table(find_ranks_table(out)), read_table(find_ranks_table(reference_run)))
    assert (out / "metrics.json").read_bytes() == (reference_run / "metrics.json").read_bytes()


def test_two_runs_on_one_cache_encode_each_entity_once(tmp_path, large_kg, tiny_clm_dir):
    env = cli_env(tmp_path / "cache")
    logs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    processes = []
    for name, log in zip("ab", logs, strict=True):
        with open(log, "w") as stderr:
            processes.append(subprocess.Popen(probe_args(large_kg, tiny_clm_dir, tmp_path / name), env=env,
                                              stdout=subprocess.DEVNULL, stderr=stderr))
    for process, log in zip(processes, logs, strict=True):
        assert process.wait(timeout=300) == 0, log.read_text()
    encoded = [json.loads((tmp_path / name / "metadata.json").read_text())["deer"]["cache"]["entities_encoded_now"]
               for name in "ab"]
    assert sum(encoded) == N_ENTITIES, encoded
    assert (tmp_path / "a" / "metrics.json").read_bytes() == (tmp_path / "b" / "metrics.json").read_bytes()


# -- probes saving into one folder ----------------------------------------------------------------


def test_probe_and_lama_into_one_folder_at_once(tmp_path, tiny_kg_dir, tiny_clm_dir):
    env, out = cli_env(tmp_path / "cache"), tmp_path / "out"
    processes = []
    for probe in ("deer", "lama"):
        with open(tmp_path / f"{probe}.txt", "w") as stderr:
            processes.append((probe, subprocess.Popen(probe_args(tiny_kg_dir, tiny_clm_dir, out, probe), env=env,
                                                      stdout=subprocess.DEVNULL, stderr=stderr)))
    for probe, process in processes:
        assert process.wait(timeout=300) == 0, (tmp_path / f"{probe}.txt").read_text()
    table = read_table(find_ranks_table(out))
    assert {"deer_rank_filtered", "lama_rank_filtered"} <= set(table.columns)
    for name in ("metrics.json", "metadata.json"):
        assert set(json.loads((out / name).read_text())) == {"deer", "lama"}


# -- the flush policy and the store ---------------------------------------------------------------
