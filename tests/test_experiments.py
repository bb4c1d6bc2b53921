"""The experiments end to end on a small KG with the tiny random model (click's CliRunner).

Reference probes (BEAR, LAMA) are reached through ``experiments.reference``.  Where bear_ref
offers no query-set runner yet, these tests plug in a stand-in that scores candidates by a
known rule and ranks them with the shared ranking code, so the experiments' numbers can be
checked against values computed independently from the ranks table.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import stats as scipy_stats

from deer import probes
from deer.base.files import read_table, write_table
from deer.platform.kg_result import tail_token_lengths
from deer.platform.metrics import rank_metrics
from deer.platform.result import find_ranks_table
from deer.platform.run_spec import RunSpec
from deer.platform.task_texts import KG_CANDIDATE_SET
from deer.probes import ProbeScores
from experiments.cli import main
from experiments.report import markdown_table
from experiments.runs import label_runs_apart, load_run, restrict_queries
from experiments.screen import run_screen
from kg_data import build_queries, load_kg

NAMES = [
    "cat", "dog", "oak", "sun", "tea", "ice", "red fox", "sea lion", "snow leopard", "polar bear cub",
    "grey heron", "paper birch", "common garden snail", "european robin redbreast", "mountain pine beetle larva",
    "salt", "rock", "giant pacific octopus of the north", "wild mushroom", "blue whale", "iron", "gold leaf",
    "very small freshwater shrimp species", "moss",
]


def write_experiment_kg(folder: Path, seed: int = 0) -> Path:
    """24 entities whose names span 1 to ~8 tokens; 2 relations; 20 train, 30 test triples."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "entities.tsv").write_text("".join(f"e{i}\t{name}\ta thing called {name}\n" for i, name in enumerate(NAMES)))
    (folder / "relations.tsv").write_text("r0\trelated to\nr1\tpart of\n")
    triples = set()
    while len(triples) < 50:
        head, tail = rng.choice(len(NAMES), size=2, replace=False)
        triples.add((f"e{head}", f"r{rng.integers(2)}", f"e{tail}"))
    rows = sorted(triples)
    rng.shuffle(rows)
    for split, part in (("train", rows[:20]), ("valid", []), ("test", rows[20:])):
        (folder / f"{split}.tsv").write_text("".join("\t".join(r) + "\n" for r in part))
    return folder


@pytest.fixture()
def experiment_kg_dir(tmp_path) -> Path:
    return write_experiment_kg(tmp_path / "experiment_kg")


@pytest.fixture(scope="session")
def second_clm_dir(tmp_path_factory, tiny_clm_dir) -> Path:
    """Another random 2-layer Llama (different seed), for multi-model commands."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(tiny_clm_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    folder = tmp_path_factory.mktemp("tiny_clm_b")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_clm_dir).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def bf16_exact_clm_dir(tmp_path_factory, tiny_clm_dir) -> Path:
    """The tiny Llama with every weight rounded to bfloat16: loading it as float32 or bfloat16 gives
    the same values, so only the dtype (not the values) tells the two runs apart."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(tiny_clm_dir)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).to(torch.float32))
    folder = tmp_path_factory.mktemp("tiny_clm_bf16_exact")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_clm_dir).save_pretrained(folder)
    return folder


class StandInProbe:
    """A reference 'probe' with a known rule, registered under the real probe's name and ranked by the runner.

    bear: score = -(candidate's token count) + jitter < 1 -> longer gold tails rank worse.
    lama: score = -(candidate's index) -> a fixed ordering unrelated to length.
    """

    options: dict = {}

    def __init__(self, name: str):
        self.name = self.summary = name

    def score(self, request):  # a KG's queries come as one candidate set (``kg_benchmark_task``)
        task, loaded = request.task, request.loaded
        names = list(task.candidate_sets[KG_CANDIDATE_SET].labels)
        lengths = tail_token_lengths(loaded.tokenizer, names).astype(np.float64)
        # Ties broken per model, so two models get (slightly) different ranks.
        jitter = np.random.default_rng(int(loaded.fingerprint[:8], 16)).uniform(0, 0.1, size=(len(task.queries), len(names)))
        if self.name == "bear":
            scores = -lengths[None, :] + jitter
        else:
            scores = -np.arange(len(names), dtype=np.float64)[None, :] + jitter
        return ProbeScores(scores=dict(enumerate(scores)), metadata={"stand_in": True})


@pytest.fixture()
def stand_in_references(monkeypatch):
    for name in ("bear", "lama"):
        monkeypatch.setitem(probes._REGISTERED, name, lambda name=name: StandInProbe(name))


def invoke(args: list[str]):
    result = CliRunner().invoke(main, ["experiment", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


# -- small pieces --------------------------------------------------------------------------------


def test_markdown_table_formats_cells():
    table = pd.DataFrame({"probe": ["deer", "bear"], "r": [0.0051234, float("nan")], "n": [500, 500]})
    text = markdown_table(table)
    assert text.splitlines()[0] == "| probe | r | n |"
    assert "| deer | 0.005123 | 500 |" in text
    assert "| bear | - | 500 |" in text


def test_restrict_queries_keeps_gold_and_rebuilds_filter(tiny_kg_dir):
    kg = load_kg(str(tiny_kg_dir))
    queries = build_queries(kg, "train")
    restricted = restrict_queries(queries, [0, 1, 8], n_candidates=5, seed=0)
    assert len(restricted) == 3 and len(restricted.candidates) == 5
    assert restricted.candidates[restricted.gold].tolist() == restricted.triples[:, 2].tolist()
    # e0 _hypernym has tails e3 (query 0) and e2 (query 8): each filters the other if sampled.
    for i, (head, relation, tail) in enumerate(restricted.triples.tolist()):
        expected = {t for h, r, t in kg.all_triples().tolist() if (h, r) == (head, relation) and t != tail}
        got = set(restricted.candidates[restricted.filter_tails[i]].tolist())
        assert got == expected & set(restricted.candidates.tolist())
    assert len(restrict_queries(queries, [0], None, 0).candidates) == kg.n_entities


# -- commands ------------------------------------------------------------------------------------


def test_token_bias_runs_probes_and_reports_correlations(experiment_kg_dir, tiny_clm_dir, tmp_path, stand_in_references):
    out = tmp_path / "token-bias"
    result = invoke(["token-bias", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--probes", "deer,bear",
                     "--runs-dir", str(tmp_path / "runs"), "--out", str(out)])
    numbers = json.loads((out / "token_bias.json").read_text())
    by_probe = {row["probe"]: row for row in numbers["correlations"]}
    run_folder = next((tmp_path / "runs").iterdir())
    table = read_table(find_ranks_table(run_folder))
    assert len(table) == 30 and table["tail_tokens"].nunique() >= 4
    for probe in ("deer", "bear"):
        expected = scipy_stats.pearsonr(table["tail_tokens"], table[f"{probe}_rank_filtered"])
        assert by_probe[probe]["pearson_r"] == pytest.approx(expected.statistic)
        assert by_probe[probe]["pearson_p"] == pytest.approx(expected.pvalue)
        assert by_probe[probe]["n"] == 30
    # The stand-in BEAR ranks by token count, so its bias must show strongly.
    assert by_probe["bear"]["pearson_r"] > 0.7 and by_probe["bear"]["spearman_rho"] > 0.7
    assert -1 <= by_probe["deer"]["pearson_r"] <= 1
    for name in ("token_bias.csv", "token_bias.md", "token_bias_by_length.csv", "token_bias.png"):
        assert (out / name).stat().st_size > 0
    by_length = pd.read_csv(out / "token_bias_by_length.csv")
    assert by_length[by_length.probe == "bear"]["n"].sum() == 30
    assert "BEAR r=0.48" in result.output and f"{by_probe['bear']['pearson_r']:.3f}" in result.output

    # Reuse: the same run folder read back with --run gives the same numbers, no model needed.
    again = tmp_path / "again"
    invoke(["token-bias", "--run", str(run_folder), "--out", str(again)])
    reread = json.loads((again / "token_bias.json").read_text())
    assert reread["correlations"] == numbers["correlations"]


def test_token_bias_refuses_a_run_folder_whose_tail_tokens_were_counted_by_another_rule(experiment_kg_dir, tiny_clm_dir,
                                                                                         tmp_path, stand_in_references):
    """A folder made before the tail-token rule was recorded (its tail_tokens one too many per tail on a SentencePiece
    tokenizer) was read back as if fresh.  It is refused by name, read or reused; run again into it, it reads back
    fresh; a run made now reads back as before."""
    runs_dir, make = tmp_path / "runs", ["--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--probes", "deer,bear"]
    invoke(["token-bias", *make, "--runs-dir", str(runs_dir), "--out", str(tmp_path / "fresh")])
    fresh = json.loads((tmp_path / "fresh" / "token_bias.json").read_text())
    folder = next(runs_dir.iterdir())
    invoke(["token-bias", "--run", str(folder), "--out", str(tmp_path / "reread")])
    assert json.loads((tmp_path / "reread" / "token_bias.json").read_text())["correlations"] == fresh["correlations"]
    metadata = json.loads((folder / "metadata.json").read_text())  # as a folder of an older version: no rule, stale counts
    for probe in ("deer", "bear"):
        metadata[probe].pop("tail_token_rule", None)
    (folder / "metadata.json").write_text(json.dumps(metadata))
    table = read_table(find_ranks_table(folder))
    counted = table["tail_tokens"].tolist()
    table["tail_tokens"] += 1
    write_table(find_ranks_table(folder), table)
    for reading in (["--run", str(folder)], [*make, "--runs-dir", str(runs_dir)]):
        result = CliRunner().invoke(main, ["experiment", "token-bias", *reading, "--out", str(tmp_path / "stale")])
        assert result.exit_code != 0 and str(folder) in result.output and "again" in result.output, result.output
    invoke(["token-bias", *make, "--runs-dir", str(runs_dir), "--no-cache", "--out", str(tmp_path / "again")])
    assert read_table(find_ranks_table(folder))["tail_tokens"].tolist() == counted
    invoke(["token-bias", "--run", str(folder), "--out", str(tmp_path / "reread")])
    assert json.loads((tmp_path / "reread" / "token_bias.json").read_text())["correlations"] == fresh["correlations"]


def test_agreement_from_run_folders_faceted_by_model(experiment_kg_dir, tiny_clm_dir, second_clm_dir, tmp_path,
                                                     stand_in_references):
    runs_dir = tmp_path / "runs"
    out = tmp_path / "agreement"
    invoke(["agreement", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--model", str(second_clm_dir),
            "--runs-dir", str(runs_dir), "--bootstrap", "200", "--out", str(out)])
    numbers = json.loads((out / "agreement.json").read_text())
    assert len(numbers["runs"]) == 2
    assert {row["pair"] for row in numbers["pairs"]} == {"deer vs lama", "deer vs bear", "bear vs lama"}
    assert len(numbers["pairs"]) == 6 and len(numbers["hits"]) == 6
    for row in numbers["pairs"]:
        run = load_run(Path(numbers["runs"][row["model"]]))
        first, second = row["pair"].split(" vs ")
        x, y = run.ranks(probe=first), run.ranks(probe=second)
        assert row["pearson_r"] == pytest.approx(scipy_stats.pearsonr(x, y).statistic)
        assert row["pearson_r_log"] == pytest.approx(scipy_stats.pearsonr(np.log10(x), np.log10(y)).statistic)
        assert row["pearson_r_log_ci_low"] <= row["pearson_r_log"] <= row["pearson_r_log_ci_high"]
        quadrants = [v for k, v in row.items() if k.endswith("hit@10") and k != "pair"]
        assert sum(quadrants) == pytest.approx(1.0)
        assert row["both_hit@10"] == pytest.approx(np.mean((x <= 10) & (y <= 10)))
    for row in numbers["hits"]:
        run = load_run(Path(numbers["runs"][row["model"]]))
        expected = rank_metrics(run.ranks(probe=row["probe"]))
        assert row["hit@10"] == pytest.approx(expected["hit@10"])
        assert row["hit@10_se"] == pytest.approx(expected["hit@10_se"])
    hits = pd.read_csv(out / "hits.csv")
    assert list(hits.columns[:5]) == ["model", "probe", "n", "hit@1", "hit@1_se"]
    assert (out / "agreement_scatter.png").stat().st_size > 0 and (out / "agreement.md").exists()

    # The same folders through --run: identical correlations.
    again = tmp_path / "again"
    folders = sorted(str(p) for p in runs_dir.iterdir())
    invoke(["agreement", "--run", folders[0], "--run", folders[1], "--bootstrap", "200", "--out", str(again)])
    reread = json.loads((again / "agreement.json").read_text())
    assert sorted(r["pearson_r_log"] for r in reread["pairs"]) == pytest.approx(sorted(r["pearson_r_log"] for r in numbers["pairs"]))


def test_without_matplotlib_every_number_is_written_and_the_figures_named(experiment_kg_dir, tiny_clm_dir, second_clm_dir,
                                                                           tmp_path, stand_in_references, monkeypatch):
    """Issue 22.4: without the plots extra, screen exited 1 after probing (no screen.json, no curves)
    and agreement wrote nothing; now the tables and JSON are written and the skipped figures named."""
    import sys

    for name in [n for n in sys.modules if n == "matplotlib" or n.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    runs_dir = tmp_path / "runs"
    screen = invoke(["screen", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--model", str(second_clm_dir),
                     "--reference", "bear", "--runs-dir", str(runs_dir), "--out", str(tmp_path / "screen")])
    numbers = json.loads((tmp_path / "screen" / "screen.json").read_text())
    assert len(numbers["leaderboard"]) == 2 and (tmp_path / "screen" / "leaderboard.csv").exists()
    assert "plots" in numbers["figures_skipped"]["leaderboard"] and not (tmp_path / "screen" / "leaderboard.png").exists()
    assert "figure leaderboard.png not drawn" in screen.output
    folders = sorted(str(p) for p in runs_dir.iterdir())
    invoke(["agreement", "--run", folders[0], "--run", folders[1], "--probes", "deer,bear", "--bootstrap", "50",
            "--out", str(tmp_path / "agreement")])
    agreement = json.loads((tmp_path / "agreement" / "agreement.json").read_text())
    assert agreement["pairs"] and "agreement_scatter" in agreement["figures_skipped"]


def test_agreement_single_token_protocol_is_run_and_labelled(experiment_kg_dir, tiny_clm_dir, tmp_path):
    """--single-token: every probe ranks only single-token names (LAMA told so), labelled as LAMA single-token (the paper's protocol, not its KG)."""
    pytest.importorskip("bear_ref.lama_probe")
    from transformers import AutoTokenizer

    runs_dir, out = tmp_path / "runs", tmp_path / "agreement-single-token"
    invoke(["agreement", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--probes", "deer,lama",
            "--single-token", "--runs-dir", str(runs_dir), "--bootstrap", "0", "--out", str(out)])
    numbers = json.loads((out / "agreement.json").read_text())
    (row,) = numbers["pairs"]
    run = load_run(Path(numbers["runs"][row["model"]]))
    assert run.metadata_of("lama")["single_token"] is True
    lengths = tail_token_lengths(AutoTokenizer.from_pretrained(tiny_clm_dir), NAMES)
    test = load_kg(str(experiment_kg_dir)).triples("test")
    single = lengths[test[:, 2]] == 1
    assert 0 < row["n"] == len(run.table) == int(single.sum()) < len(test)
    assert (run.table["tail_tokens"] == 1).all()
    assert row["candidates"] == run.metadata_of("deer")["candidates"] == int((lengths == 1).sum())
    assert row["lama_protocol"] == "single-token"  # the paper's protocol, but not its KG: no paper number beside it
    assert row["same_protocol_as_paper"] is False and row["paper_pearson_r_log"] is None and row["paper_protocol"] is None
    assert {h["probe"]: h["lama_protocol"] for h in numbers["hits"]} == {"deer": None, "lama": "single-token"}
    assert numbers["lama_protocols"] == {row["model"]: "single-token"} and numbers["settings"]["single_token"]
    assert "4,948 entities" in (out / "agreement.md").read_text()

    # The default protocol ranks every name by its first token, in its own folder, and says so.
    plain_out = tmp_path / "agreement-first-token"
    invoke(["agreement", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--probes", "deer,lama",
            "--runs-dir", str(runs_dir), "--bootstrap", "0", "--out", str(plain_out)])
    (plain,) = json.loads((plain_out / "agreement.json").read_text())["pairs"]
    assert plain["lama_protocol"] == "first-token" and plain["same_protocol_as_paper"] is False
    assert plain["n"] == len(test) and len(list(runs_dir.iterdir())) == 2
    # --single-token over folders whose LAMA was not run so is refused, not silently mislabelled.
    first_token_folder = Path(json.loads((plain_out / "agreement.json").read_text())["runs"][plain["model"]])
    refused = CliRunner().invoke(main, ["experiment", "agreement", "--run", str(first_token_folder), "--single-token",
                                        "--out", str(tmp_path / "refused")])
    assert refused.exit_code != 0 and "single-token protocol" in refused.output


def test_screen_leaderboard_reuses_cache_and_compares_orderings(experiment_kg_dir, tiny_clm_dir, second_clm_dir, tmp_path,
                                                                stand_in_references):
    args = ["screen", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--model", str(second_clm_dir),
            "--reference", "bear", "--runs-dir", str(tmp_path / "runs"), "--metric", "mrr"]
    invoke([*args, "--out", str(tmp_path / "first")])
    result = invoke([*args, "--out", str(tmp_path / "second")])
    numbers = json.loads((tmp_path / "second" / "screen.json").read_text())
    board = numbers["leaderboard"]
    assert [row["place"] for row in board] == [1, 2]
    assert board[0]["mrr"] >= board[1]["mrr"]
    for row in board:
        run = load_run(Path(numbers["runs"][row["model"]]))
        assert row["mrr"] == pytest.approx(rank_metrics(run.ranks(probe="deer"))["mrr"])
        assert row["encoded_now"] == 0 and row["from_cache"] == 30 + 24  # second pass: all from the cache
    ordering = numbers["ordering_agreement"]["mrr"]
    assert ordering["n_models"] == 2
    same_order = ordering["order_a"] == ordering["order_b"]
    assert ordering["spearman_rho"] == pytest.approx(1.0 if same_order else -1.0)
    assert ordering["kendall_tau"] == pytest.approx(1.0 if same_order else -1.0)
    assert ordering["order_a"] == [row["model"] for row in board]
    table = pd.read_csv(tmp_path / "second" / "leaderboard.csv")
    assert table["model"].tolist() == [row["model"] for row in board]
    assert (tmp_path / "second" / "ordering_agreement.md").exists() and (tmp_path / "second" / "leaderboard.png").exists()
    assert "ordering DEER vs bear by mrr" in result.output


def test_compute_time_table_and_fit(tiny_kg_dir, tiny_clm_dir, tmp_path):
    pytest.importorskip("deer.backends.clm_scorer")
    pytest.importorskip("deer.backends.plain")
    out = tmp_path / "compute-time"
    result = invoke(["compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--split", "train",
                     "--query-sizes", "1,3", "--repeats", "2", "--candidates", "6", "--plain-statements", "2",
                     "--deer-queries", "3", "--out", str(out)])
    numbers = json.loads((out / "compute_time.json").read_text())
    assert numbers["target_queries"] == 14 and numbers["entities"] == 12  # all triples x all entities
    methods = [row["method"] for row in numbers["table"]]
    assert methods[0] == "DEER" and len(methods) == 3
    deer = numbers["deer"]
    assert deer["queries"] == 3 and deer["candidates"] == 12 and not deer["measured_at_full_size"]
    assert numbers["table"][0]["speed_up_vs_deer"] == 1.0
    for scorer, statements in (("bear_ref", 6), ("plain", 2)):
        timing = numbers["scorers"][scorer]
        assert timing["sizes"] == [1, 3] and len(timing["times_by_repeat"]) == 2
        assert {w["statements_per_query"] for w in timing["work"]} == {statements}
        assert all(w["statements"] == w["queries"] * statements for w in timing["work"])
        raw, full = np.array(timing["raw_times_by_repeat"]), np.array(timing["times_by_repeat"])
        context = np.array(timing["context_times_by_repeat"])
        assert np.allclose(full, context + np.array(timing["statement_times_by_repeat"]))
        if scorer == "plain":  # no shared per-query work: the whole time x (12 entities / 2 statements)
            assert np.allclose(full, raw * 12 / statements) and not context.any()
            assert "time x N/S" in timing["basis"]
        else:  # only the per-statement part is scaled; the context part is T_1 - |Q| s
            for w in timing["work"]:
                assert w["scaling"] == "context part + per-statement part x N/C"
                assert w["one_statement_work"]["statements"] == w["queries"]
                s = (w["seconds"] - w["seconds_one_statement_per_query"]) / (w["queries"] * (statements - 1))
                assert w["context_seconds"] == pytest.approx(w["seconds_one_statement_per_query"] - w["queries"] * s)
                assert w["seconds_all_entities"] == pytest.approx(
                    w["context_seconds"] + (w["seconds"] - w["context_seconds"]) * 12 / statements)
            assert "(T_C - context part) x N/C" in timing["basis"]
        refit = scipy_stats.linregress(np.tile(timing["sizes"], 2), np.concatenate(timing["times_by_repeat"]))
        fit = timing["extrapolation"]["pooled_fit"]
        assert fit["slope"] == pytest.approx(refit.slope) and fit["intercept"] == pytest.approx(refit.intercept)
        assert timing["extrapolation"]["prediction"] == pytest.approx(refit.intercept + refit.slope * 14)
    table = pd.read_csv(out / "compute_time.csv")
    assert table["speed_up_vs_deer"].iloc[1] == pytest.approx(table["total_seconds"].iloc[1] / table["total_seconds"].iloc[0])
    assert "N = 12 entities" in (out / "compute_time.md").read_text()
    assert "independent random query subsets" in (out / "compute_time.md").read_text()
    # DEER's stage times are stored as measured (perf_counter), not rounded to milliseconds.
    assert deer["seconds_per_query_entity_pair"] == pytest.approx(deer["timings"]["ranking_seconds"] / (3 * 12))
    assert any(round(v, 3) != v for v in deer["timings"].values())
    assert (out / "compute_time_fit.png").stat().st_size > 0 and (out / "compute_time_fits.md").exists()
    assert "paper: DEER 16 min, BEAR 330 days" in result.output
    assert math.isfinite(numbers["table"][1]["total_std_over_runs"])


def test_compute_time_times_deer_at_the_probes_own_budget(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """Bug 7: compute-time timed DEER at a token budget of 8192, not the probe's default, with no option
    to change it; it now uses the probe's default (recorded) unless --token-budget is given."""
    from deer.backends.batching import CPU_TOKEN_BUDGET

    args = ["compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--split", "train", "--query-sizes", "1,2",
            "--repeats", "1", "--candidates", "4", "--plain-statements", "1", "--deer-queries", "2", "--scorers", "bear_ref",
            "--no-warmup"]
    invoke([*args, "--out", str(tmp_path / "default")])
    assert json.loads((tmp_path / "default" / "compute_time.json").read_text())["deer"]["token_budget"] == CPU_TOKEN_BUDGET
    invoke([*args, "--token-budget", "300", "--out", str(tmp_path / "given")])
    assert json.loads((tmp_path / "given" / "compute_time.json").read_text())["deer"]["token_budget"] == 300


def test_compute_time_fit_on_independent_subsets_recovers_a_known_cost(experiment_kg_dir, monkeypatch):
    """A stand-in scorer on a fake clock: 0.5 s per query (context) + 0.01 s per statement.

    Splitting off the context part and scaling only the per-statement part by N/C recovers the
    true cost against all N entities exactly; scaling the whole time (the old way) would not.
    """
    from types import SimpleNamespace

    from experiments import compute_time

    clock = {"now": 0.0}
    calls = []

    def score(queries, loaded, templates, statements_per_query=None, seed=0):
        per_query = min(statements_per_query or len(queries.candidates), len(queries.candidates))
        clock["now"] += len(queries) * (0.5 + 0.01 * per_query)
        calls.append((statements_per_query, sorted(map(tuple, queries.triples.tolist()))))
        return {"statements": len(queries) * per_query}

    monkeypatch.setattr(compute_time, "time", SimpleNamespace(perf_counter=lambda: clock["now"]))
    all_queries = build_queries(load_kg(str(experiment_kg_dir)), "test")
    n_entities = all_queries.kg.n_entities
    timing = compute_time.time_scorer(score, all_queries, None, None, [2, 4, 6], 4, n_candidates=8,
                                      statements_per_query=None, seed=0, split_context=True)
    expected = np.array(timing["sizes"]) * (0.5 + 0.01 * n_entities)
    assert np.allclose(timing["times_by_repeat"], np.tile(expected, (4, 1)))
    assert np.allclose(timing["context_times_by_repeat"], np.tile(np.array(timing["sizes"]) * 0.5, (4, 1)))
    extrapolation = compute_time.repeated_fit_extrapolation(timing["sizes"], timing["times_by_repeat"], 1000)
    assert extrapolation["prediction"] == pytest.approx(1000 * (0.5 + 0.01 * n_entities))
    scaled_whole = np.array(timing["raw_times_by_repeat"]) * n_entities / 8
    assert np.all(scaled_whole > np.array(timing["times_by_repeat"]) * 1.5)  # the old overestimate

    # Every point is its own fresh sample: subsets are not nested within a repeat, repeats differ.
    samples = [queries for spq, queries in calls if spq is None]
    assert len(samples) == 12 and all(w["query_rows"] for w in timing["work"])
    rows = [set(w["query_rows"]) for w in timing["work"]]
    assert any(not rows[i] <= rows[i + 1] for i in range(0, 12, 3))
    assert len({tuple(sorted(r)) for r in rows}) == 12
    # The single-statement timing runs on the same queries as the full one.
    assert [q for spq, q in calls if spq == 1] == samples

    # Without the split (plain scorer) the whole time is scaled, as that scorer shares nothing.
    plain = compute_time.time_scorer(score, all_queries, None, None, [2, 4], 1, n_candidates=None,
                                     statements_per_query=3, seed=0, split_context=False)
    assert np.allclose(plain["times_by_repeat"], np.array(plain["raw_times_by_repeat"]) * n_entities / 3)


def test_real_reference_probes_through_the_adapter(experiment_kg_dir, tiny_clm_dir, tmp_path):
    """bear_ref's own BEAR and LAMA runners, reached through experiments.reference."""
    pytest.importorskip("bear_ref.kg_probe")
    pytest.importorskip("bear_ref.lama_probe")
    out = tmp_path / "token-bias"
    invoke(["token-bias", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--probes", "deer,bear,lama",
            "--subset", "10", "--runs-dir", str(tmp_path / "runs"), "--out", str(out)])
    run_folder = next((tmp_path / "runs").iterdir())
    table = read_table(find_ranks_table(run_folder))
    assert {"deer_rank_filtered", "bear_rank_filtered", "lama_rank_filtered"} <= set(table.columns)
    numbers = {row["probe"]: row for row in json.loads((out / "token_bias.json").read_text())["correlations"]}
    # A random model gives every token roughly the same log-probability, so a summed
    # log-likelihood ranks long names last: the length bias the paper measures, in the extreme.
    assert numbers["bear"]["pearson_r"] > 0.5
    assert numbers["bear"]["pearson_r"] == pytest.approx(
        scipy_stats.pearsonr(table["tail_tokens"], table["bear_rank_filtered"]).statistic)
    # A second agreement run with the same settings (the same run spec) reuses BEAR's and LAMA's ranks.
    agreement = ["agreement", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--subset", "10",
                 "--runs-dir", str(tmp_path / "runs"), "--bootstrap", "0"]
    result = invoke([*agreement, "--out", str(tmp_path / "agreement")])
    assert "bear ranks already in" in result.output and "lama ranks already in" in result.output
    pairs = json.loads((tmp_path / "agreement" / "agreement.json").read_text())["pairs"]
    assert {row["pair"] for row in pairs} == {"deer vs lama", "deer vs bear", "bear vs lama"}
    # Other prompts (2 shots instead of 8): BEAR and LAMA are scored again, into another folder, so
    # DEER at 2 shots is never compared with BEAR/LAMA at 8.
    result = invoke([*agreement, "--k-shot", "2", "--out", str(tmp_path / "agreement-2")])
    assert "ranks already in" not in result.output
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2
    numbers = json.loads((tmp_path / "agreement-2" / "agreement.json").read_text())
    two_shot = load_run(Path(next(iter(numbers["runs"].values()))))
    assert {two_shot.metadata_of(p)["templates"]["k_shot"] for p in ("deer", "bear", "lama")} == {2}
    eight_shot = load_run(next(f for f in folders if f != two_shot.folder))
    assert {eight_shot.metadata_of(p)["templates"]["k_shot"] for p in ("deer", "bear", "lama")} == {8}


@pytest.mark.parametrize(
    "first, second, differs",
    [
        (["--k-shot", "2"], ["--k-shot", "3"], "templates.k_shot"),
        (["--shots", "per-query"], ["--shots", "shared"], "templates.shots"),
        (["--no-query-trailing-space"], ["--query-trailing-space"], "templates.query_trailing_space"),
        (["--seed", "0"], ["--seed", "1"], "templates.seed"),  # no --subset: only the few-shot examples change
        (["--subset", "10", "--seed", "0"], ["--subset", "10", "--seed", "1"], "subset_seed"),
        (["--dtype", "float32"], ["--dtype", "bfloat16"], "dtype"),
    ],
)
def test_reference_ranks_are_reused_only_for_the_same_run_spec(first, second, differs, experiment_kg_dir, bf16_exact_clm_dir,
                                                              tmp_path, stand_in_references):
    runs_dir = tmp_path / "runs"
    common = ["agreement", "--kg", str(experiment_kg_dir), "--model", str(bf16_exact_clm_dir), "--probes", "deer,bear",
              "--runs-dir", str(runs_dir), "--bootstrap", "0", *([] if "--k-shot" in first else ["--k-shot", "2"])]
    assert "bear ranks already in" not in invoke([*common, *first, "--out", str(tmp_path / "a")]).output
    assert "bear ranks already in" in invoke([*common, *first, "--out", str(tmp_path / "b")]).output
    assert "bear ranks already in" not in invoke([*common, *second, "--out", str(tmp_path / "c")]).output
    folders = sorted(runs_dir.iterdir())
    assert len(folders) == 2, "two run specs, two folders"
    specs = []
    for folder in folders:
        stored = RunSpec.read(folder)
        metadata = json.loads((folder / "metadata.json").read_text())
        assert RunSpec.from_dict(metadata["deer"]["run_spec"]) == stored == RunSpec.from_dict(metadata["bear"]["run_spec"])
        specs.append(stored)
    assert differs in specs[0].differences(specs[1])
    # What each agreement compared came from one folder, with one spec.
    for out in ("a", "c"):
        run_folders = json.loads((tmp_path / out / "agreement.json").read_text())["runs"].values()
        assert len(set(run_folders)) == 1


def test_importing_the_plots_keeps_the_callers_matplotlib_backend(tmp_path):
    """A notebook's backend survives `import experiments.plots`; figures still save without a display."""
    import subprocess
    import sys

    code = (
        "import matplotlib; matplotlib.use('svg'); import experiments.plots as plots, numpy as np; "
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend(); "
        "figure, axis = plots._subplots(figsize=(2, 2)); axis.plot(np.arange(3)); "
        f"figure.savefig({str(tmp_path / 'f.png')!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
    assert (tmp_path / "f.png").stat().st_size > 0


def test_each_model_is_opened_once_per_experiment(experiment_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """Bug 8: `deer experiment agreement --single-token` opened each model to read its tokenizer, then
    the run opened and fingerprinted it again."""
    from deer.backends import models

    opened = []
    real = models.load_model

    def counting(name, *args, **kwargs):
        opened.append(str(name))
        return real(name, *args, **kwargs)

    monkeypatch.setattr(models, "load_model", counting)
    invoke(["agreement", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--probes", "deer,lama", "--single-token",
            "--subset", "10", "--bootstrap", "0", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert opened == [str(tiny_clm_dir)]


def test_compute_time_gives_deer_the_probes_default_budget_unless_told(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """The budget reaching the DEER probe (warm-up and timed run) is the probe's default (None, which
    the probe resolves to CPU_TOKEN_BUDGET here) unless --token-budget is given; the JSON records both."""
    from deer.backends.batching import CPU_TOKEN_BUDGET
    from experiments import compute_time

    budgets = []
    real_probe = compute_time.deer_probe

    def capturing_probe(*args, **kwargs):
        budgets.append(kwargs.get("token_budget"))
        return real_probe(*args, **kwargs)

    monkeypatch.setattr(compute_time, "deer_probe", capturing_probe)
    args = ["compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--split", "train", "--query-sizes", "1,2",
            "--repeats", "1", "--candidates", "4", "--deer-queries", "2", "--scorers", "bear_ref", "--device", "cpu"]
    invoke([*args, "--out", str(tmp_path / "default")])
    numbers = json.loads((tmp_path / "default" / "compute_time.json").read_text())
    assert budgets == [None, None]  # warm-up and timed run: the probe picks its own
    assert numbers["deer"]["token_budget"] == CPU_TOKEN_BUDGET and numbers["settings"]["token_budget"] is None
    assert f"DEER token budget {CPU_TOKEN_BUDGET} padded tokens per batch (the probe default)" in \
        (tmp_path / "default" / "compute_time.md").read_text()

    budgets.clear()
    invoke([*args, "--token-budget", "300", "--out", str(tmp_path / "given")])
    numbers = json.loads((tmp_path / "given" / "compute_time.json").read_text())
    assert budgets == [300, 300]  # the warm-up too warms the timed configuration
    assert numbers["deer"]["token_budget"] == 300 and numbers["settings"]["token_budget"] == 300


@pytest.mark.parametrize("command", [
    ["agreement", "--probes", "deer,bear,lama", "--bootstrap", "0"],
    ["token-bias", "--probes", "deer,bear"],
    ["screen", "--reference", "bear"],
])
def test_each_experiment_opens_each_model_once(command, experiment_kg_dir, tiny_clm_dir, second_clm_dir, tmp_path, model_loads,
                                               stand_in_references):
    invoke([*command, "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--model", str(second_clm_dir),
            "--subset", "10", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert model_loads["loads"] == {str(tiny_clm_dir): 1, str(second_clm_dir): 1}
    assert model_loads["fingerprints"] == 2


def test_agreement_single_token_opens_each_model_once(experiment_kg_dir, tiny_clm_dir, second_clm_dir, tmp_path, model_loads):
    """Its tokenizer restricts the queries, then the same open model runs the probes."""
    pytest.importorskip("bear_ref.lama_probe")
    invoke(["agreement", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--model", str(second_clm_dir),
            "--probes", "deer,lama", "--single-token", "--subset", "10", "--bootstrap", "0",
            "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert model_loads["loads"] == {str(tiny_clm_dir): 1, str(second_clm_dir): 1}
    assert model_loads["fingerprints"] == 2


def test_compute_time_opens_its_model_once(tiny_kg_dir, tiny_clm_dir, tmp_path, model_loads):
    invoke(["compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--split", "train", "--query-sizes", "1,2",
            "--repeats", "1", "--candidates", "4", "--plain-statements", "1", "--deer-queries", "2", "--out", str(tmp_path / "out")])
    assert model_loads["loads"] == {str(tiny_clm_dir): 1} and model_loads["fingerprints"] == 1


def test_compute_time_refuses_a_statement_the_model_cannot_take_before_timing(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """The statements the BEAR scorers are timed on go through the length guard first, as in every run: a name
    too long for the model is refused by name before anything is timed (it was fed to the model mid-experiment)."""
    from experiments import compute_time

    def timed(*args, **kwargs):
        raise AssertionError("timing started before the guard")

    monkeypatch.setattr(compute_time, "time_deer", timed)
    monkeypatch.setattr(compute_time, "deer_probe", timed)
    lines = (tiny_kg_dir / "entities.tsv").read_text().splitlines()
    lines[3] = "e3\t" + " ".join(["word"] * 2500) + "\ta thing"
    (tiny_kg_dir / "entities.tsv").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--split", "train", "--query-sizes", "1,2", "--repeats", "1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "entity 'e3'" in result.output and "its statement continuation is" in result.output, result.output


@pytest.fixture()
def two_runs_checkpoint_10(tmp_path, tiny_clm_dir, second_clm_dir) -> list[Path]:
    """run-a/checkpoint-10 and run-b/checkpoint-10: one name, two training runs (other weights)."""
    folders = [tmp_path / "train" / run / "checkpoint-10" for run in ("run-a", "run-b")]
    for source, folder in zip((tiny_clm_dir, second_clm_dir), folders, strict=True):
        shutil.copytree(source, folder)
    return folders


def _screen(args: list[str], out: Path) -> dict:
    invoke(["screen", *args, "--reference", "bear", "--out", str(out)])
    return json.loads((out / "screen.json").read_text())


def test_screen_names_checkpoints_of_two_runs_apart(experiment_kg_dir, two_runs_checkpoint_10, tmp_path, stand_in_references):
    runs_dir = tmp_path / "runs"
    model_args = [arg for folder in two_runs_checkpoint_10 for arg in ("--model", str(folder))]
    numbers = _screen(["--kg", str(experiment_kg_dir), *model_args, "--runs-dir", str(runs_dir)], tmp_path / "screen")
    expected = ["run-a/checkpoint-10", "run-b/checkpoint-10"]
    assert sorted(row["model"] for row in numbers["leaderboard"]) == expected
    assert sorted(numbers["runs"]) == expected and len(set(numbers["runs"].values())) == 2
    assert len(list(runs_dir.iterdir())) == 2  # one run folder per checkpoint
    for row in numbers["reference_leaderboard"]:  # each name's numbers are its own run's
        assert row["mrr"] == pytest.approx(rank_metrics(load_run(Path(numbers["runs"][row["model"]])).ranks(probe="bear"))["mrr"])

    # The same two run folders read back with --run: the same names (from the models they record).
    folders = [arg for folder in sorted(runs_dir.iterdir()) for arg in ("--run", str(folder))]
    reread = _screen(folders, tmp_path / "screen-again")
    assert sorted(reread["runs"]) == expected
    assert {numbers["runs"][label] for label in expected} == {reread["runs"][label] for label in expected}


def test_screen_runs_of_one_model_in_folders_named_alike_stay_apart(experiment_kg_dir, tiny_clm_dir, tmp_path, stand_in_references):
    """--run x/run --run y/run, both of one model: two rows, named by as much of their folders as tells them apart."""
    invoke(["screen", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--reference", "bear",
            "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "first")])
    (made,) = (tmp_path / "runs").iterdir()
    copies = [shutil.copytree(made, tmp_path / parent / "run") for parent in ("x", "y")]
    numbers = _screen([arg for folder in copies for arg in ("--run", str(folder))], tmp_path / "screen")
    label = Path(tiny_clm_dir).name
    assert sorted(numbers["runs"]) == [f"{label} (x/run)", f"{label} (y/run)"]
    assert len(numbers["leaderboard"]) == len(numbers["reference_leaderboard"]) == 2


def test_run_screen_refuses_two_runs_under_one_name(experiment_kg_dir, two_runs_checkpoint_10, tmp_path, stand_in_references):
    """Through the Python API: runs read back alike ('checkpoint-10') are refused, not mixed up (the
    reference rows were looked up by name); label_runs_apart names them apart."""
    model_args = [arg for folder in two_runs_checkpoint_10 for arg in ("--model", str(folder))]
    _screen(["--kg", str(experiment_kg_dir), *model_args, "--runs-dir", str(tmp_path / "runs")], tmp_path / "screen")
    runs = [load_run(folder) for folder in sorted((tmp_path / "runs").iterdir())]
    assert [run.label for run in runs] == ["checkpoint-10", "checkpoint-10"]
    with pytest.raises(ValueError, match="runs share a label"):
        run_screen(runs, tmp_path / "api", reference="bear")
    label_runs_apart(runs)
    numbers = run_screen(runs, tmp_path / "api", reference="bear")
    assert sorted(row["model"] for row in numbers["reference_leaderboard"]) == ["run-a/checkpoint-10", "run-b/checkpoint-10"]
    assert {row["model"]: row["mrr"] for row in numbers["reference_leaderboard"]} == pytest.approx(
        {run.label: rank_metrics(run.ranks(probe="bear"))["mrr"] for run in runs})


def test_probe_series_opens_each_model_as_its_loading_object_says(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """probe_series opened each model with its own dtype=/device= keywords ('auto') and handed run_probes the opened
    model, so a loading=ModelLoading(dtype=...) given to it was dropped without a word; a keyword set beside it is refused."""
    from deer.platform.inputs import as_query_set
    from deer.platform.run_options import ModelLoading
    from deer.platform.templates import PromptTemplates
    from deer.platform.validate import OptionError
    from experiments.runs import probe_series

    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    queries = as_query_set(str(tiny_kg_dir))
    (run,) = probe_series(queries, [str(tiny_clm_dir)], ["deer"], PromptTemplates(k_shot=2), loading=ModelLoading(dtype="bfloat16"),
                          runs_dir=tmp_path / "runs", log=lambda *_: None)
    assert run.metadata["model"]["dtype"] == "bfloat16"
    with pytest.raises(OptionError, match="dtype='float16': given beside loading="):
        probe_series(queries, [str(tiny_clm_dir)], ["deer"], PromptTemplates(k_shot=2), loading=ModelLoading(), dtype="float16")


def test_a_scorer_or_probe_named_twice_is_run_and_tabled_once(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """compute-time timed `--scorers bear_ref,bear_ref` twice (two table rows for one scorer with other totals, its JSON
    keeping one), and token-bias `--probes deer,deer` listed DEER's correlation twice: a name now counts once."""
    import deer
    from experiments import compute_time

    plans = []

    def capture(kg, loaded, templates, out_dir, plan, **kwargs):
        plans.append(plan)
        raise KeyboardInterrupt  # the plan is all this test reads: stop before any timing

    monkeypatch.setattr(compute_time, "run_compute_time", capture)
    CliRunner().invoke(main, ["experiment", "compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                              "--scorers", "bear_ref,bear_ref", "--out", str(tmp_path / "time")])
    assert [list(plan.scorers) for plan in plans] == [["bear_ref"]]

    deer.probe(str(tiny_kg_dir), str(tiny_clm_dir), k_shot=2, out=tmp_path / "run", show_progress=False)
    invoke(["token-bias", "--run", str(tmp_path / "run"), "--probes", "deer,deer", "--out", str(tmp_path / "tb")])
    rows = json.loads((tmp_path / "tb" / "token_bias.json").read_text())["correlations"]
    assert [row["probe"] for row in rows] == ["deer"]
