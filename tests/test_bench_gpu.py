"""The GPU benchmark's CPU smoke test (issue 23): ``benchmarks/bench_gpu.py`` runs end to end with the
tiny model, the tiny KG and a tiny BEAR-format data set, so that it works the first time a GPU runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_folders import write_dataset

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"


def test_the_gpu_benchmark_runs_end_to_end_on_the_cpu(tmp_path, tiny_kg_dir, tiny_clm_dir):
    bear = write_dataset(tmp_path / "data" / "BEARmini")
    out = tmp_path / "gpu"
    env = {**os.environ, "DEER_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", str(tiny_clm_dir), "--kg", str(tiny_kg_dir), "--device", "cpu",
                           "--k-shot", "2", "--bear-sample", "2", "--bear-dataset", str(bear), "--bear-relations", "P36",
                           "--lm-pub-quiz-batch-size", "4", "--peak-size", "256", "--no-vllm", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "bench_gpu.json").read_text())
    assert report["dtype"] == "float32" and report["measured_peak_tflops"] > 0 and report["peak_memory_bytes"] > 0
    assert report["model"]["fingerprint"] and report["flops_per_token"] > 0
    parts = {row["part"].split(" (")[0]: row for row in report["parts"]}
    assert set(parts) == {"deer test", "deer paper protocol", "query prompts, whole", "query prompts, prefix reuse", "lama",
                          "deer from lama's query pass", "bear sample", "bear data set", "lm-pub-quiz 0.3.3 on the same relations"}
    assert parts["deer test"]["tokens"] > 0 and 0 < parts["deer test"]["share_of_peak"]
    assert parts["deer from lama's query pass"]["same_ranks_as_own_pass"] is True
    assert parts["query prompts, prefix reuse"]["max_abs_difference_vs_whole"] < 1e-4
    assert parts["bear sample"]["statements"] == 2 * 12 and parts["bear sample"]["extrapolated_seconds_all_queries"] > 0
    assert parts["bear sample"]["extrapolated_seconds_paper_protocol"] == pytest.approx(
        parts["bear sample"]["extrapolated_seconds_all_queries"] * 14 / 4, abs=0.01)  # 14 triples in all, 4 test queries; both rounded to 1 ms
    assert 0 <= parts["bear data set"]["bear_score"] <= 1
    assert (out / "bench_gpu.md").read_text().startswith(report["device"])
