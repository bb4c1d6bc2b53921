"""The experiments end to end on a small KG with the tiny random model (click's CliRunner).

Reference probes (BEAR, LAMA) are reached through ``experiments.reference``.  Where bear_ref
offers no query-set runner yet, these tests plug in a stand-in that scores candidates by a
known rule and ranks them with the shared ranking code, so the experiments' numbers can be
checked against values computed independently from the ranks table.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import stats as scipy_stats

from deer.cli import main
from deer.metrics import rank_metrics
from deer.ranking import gold_ranks_from_scores, top_k_from_scores
from deer.results import find_ranks_table, save_probe_results, tail_token_lengths
from deer.outputs import read_table
from experiments import reference
from experiments.report import markdown_table
from experiments.runs import load_run, restrict_queries
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


def stand_in_runner(probe: str):
    """A reference 'probe' with a known rule, ranked by the shared ranking code.

    bear: score = -(candidate's token count) + jitter < 1 -> longer gold tails rank worse.
    lama: score = -(candidate's index) -> a fixed ordering unrelated to length.
    """

    def run(queries, loaded, templates, out_dir, show_progress=False, **options):
        kg = queries.kg
        names = [kg.entity_names[e] for e in queries.candidates]
        lengths = tail_token_lengths(loaded.tokenizer, names).astype(np.float64)
        # Ties broken per model, so two models get (slightly) different ranks.
        jitter = np.random.default_rng(int(loaded.fingerprint[:8], 16)).uniform(0, 0.1, size=(len(queries), len(names)))
        if probe == "bear":
            scores = -lengths[None, :] + jitter
        else:
            scores = -np.arange(len(names), dtype=np.float64)[None, :] + jitter
        ranks = gold_ranks_from_scores(scores, queries.gold, queries.filter_tails)
        metadata = {"probe": probe, "model": loaded.metadata(), "stand_in": True}
        return save_probe_results(out_dir, probe, queries, ranks, top_k_from_scores(scores, 10), metadata,
                                  tokenizer=loaded.tokenizer)

    return run


@pytest.fixture()
def stand_in_references(monkeypatch):
    monkeypatch.setattr(reference, "reference_runner", stand_in_runner)


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


def test_missing_reference_probe_is_a_clear_error(experiment_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    def unavailable(probe):
        raise reference.ReferenceUnavailable(f"no {probe} runner here")

    monkeypatch.setattr(reference, "reference_runner", unavailable)
    result = CliRunner().invoke(main, ["experiment", "token-bias", "--kg", str(experiment_kg_dir), "--model",
                                       str(tiny_clm_dir), "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "no bear runner here" in result.output and "Traceback" not in result.output


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
        x, y = run.ranks(first), run.ranks(second)
        assert row["pearson_r"] == pytest.approx(scipy_stats.pearsonr(x, y).statistic)
        assert row["pearson_r_log"] == pytest.approx(scipy_stats.pearsonr(np.log10(x), np.log10(y)).statistic)
        assert row["pearson_r_log_ci_low"] <= row["pearson_r_log"] <= row["pearson_r_log_ci_high"]
        quadrants = [v for k, v in row.items() if k.endswith("hit@10") and k != "pair"]
        assert sum(quadrants) == pytest.approx(1.0)
        assert row["both_hit@10"] == pytest.approx(np.mean((x <= 10) & (y <= 10)))
    for row in numbers["hits"]:
        run = load_run(Path(numbers["runs"][row["model"]]))
        expected = rank_metrics(run.ranks(row["probe"]))
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
        assert row["mrr"] == pytest.approx(rank_metrics(run.ranks("deer"))["mrr"])
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
    pytest.importorskip("bear_ref.clm_scorer")
    pytest.importorskip("bear_ref.plain_scorer")
    out = tmp_path / "compute-time"
    result = invoke(["compute-time", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--split", "train",
                     "--query-sizes", "1,3", "--repeats", "2", "--candidates", "6", "--plain-statements", "2",
                     "--deer-queries", "3", "--out", str(out)])
    numbers = json.loads((out / "compute_time.json").read_text())
    assert numbers["target_queries"] == 14 and numbers["entities"] == 12  # all triples x all entities
    methods = [row["method"] for row in numbers["table"]]
    assert methods[0] == "DEER" and len(methods) == 3, numbers["unavailable"]
    deer = numbers["deer"]
    assert deer["queries"] == 3 and deer["candidates"] == 12 and not deer["measured_at_full_size"]
    assert numbers["table"][0]["speed_up_vs_deer"] == 1.0
    for scorer, statements in (("bear_ref", 6), ("plain", 2)):
        timing = numbers["scorers"][scorer]
        assert timing["sizes"] == [1, 3] and len(timing["times_by_repeat"]) == 2
        assert {w["statements_per_query"] for w in timing["work"]} == {statements}
        assert all(w["statements"] == w["queries"] * statements for w in timing["work"])
        # scaled times are the measured ones x (12 entities / statements per query)
        assert np.allclose(np.array(timing["times_by_repeat"]), np.array(timing["raw_times_by_repeat"]) * 12 / statements)
        refit = scipy_stats.linregress(np.tile(timing["sizes"], 2), np.concatenate(timing["times_by_repeat"]))
        fit = timing["extrapolation"]["pooled_fit"]
        assert fit["slope"] == pytest.approx(refit.slope) and fit["intercept"] == pytest.approx(refit.intercept)
        assert timing["extrapolation"]["prediction"] == pytest.approx(refit.intercept + refit.slope * 14)
    table = pd.read_csv(out / "compute_time.csv")
    assert table["speed_up_vs_deer"].iloc[1] == pytest.approx(table["total_seconds"].iloc[1] / table["total_seconds"].iloc[0])
    assert "scaled to 12 entities" in (out / "compute_time.md").read_text()
    assert (out / "compute_time_fit.png").stat().st_size > 0 and (out / "compute_time_fits.md").exists()
    assert "paper: DEER 16 min, BEAR 330 days" in result.output
    assert math.isfinite(numbers["table"][1]["total_std_over_runs"])


def test_real_reference_probes_through_the_adapter(experiment_kg_dir, tiny_clm_dir, tmp_path):
    """bear_ref's own BEAR and LAMA runners, reached through experiments.reference."""
    pytest.importorskip("bear_ref.kg_probe")
    pytest.importorskip("bear_ref.lama")
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
    # A second agreement run over the same folder reuses BEAR's ranks instead of scoring again.
    result = invoke(["agreement", "--kg", str(experiment_kg_dir), "--model", str(tiny_clm_dir), "--subset", "10",
                     "--runs-dir", str(tmp_path / "runs"), "--bootstrap", "0", "--out", str(tmp_path / "agreement")])
    assert "bear ranks already in" in result.output
    pairs = json.loads((tmp_path / "agreement" / "agreement.json").read_text())["pairs"]
    assert {row["pair"] for row in pairs} == {"deer vs lama", "deer vs bear", "bear vs lama"}
