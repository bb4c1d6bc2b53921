"""Several probes on one KG in one run (``deer.runner.run_kg``, `deer probe --probe lama,deer`): the one run
loop scores them on one model load, LAMA's pass hands DEER its query vectors, and every number equals
the one each probe gives run alone."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import bear_ref
import deer
from bear_ref.lama_probe import restrict_to_single_token
from deer.backends.models import open_model
from deer.base.errors import OptionError
from deer.platform.result import find_ranks_table
from deer.platform.templates import PromptTemplates
from deer.runner import run_kg, run_probe
from experiments.cli import main
from kg_data import build_queries, load_kg


@pytest.fixture()
def tiny_setup(tiny_kg_dir, tiny_clm_dir):
    kg = load_kg(str(tiny_kg_dir))
    return build_queries(kg, "test"), open_model(str(tiny_clm_dir)), PromptTemplates(k_shot=2)


def _table(folder) -> pd.DataFrame:
    path = find_ranks_table(folder)
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def test_three_probes_in_one_run_give_each_probes_own_numbers(tiny_setup, tmp_path):
    queries, loaded, templates = tiny_setup
    run = run_kg(["deer", "lama", "bear"], queries, loaded, templates=templates, out=tmp_path / "one", show_progress=False)
    assert run.probes == ["deer", "lama", "bear"]  # the order given, though DEER ran after LAMA
    together = [run[probe] for probe in run.probes]
    alone = {name: run_probe(name, queries, loaded, templates=templates, out=tmp_path / name, show_progress=False)
             for name in ("deer", "lama", "bear")}
    for result in together:
        np.testing.assert_array_equal(result.ranks("raw"), alone[result.probe].ranks("raw"))
        np.testing.assert_array_equal(result.ranks("filtered"), alone[result.probe].ranks("filtered"))
        assert result.metrics.to_dict() == alone[result.probe].metrics.to_dict()
    shared, own = together[0], alone["deer"]
    np.testing.assert_allclose(shared.arrays["query_embeddings"], own.arrays["query_embeddings"], rtol=1e-5, atol=1e-6)
    assert shared.metadata["cache"]["queries_encoded_now"] == shared.metadata["cache"]["queries_from_cache"] == 0  # handed on
    assert shared.metadata["cache"]["query_embeddings_given"] is True
    assert own.metadata["cache"]["queries_encoded_now"] == len(queries)
    table = _table(tmp_path / "one")
    assert {f"{probe}_rank_filtered" for probe in ("deer", "lama", "bear")} <= set(table.columns)
    assert set(json.loads((tmp_path / "one" / "metadata.json").read_text())) == {"deer", "lama", "bear"}


def test_lamas_single_token_queries_are_every_probes(tiny_setup, tmp_path):
    """Where one probe ranks fewer queries (LAMA's single-token protocol), every probe of the run ranks those."""
    queries, loaded, templates = tiny_setup
    run = run_kg(["lama", "deer"], queries, loaded, options={"lama": {"single_token": True}}, templates=templates,
                 out=tmp_path / "one", show_progress=False)
    lama, shared = run["lama"], run["deer"]
    restricted = restrict_to_single_token(queries, loaded.tokenizer)
    assert len(restricted) < len(queries)  # the fixture has multi-token names: the protocol keeps fewer
    for result in (lama, shared):
        np.testing.assert_array_equal(result.queries.triples, restricted.triples)
    alone = bear_ref.lama(queries, loaded, templates=templates, single_token=True, show_progress=False)
    np.testing.assert_array_equal(lama.ranks(), alone.ranks())
    own = deer.probe(restricted, loaded, templates=templates, show_progress=False)
    np.testing.assert_array_equal(shared.ranks(), own.ranks())
    assert len(_table(tmp_path / "one")) == len(restricted)


def test_a_run_of_several_probes_refuses_what_it_cannot_honour(tiny_setup):
    queries, loaded, templates = tiny_setup
    with pytest.raises(ValueError, match="each probe once"):
        run_kg(["lama", "lama"], queries, loaded, templates=templates)
    with pytest.raises(OptionError) as stray:
        run_kg(["lama"], queries, loaded, options={"bear": {"pll_variant": "original"}}, templates=templates)
    assert stray.value.option == "options" and stray.value.value == "bear"
    with pytest.raises(OptionError) as loose:  # a probe's own option given as a run keyword would be dropped
        run_kg(["lama"], queries, loaded, templates=templates, single_token=True)
    assert loose.value.option == "single_token"
    with pytest.raises(OptionError) as value:
        run_kg(["lama", "deer"], queries, loaded, options={"lama": {"single_token": "often"}}, templates=templates)
    assert value.value.option == "single_token"


def test_the_cli_runs_several_probes(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    common = ["--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot", "2", "--no-cache"]
    new = CliRunner().invoke(main, ["probe", "--probe", "lama,deer", "--probe-option", "single_token=true", *common,
                                    "--out", str(tmp_path / "new")])
    assert new.exit_code == 0, new.output
    assert "query vectors handed on by another probe" in new.output
    assert {"lama_rank_raw", "deer_rank_raw"} <= set(_table(tmp_path / "new").columns)
    unowned = CliRunner().invoke(main, ["probe", "--probe", "lama,deer", "--probe-option", "pll_variant=original", *common])
    assert unowned.exit_code != 0 and "--probe-option pll_variant=original" in unowned.output
    assert "no probe of this run has such an option" in unowned.output



def test_the_cli_says_how_many_queries_and_candidates_single_token_ranks(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """The KG line printed before the run counts every query and candidate; where LAMA's single-token protocol ranks
    fewer, the printed metrics (n = those queries) were of a run that metadata.json records with fewer, unsaid."""
    monkeypatch.chdir(tmp_path)
    args = ["probe", "--probe", "lama", "--probe-option", "single_token=true", "--kg", str(tiny_kg_dir), "--model",
            str(tiny_clm_dir), "--k-shot", "2", "--no-cache", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    lama = json.loads((tmp_path / "out" / "metadata.json").read_text())["lama"]
    assert "KG tiny_kg: 4 test queries x 12 candidates" in result.output and lama["queries"] < 4
    assert f"ranked {lama['queries']} of those queries x {lama['candidates']} candidates" in result.output


def test_relations_that_share_a_name_get_their_own_per_relation_blocks(tiny_kg_dir):
    """Two relations (distinct ids) of one name: each its own per-relation block, keyed "name (id)", in the
    metrics and the ranks table's relation column alike (the read-back makes the blocks again from that column);
    relations of distinct names keep their plain names as keys."""
    from deer.platform.kg_result import probe_metrics, query_frame
    from deer.platform.metrics import observed_rank_metrics
    from deer.platform.ranking import rank_scores

    plain = build_queries(load_kg(tiny_kg_dir), "test")
    scores = np.random.default_rng(0).normal(size=(len(plain), len(plain.candidates)))
    keys = set(probe_metrics(plain, rank_scores(scores, plain).ranks)["per_relation"])
    assert keys == set(plain.kg.relation_names[r] for r in plain.triples[:, 1])  # distinct names: keys unchanged

    (tiny_kg_dir / "relations.tsv").write_text("_hypernym\tis a\ncapital_of\tis a\n_has_part\thas part\n")
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    ranks = rank_scores(scores, queries).ranks
    per_relation = probe_metrics(queries, ranks)["per_relation"]
    assert {key: block["raw"]["n"] for key, block in per_relation.items()} == {"is a (_hypernym)": 3, "is a (capital_of)": 1}
    table = query_frame(queries)
    assert set(table["relation"]) == set(per_relation)
    assert observed_rank_metrics(ranks.raw, ranks.filtered, table["relation"].tolist())["per_relation"] == per_relation


def test_a_relation_named_like_another_relations_label_keeps_its_own_block(tiny_kg_dir):
    """Two relations named "is a" are labelled "is a (_hypernym)" and "is a (capital_of)"; a third relation named
    "is a (_hypernym)" took the first one's label, so their queries were pooled into one per-relation block (n 3 + 1).
    Each relation now has its own block, its queries counted here from the triples."""
    from deer.platform.kg_result import probe_metrics, query_frame
    from deer.platform.ranking import rank_scores

    (tiny_kg_dir / "relations.tsv").write_text("_hypernym\tis a\ncapital_of\tis a\n_has_part\tis a (_hypernym)\n")
    with open(tiny_kg_dir / "test.tsv", "a") as handle:
        handle.write("e8\t_has_part\te11\n")
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    scores = np.random.default_rng(0).normal(size=(len(queries), len(queries.candidates)))
    per_relation = probe_metrics(queries, rank_scores(scores, queries).ranks)["per_relation"]
    by_id = np.bincount(queries.triples[:, 1], minlength=queries.kg.n_relations)
    assert sorted(block["raw"]["n"] for block in per_relation.values()) == sorted(by_id[by_id > 0].tolist())
    assert set(query_frame(queries)["relation"]) == set(per_relation)
