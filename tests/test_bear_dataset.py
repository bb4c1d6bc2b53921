"""BEAR data set reader and score on small constructed data sets with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import bear_ref
from bear_ref.benchmark import stored_bear_table
from bear_ref.dataset import bear_metrics, check_out_dir, resummarise_bear_dataset, summary_markdown
from deer.base.errors import OptionError
from experiments.cli import main
from kg_data.bear import BearRelation, fill_statement, load_bear_dataset, save_lm_pub_quiz_folder
from kg_data.errors import KGFormatError
from tests.bear_tables import score_relation
from tests.benchmark_folders import CAPITALS, LANGUAGES, edit_answer_label, edit_template, write_dataset


def test_reader_answer_spaces_domains_cardinality(tmp_path):
    data = load_bear_dataset(str(write_dataset(tmp_path / "BEARmini")))
    assert list(data.relations) == ["P36", "P37"] and data.relations_without_file == ["P999"]
    capital, language = data.relations["P36"], data.relations["P37"]
    assert capital.answer_labels == ["Paris", "Berlin", "Rome"] and capital.gold.tolist() == [0, 1, 2]
    assert language.answer_labels == ["French", "German", "Italian"]  # distinct objects, first appearance
    assert language.gold.tolist() == [0, 1, 2, 0]
    assert capital.cardinality == "1:1" and language.cardinality == "N:1"
    assert language.domains == ["Geographic", "Cultural"]
    assert data.n_statements == 3 * 3 * 3 + 4 * 3 * 3


def test_subset_is_seeded_and_keeps_answer_space(tmp_path):
    folder = write_dataset(tmp_path / "BEARmini")
    a = load_bear_dataset(str(folder), relations=["P37"], max_instances=2, seed=1)
    b = load_bear_dataset(str(folder), relations=["P37"], max_instances=2, seed=1)
    assert list(a.relations) == ["P37"] and len(a.relations["P37"]) == 2
    assert a.relations["P37"].rows.tolist() == b.relations["P37"].rows.tolist()
    assert len(a.relations["P37"].answer_ids) == 3 and a.relations["P37"].cardinality == "N:1"
    with pytest.raises(ValueError, match="P5"):
        load_bear_dataset(str(folder), relations=["P5"])


def test_subset_saved_in_lm_pub_quiz_format_reads_back_the_same(tmp_path):
    subset = load_bear_dataset(str(write_dataset(tmp_path / "BEARmini")), max_instances=2, seed=3)
    back = load_bear_dataset(str(save_lm_pub_quiz_folder(subset, tmp_path / "saved")))
    assert list(back.relations) == list(subset.relations) and back.relations_without_file == []
    for code, relation in subset.relations.items():
        again = back.relations[code]
        assert again.templates == relation.templates and again.answer_ids == relation.answer_ids
        assert again.answer_labels == relation.answer_labels and again.domains == relation.domains
        assert again.subject_ids == relation.subject_ids and again.gold.tolist() == relation.gold.tolist()
        assert [again.statements(t) for t in again.templates] == [relation.statements(t) for t in relation.templates]
    with pytest.raises(FileExistsError):
        save_lm_pub_quiz_folder(subset, tmp_path / "saved")


def test_a_lm_pub_quiz_save_stopped_part_way_leaves_no_smaller_data_set(tmp_path, monkeypatch):
    """s12-b: metadata_relations.json (what makes a folder a BEAR-format data set) was written first: a save stopped
    after it (a relation file not written: a full disk) read back as a data set without that relation, no word said.
    Now it is written last, and such a folder is no data set."""

    from kg_data.errors import KGNotFoundError

    data = load_bear_dataset(str(write_dataset(tmp_path / "BEARmini")))
    real = Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name == "P37.jsonl":
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(Path, "write_text", write_text)
        with pytest.raises(OSError):
            save_lm_pub_quiz_folder(data, tmp_path / "saved")
    with pytest.raises(KGNotFoundError, match="holds no metadata_relations.json"):
        load_bear_dataset(str(tmp_path / "saved"))


def test_errors_name_file_and_line(tmp_path):
    folder = write_dataset(tmp_path / "BEARmini")
    lines = (folder / "P36.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"answer_idx": 1', '"answer_idx": 2')
    (folder / "P36.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(KGFormatError, match=r"P36.jsonl:2: answer_idx 2"):
        load_bear_dataset(str(folder))
    (folder / "P36.jsonl").write_text('{"sub_id": "Q1"\n')
    with pytest.raises(KGFormatError, match=r"P36.jsonl:1: invalid JSON"):
        load_bear_dataset(str(folder))
    (folder / "metadata_relations.json").write_text(json.dumps({"P36": {"templates": ["no placeholder"]}}))
    with pytest.raises(KGFormatError, match=r"metadata_relations.json: relation P36: template"):
        load_bear_dataset(str(folder))


def test_a_relation_info_entry_that_is_not_an_object_is_refused(tmp_path):
    """relation_info.json written {code: [domains]} (not {code: {"domains": [...]}}) was read without a word as no
    domains: every relation went to the domain "unknown" and the per-domain accuracy was of that one group."""
    folder = write_dataset(tmp_path / "BEARmini")
    (tmp_path / "relation_info.json").write_text(json.dumps({"P36": ["Geographic"], "P37": {"domains": ["Cultural"]}}))
    with pytest.raises(KGFormatError, match=r"relation_info.json: relation P36: expected an object"):
        load_bear_dataset(str(folder))
    (tmp_path / "relation_info.json").write_text(json.dumps({"P36": {}, "P37": {"domains": ["Cultural"]}}))
    assert load_bear_dataset(str(folder)).relations["P36"].domains == []  # an entry without domains: as before


def test_real_bear_counts():
    try:
        data = load_bear_dataset("bear")
    except Exception as error:  # noqa: BLE001 - optional data
        pytest.skip(f"BEAR not available: {error}")
    assert data.n_instances == 7731 and data.n_statements == 628_497 and len(data.relations) == 60


def test_template_filled_anywhere():
    assert fill_statement("[Y] is the capital of [X].", "France", "paris") == "Paris is the capital of France."
    assert fill_statement("[X]'s capital, [Y], is large.", "france", "Paris") == "France's capital, Paris, is large."
    assert fill_statement("The capital of [X] is [Y].", "A [Y] land", "[X]ville") == "The capital of A [Y] land is [X]ville."


class OracleScorer:
    """Believes ``pairs`` (subject, answer), except that every subject in ``wrong_for`` gets Rome."""

    def __init__(self, pairs, wrong_for: set):
        self.pairs, self.wrong_for, self.calls = pairs, wrong_for, []

    def score_statements(self, statements, progress=None):
        self.calls.append(list(statements))
        return np.asarray([float(self._believes(s)) for s in statements])

    def _believes(self, statement: str) -> bool:
        for subject, answer in self.pairs:
            if subject in statement:
                return ("Rome" if subject in self.wrong_for else answer) in statement
        return False


def test_score_and_metrics_with_known_answers(tmp_path):
    data = load_bear_dataset(str(write_dataset(tmp_path / "BEARmini")))
    pairs = {"P36": [(s, o) for _, s, _, o in CAPITALS], "P37": [(s, o) for _, s, _, o in LANGUAGES]}
    scorers = {code: OracleScorer(pairs[code], wrong_for={"Germany"}) for code in pairs}  # wrong on 1 of 3 capitals
    table = pd.concat([score_relation(scorers[code], relation) for code, relation in data.relations.items()], ignore_index=True)
    assert len(table) == 3 * 3 + 4 * 3
    # One call per template with every instance x every answer, subject-major.
    assert len(scorers["P36"].calls) == 3 and len(scorers["P36"].calls[1]) == 9
    assert scorers["P36"].calls[1][:3] == ["Paris is the capital of France.", "Berlin is the capital of France.", "Rome is the capital of France."]
    metrics = bear_metrics(table, data)
    capital = metrics["per_relation"]["P36"]
    assert capital["accuracy_per_template"] == {0: pytest.approx(2 / 3), 1: pytest.approx(2 / 3), 2: pytest.approx(2 / 3)}
    assert capital["accuracy_std"] == 0 and capital["random_baseline"] == pytest.approx(1 / 3)
    assert capital["accuracy_mean_adjusted"] == pytest.approx((2 / 3 - 1 / 3) / (1 - 1 / 3))  # chance-adjusted: 0.5
    assert metrics["per_relation"]["P37"]["accuracy_mean"] == 1.0
    assert metrics["overall"]["accuracy_mean"] == pytest.approx((2 + 4) / 7)
    assert metrics["per_cardinality"]["1:1"]["accuracy_mean"] == pytest.approx(2 / 3)
    assert metrics["per_domain"]["Cultural"]["accuracy_mean"] == 1.0
    # lm-pub-quiz's divide_support: P37 has 2 domains, so its 4 instances weigh 2 in Geographic
    # (2 of P36's 3 right, all 4 of P37's): (2 + 4/2) / (3 + 4/2), not (2 + 4) / 7.
    assert metrics["convention"]["name"] == "lm-pub-quiz-0.3.3"
    assert metrics["per_domain"]["Geographic"]["accuracy_mean"] == pytest.approx(4 / 5)
    assert metrics["per_domain"]["Geographic"]["support"] == pytest.approx(3 * (3 + 4 / 2))
    assert metrics["per_domain"]["Geographic"]["instances"] == 7
    # Support-weighted mean of the domains = the overall score (what divide_support is for).
    domains = metrics["per_domain"].values()
    assert sum(d["accuracy"] * d["support"] for d in domains) / sum(d["support"] for d in domains) == pytest.approx(
        metrics["overall"]["accuracy"])
    full = bear_metrics(table, data, domain_support="full")
    assert full["per_domain"]["Geographic"]["accuracy_mean"] == pytest.approx(6 / 7)  # the old convention, on request
    wrong = table[~table["correct"]]
    assert set(wrong["sub_label"]) == {"Germany"} and set(wrong["predicted_label"]) == {"Rome"}


def test_summary_support_counts_instances_where_relations_have_different_numbers_of_templates(tmp_path):
    """summary.md's per-domain support (instances, each relation's divided by its number of domains) was the rows'
    support over the number of templates: with P37 cut to one template, Geographic read (3 x 3 + 4 x 1 / 2) / 3 = 3.7
    for its 3 + 4 / 2 = 5 instances, counted here from the data set."""
    folder = write_dataset(tmp_path / "BEARmini")
    metadata = json.loads((folder / "metadata_relations.json").read_text())
    metadata["P37"]["templates"] = metadata["P37"]["templates"][:1]
    (folder / "metadata_relations.json").write_text(json.dumps(metadata))
    data = load_bear_dataset(str(folder))
    pairs = {"P36": [(s, o) for _, s, _, o in CAPITALS], "P37": [(s, o) for _, s, _, o in LANGUAGES]}
    table = pd.concat([score_relation(OracleScorer(pairs[code], set()), relation) for code, relation in data.relations.items()],
                      ignore_index=True)
    by_hand: dict[str, float] = {}
    for relation in data.relations.values():
        for domain in relation.domains:
            by_hand[domain] = by_hand.get(domain, 0.0) + len(relation) / len(relation.domains)
    rows = [line.strip("|").split("|") for line in summary_markdown(bear_metrics(table, data)).splitlines()]
    support = {cells[0].strip(): cells[-1].strip() for cells in rows if cells[0].strip() in by_hand}
    assert support == {domain: f"{value:.1f}" for domain, value in by_hand.items()}


class ConstantScorer:
    """Every statement scores the same: every instance is a tie of all answers."""

    def score_statements(self, statements, progress=None):
        return np.zeros(len(statements))


def test_ties_go_to_the_first_answer_unless_asked(tmp_path):
    data = load_bear_dataset(str(write_dataset(tmp_path / "BEARmini")), relations=["P37"])
    table = score_relation(ConstantScorer(), data.relations["P37"])
    # Answer space French, German, Italian; gold French for Paris and Lyon: argmax (first) is French.
    assert set(table["predicted_label"]) == {"French"} and table["rank"].tolist() == [2.0, 2.0, 2.0, 2.0] * 3
    assert table["correct"].tolist() == [True, False, False, True] * 3
    first, strict = bear_metrics(table, data), bear_metrics(table, data, ties="wrong")
    assert first["overall"]["accuracy_mean"] == pytest.approx(2 / 4)  # lm-pub-quiz: list.index(max(scores))
    assert strict["overall"]["accuracy_mean"] == 0.0  # a tie with the gold counts as wrong
    assert strict["convention"]["ties"] == "wrong" and "ties=wrong" in strict["convention"]["name"]
    assert bear_metrics(table, data, domain_support="full", ties="wrong")["convention"]["name"].startswith("full-domain-support+strict")
    with pytest.raises(ValueError, match="ties=.*must be one of"):
        bear_metrics(table, data, ties="random")


def test_resummarise_recomputes_from_the_table_and_refuses_other_runs(tmp_path):
    from deer.base.files import write_json, write_table

    folder = write_dataset(tmp_path / "BEARmini")
    data = load_bear_dataset(str(folder))
    pairs = {"P36": [(s, o) for _, s, _, o in CAPITALS], "P37": [(s, o) for _, s, _, o in LANGUAGES]}
    table = pd.concat([score_relation(OracleScorer(pairs[c], wrong_for={"Germany"}), r) for c, r in data.relations.items()],
                      ignore_index=True)
    out = tmp_path / "run"
    out.mkdir()
    write_table(out / "instances.parquet", table)
    old = bear_metrics(table, data, domain_support="full", ties="wrong")
    write_json(out / "metrics.json", {"bear": old})
    write_json(out / "metadata.json", {"bear": {"probe": "bear-dataset", "dataset": data.summary(), "metric_convention": old["convention"],
                                                "selection": {"relations": None, "max_instances": None, "seed": 0}}})
    resummarised = resummarise_bear_dataset(out)  # data set from metadata.json
    metrics, metadata = resummarised.metrics.to_dict(), resummarised.metadata
    assert metrics["per_domain"]["Geographic"]["accuracy_mean"] == pytest.approx(4 / 5)
    assert metadata["metric_convention"]["name"] == "lm-pub-quiz-0.3.3"
    assert metadata["resummarised"]["previous_metric_convention"].startswith("full-domain-support+strict")
    assert json.loads((out / "metrics.json").read_text())["bear"]["convention"]["domain_support"] == "divided"
    assert "lm-pub-quiz-0.3.3" in (out / "summary.md").read_text() == summary_markdown(metrics)
    back = resummarise_bear_dataset(out, data, domain_support="full", ties="wrong").metrics.to_dict()
    assert back["per_domain"] == json.loads(json.dumps(old["per_domain"]))  # a result holds metrics as metrics.json does
    with pytest.raises(ValueError, match="does not match the data set"):
        resummarise_bear_dataset(out, load_bear_dataset(str(folder), relations=["P36"]))
    # A KG probe's folder: its ranks table or its metadata.json of other probes is never overwritten.
    kg_run = tmp_path / "kg_run"
    kg_run.mkdir()
    write_json(kg_run / "metadata.json", {"deer": {"probe": "deer"}, "bear": {"probe": "bear"}})
    with pytest.raises(ValueError, match=r"kg_run already holds a metadata.json of other probe runs: deer \(probe deer\), bear \(probe bear\)"):
        check_out_dir(kg_run)
    (kg_run / "ranks.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match=r"kg_run already holds a KG probe run \(ranks.parquet\).*another --out folder"):
        check_out_dir(kg_run)
    check_out_dir(out)  # a BEAR data-set run's own folder is fine


def test_resummarise_refuses_a_data_set_of_other_instances_in_the_same_number(tmp_path):
    """resummarise_bear_dataset compared only the instance count per relation with the given data set: another sample (or
    another folder's relation of as many instances) was taken, and its cardinality and domains written as the run's."""
    from deer.base.files import write_json, write_table

    folder = write_dataset(tmp_path / "BEARmini")
    data = load_bear_dataset(str(folder), relations=["P37"], max_instances=2, seed=0)
    pairs = {"P37": [(s, o) for _, s, _, o in LANGUAGES]}
    out = tmp_path / "run"
    out.mkdir()
    write_table(out / "instances.parquet", score_relation(OracleScorer(pairs["P37"], wrong_for=set()), data.relations["P37"]))
    write_json(out / "metrics.json", {"bear": {"overall": {}}})
    write_json(out / "metadata.json", {"bear": {"probe": "bear-dataset", "dataset": data.summary(), "selection": data.selection}})
    other = load_bear_dataset(str(folder), relations=["P37"], max_instances=2, seed=7)
    assert other.relations["P37"].subject_ids != data.relations["P37"].subject_ids
    with pytest.raises(ValueError, match="does not match the data set"):
        resummarise_bear_dataset(out, other)
    assert resummarise_bear_dataset(out, data).metrics["instances"] == 2  # its own data set: accepted


def test_bear_dataset_on_smollm2(smollm2, tmp_path):
    """Real model on three capitals: gold scores are whole-statement log-likelihoods (1e-4 nats)."""
    from deer.backends.plain import plain_conditional_scores
    from deer.backends.statement_scorer import StatementScorer

    model, tokenizer = smollm2
    data = load_bear_dataset(str(write_dataset(tmp_path / "BEARmini")), relations=["P36"])
    relation = data.relations["P36"]
    table = score_relation(StatementScorer(model, tokenizer), relation)
    for template_index in (0, 1):  # [Y] last and [Y] first
        statements = [fill_statement(relation.templates[template_index], "France", a) for a in relation.answer_labels]
        plain = plain_conditional_scores(model, tokenizer, "", statements)  # one pass per whole statement
        row = table[(table["template"] == template_index) & (table["sub_label"] == "France")].iloc[0]
        assert row["gold_score"] == pytest.approx(plain[0], abs=1e-4)
        assert row["correct"] == (int(np.argmax(plain)) == 0)  # argmax == gold, as lm-pub-quiz
    assert table["correct"].mean() >= 2 / 3  # SmolLM2 knows most European capitals


def test_run_key_names_dtype_tokenizer_bos_and_kg_folders_are_refused(tiny_clm_dir, tmp_path):
    """The resume key holds what the scores depend on; a KG probe's folder is never overwritten."""
    import dataclasses

    from bear_ref.dataset import resume_key, run_bear_dataset
    from deer.backends.models import open_model
    from deer.backends.statement_scorer import StatementScorer
    from deer.backends.tokenization import bos_policy

    loaded = open_model(str(tiny_clm_dir))
    folder = write_dataset(tmp_path / "BEARmini")
    data = load_bear_dataset(str(folder))
    selection = {"relations": None, "max_instances": None, "seed": 0}
    out = tmp_path / "run"
    metadata = run_bear_dataset(data, loaded, out, selection, show_progress=False).metadata
    (key_file,) = (out / "parts").glob("*/key.json")
    key = json.loads(key_file.read_text())
    assert key["dtype"] == "float32" and key["tokenizer_fingerprint"] == loaded.tokenizer_fingerprint
    assert key["bos"] == bos_policy(loaded.tokenizer) and key["method"] == metadata["scoring"] == "clm-prefix-trie-sum-logprob"
    assert key_file.parent.name == metadata["resume_key"] and metadata["metric_convention"]["name"] == "lm-pub-quiz-0.3.3"
    scorer = StatementScorer(loaded.model, loaded.tokenizer)
    assert resume_key(data, dataclasses.replace(loaded, dtype="bfloat16"), selection, scorer)["dtype"] == "bfloat16"
    assert resume_key(data, dataclasses.replace(loaded, tokenizer_fingerprint="other"), selection, scorer) != key

    # Resumed from the parts under another convention: nothing re-scored, the convention named.
    rerun = run_bear_dataset(data, loaded, out, selection, show_progress=False, domain_support="full", ties="wrong")
    metrics, again = rerun.metrics.to_dict(), rerun.metadata
    assert again["relations_resumed"] == ["P36", "P37"] and again["work"]["statements_scored_now"] == 0
    assert metrics["convention"]["name"].startswith("full-domain-support+strict")
    result = CliRunner().invoke(main, ["bear-dataset", "--dataset", str(folder), "--out", str(out), "--resummarise"])
    assert result.exit_code == 0, result.output
    assert "metric convention: lm-pub-quiz-0.3.3" in result.output
    assert json.loads((out / "metrics.json").read_text())["bear"]["convention"]["domain_support"] == "divided"

    kg_run = tmp_path / "kg_run"
    kg_run.mkdir()
    stored = {"deer": {"probe": "deer"}, "bear": {"probe": "bear"}}
    (kg_run / "metadata.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match="kg_run already holds a metadata.json of other probe runs"):
        run_bear_dataset(data, loaded, kg_run, selection, show_progress=False)
    assert json.loads((kg_run / "metadata.json").read_text()) == stored and not (kg_run / "parts").exists()


def test_an_edited_relation_is_scored_anew_on_resume_and_a_stale_run_is_refused(tiny_clm_dir, tmp_path):
    """Bug 14: a rerun into the same --out after a template and an answer label were edited reused the
    stored relations (the resume key held the data folder's path, not its content), and `deer cloze
    --bear-run` accepted a run made on the old data."""
    import shutil

    import bear_ref
    from deer.backends.models import open_model

    folder = write_dataset(tmp_path / "BEARmini")
    loaded = open_model(str(tiny_clm_dir))
    out = tmp_path / "run"
    bear_ref.bear_dataset(str(folder), loaded, out=out, show_progress=False)
    stored_bear_table(out, load_bear_dataset(str(folder)), loaded)  # the same data: accepted
    shutil.copytree(out, tmp_path / "old")  # the run made on the data before the edits
    metadata = json.loads((folder / "metadata_relations.json").read_text())
    metadata["P37"]["templates"][0] = "In [X] one speaks [Y]."
    metadata["P36"]["answer_space_labels"][0] = "Lutetia"  # an answer label
    (folder / "metadata_relations.json").write_text(json.dumps(metadata))
    edited = load_bear_dataset(str(folder))
    resumed = bear_ref.bear_dataset(str(folder), loaded, out=out, show_progress=False)
    fresh = bear_ref.bear_dataset(str(folder), loaded, out=tmp_path / "fresh", show_progress=False)
    assert resumed.metadata["relations_resumed"] == []  # both relations were edited: nothing reused
    pd.testing.assert_frame_equal(resumed.table, fresh.table)
    assert resumed.metrics.to_dict()["overall"] == fresh.metrics.to_dict()["overall"]
    with pytest.raises(ValueError, match="relations scored on other data .*: P36, P37"):
        stored_bear_table(tmp_path / "old", edited, loaded)


def test_the_plain_backend_cross_checks_a_bear_data_set_run(tiny_clm_dir, tmp_path):
    """`deer bear-dataset --backend plain` scores each statement in one whole forward pass: the same
    instances (ranks, predictions) and gold scores as the trie (1e-4 nats), and no parts stored."""


    folder = write_dataset(tmp_path / "BEARmini")
    tables = {}
    for backend in ("hf", "plain"):
        out = tmp_path / backend
        result = CliRunner().invoke(main, ["bear-dataset", "--dataset", str(folder), "--model", str(tiny_clm_dir),
                                           "--backend", backend, "--out", str(out)])
        assert result.exit_code == 0, result.output
        tables[backend] = pd.read_parquet(out / "instances.parquet")
        assert json.loads((out / "metadata.json").read_text())["bear"]["backend"] == backend
        assert (out / "parts").exists() == (backend == "hf")
    hf, plain = tables["hf"], tables["plain"]
    assert hf[["relation", "template", "row", "predicted_id", "rank"]].equals(plain[["relation", "template", "row", "predicted_id", "rank"]])
    np.testing.assert_allclose(plain["gold_score"], hf["gold_score"], atol=1e-4)


def test_a_folder_holding_a_bear_data_set_run_refuses_a_run_made_otherwise(tiny_clm_dir, tmp_path):
    """The default `deer bear-dataset` folder is named by data set, relations, subset size and model alone: a second run
    with another --seed (or PLL variant, dtype, backend) replaced the first's results there, exit 0.  A folder holds one
    data-set run: one made otherwise is refused before scoring, naming what differs; the same settings run again."""


    folder, out = write_dataset(tmp_path / "BEARmini"), tmp_path / "out"

    def run(*options):
        return CliRunner().invoke(main, ["bear-dataset", "--dataset", str(folder), "--model", str(tiny_clm_dir),
                                         "--max-instances", "1", "--out", str(out), *options])

    assert run("--seed", "0").exit_code == 0
    first = (out / "instances.parquet").read_bytes(), (out / "metadata.json").read_text()
    for other, named in ((["--seed", "1"], "selection"), (["--backend", "plain"], "backend")):
        refused = run("--seed", "0", *other) if other[0] != "--seed" else run(*other)
        assert refused.exit_code == 1 and "made otherwise" in refused.output and named in refused.output, refused.output
        assert ((out / "instances.parquet").read_bytes(), (out / "metadata.json").read_text()) == first  # kept as it was
    again = run("--seed", "0")
    assert again.exit_code == 0, again.output
    assert json.loads((out / "metadata.json").read_text())["bear"]["relations_resumed"]  # the same run, resumed


def test_a_run_summary_with_non_ascii_domains_reads_back_as_written_in_any_locale(tmp_path):
    """summary.md is written as UTF-8 (a domain named "Géographie"); it was read back in the locale's encoding: under
    LC_ALL=C (PYTHONUTF8=0) RunResult.load failed (UnicodeDecodeError), under another 8-bit locale it decoded the UTF-8
    bytes in that locale's encoding."""
    import os
    import subprocess
    import sys

    from deer.base.files import write_json, write_table

    folder = write_dataset(tmp_path / "BEARmini")
    (folder.parent / "relation_info.json").write_text(json.dumps({"P36": {"domains": ["Géographie – 地理"]},
                                                                  "P37": {"domains": ["Cultural"]}}), encoding="utf-8")
    data = load_bear_dataset(str(folder))
    pairs = {"P36": [(s, o) for _, s, _, o in CAPITALS], "P37": [(s, o) for _, s, _, o in LANGUAGES]}
    out = tmp_path / "run"
    out.mkdir()
    write_table(out / "instances.parquet", pd.concat([score_relation(OracleScorer(pairs[c], wrong_for=set()), r)
                                                      for c, r in data.relations.items()], ignore_index=True))
    write_json(out / "metrics.json", {"bear": {"overall": {}}})
    write_json(out / "metadata.json", {"bear": {"probe": "bear-dataset", "dataset": data.summary(), "selection": data.selection}})
    resummarise_bear_dataset(out, data)  # writes summary.md
    written = (out / "summary.md").read_bytes().decode("utf-8")
    assert "Géographie – 地理" in written
    code = "import sys; from deer.platform.result import load_result; print(ascii(load_result(sys.argv[1]).summary))"
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    env.pop("PYTHONIOENCODING", None)
    read = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env)
    assert read.returncode == 0, read.stderr[-500:]
    assert read.stdout.strip() == ascii(written)


def test_cloze_summary_template_rows_count_their_own_rows_where_relations_have_fewer_templates(tiny_clm_dir, tmp_path):
    """bear_dataset/summary.md's template rows showed the overall random baseline and instance count: where P37 has one
    template and P36 three, template 1 and 2 hold only P36's rows (another answer-space size), counted here by hand."""
    from experiments.benchmarks import probe_benchmark

    folder = write_dataset(tmp_path / "BEARmini")
    metadata = json.loads((folder / "metadata_relations.json").read_text())
    metadata["P37"]["templates"] = metadata["P37"]["templates"][:1]
    metadata["P36"]["answer_space_ids"].append("Q1490")
    metadata["P36"]["answer_space_labels"].append("Tokyo")  # 4 answers for P36, 3 for P37: the baselines differ
    (folder / "metadata_relations.json").write_text(json.dumps(metadata))
    probe_benchmark(str(folder), str(tiny_clm_dir), probes=["deer", "bear"], bootstrap=0, out=tmp_path / "run",
                    show_progress=False)
    table = pd.read_parquet(tmp_path / "run" / "cloze" / "queries.parquet")
    lines = (tmp_path / "run" / "bear_dataset" / "summary.md").read_text().splitlines()
    assert "(7 instances x 1-3 templates)" in lines[0]
    for template, part in table.groupby("template_index"):
        row = next(line for line in lines if line.startswith(f"| template {template} |"))
        accuracy, _, random, instances = (cell.strip() for cell in row.strip("|").split("|")[1:])
        assert (random, instances) == (f"{(1 / part['n_candidates']).mean():.3f}", str(len(part)))
        assert accuracy == f"{part['deer_correct'].mean():.3f}"


class _NanForGold:
    """Scores every statement 0.0, except the gold statement of each instance: NaN (a failed score)."""

    def __init__(self, gold_statements):
        self.gold_statements = set(gold_statements)

    def score_statements(self, statements, progress=None):
        return [float("nan") if s in self.gold_statements else 0.0 for s in statements]


def test_a_failed_gold_score_is_never_correct_in_the_bear_data_set():
    """Bug 1: the BEAR data-set rank rule gave a NaN gold score rank 0.5 and np.argmax picked the NaN,
    so a failed score counted as a correct answer."""
    relation = BearRelation(code="P1", templates=["[X] is in [Y]."], answer_ids=["a", "b", "c"], answer_labels=["A", "B", "C"],
                            subject_ids=["s", "t"], subject_labels=["S", "T"], gold=np.array([0, 2]), rows=np.array([0, 1]),
                            domains=[], cardinality="N:1", total_instances=2)
    gold_statements = ["S is in A.", "T is in C."]
    table = score_relation(_NanForGold(gold_statements), relation)
    assert not table["correct"].any()
    assert table["rank"].tolist() == [3.0, 3.0]  # behind both competitors
    assert table["predicted_id"].tolist() == ["b", "a"]  # the first of the highest valid scores


# -- a loaded data set is scored as loaded ---------------------------------------------------------


def test_a_loaded_bear_dataset_is_scored_as_loaded_and_its_selection_recorded(tmp_path):
    """bear_dataset(BearDataset, relations=...) scored every relation while recording the selection asked for."""
    folder = write_dataset(tmp_path / "BEARmini")
    whole = load_bear_dataset(str(folder))
    with pytest.raises(OptionError, match="the BearDataset given was loaded with"):
        bear_ref.bear_dataset(whole, "no-such-model-anywhere", relations=["P37"], max_instances=1)
    part = load_bear_dataset(str(folder), relations=["P37"], max_instances=2, seed=1)
    assert part.summary()["selection"] == {"relations": ["P37"], "max_instances": 2, "seed": 1}
    assert whole.summary()["selection"] == {"relations": None, "max_instances": None, "seed": 0}


def test_a_seed_given_beside_a_sampled_bear_dataset_is_refused_not_dropped(tmp_path):
    """bear_dataset(BearDataset sampled with seed 0, seed=5) scored seed 0's sample without a word (only relations and
    max_instances were compared with the data set's selection)."""
    folder = write_dataset(tmp_path / "BEARmini")
    sampled = load_bear_dataset(str(folder), max_instances=2, seed=0)
    with pytest.raises(OptionError, match="the BearDataset given was loaded with"):
        bear_ref.bear_dataset(sampled, "no-such-model-anywhere", seed=5)
    with pytest.raises(OptionError, match="the BearDataset given was loaded with"):
        bear_ref.bear_dataset(load_bear_dataset(str(folder)), "no-such-model-anywhere", seed=5)


# -- a rerun into the same folder resumes only what was made of the same data and backend ----------


@pytest.mark.parametrize("edit", [edit_template, edit_answer_label])
def test_a_rerun_after_an_edit_rescores_that_relation_and_equals_a_fresh_run(tmp_path, loaded, edit):
    folder = write_dataset(tmp_path / "BEARmini")
    out = tmp_path / "run"
    before = bear_ref.bear_dataset(str(folder), loaded, out=out, show_progress=False)
    edited = edit(folder)
    (untouched,) = {"P36", "P37"} - {edited}
    resumed = bear_ref.bear_dataset(str(folder), loaded, out=out, show_progress=False)
    fresh = bear_ref.bear_dataset(str(folder), loaded, out=tmp_path / "fresh", show_progress=False)
    # Only the relation whose content is unchanged is reused; the edited one is scored anew.
    assert resumed.metadata["relations_resumed"] == [untouched]
    pd.testing.assert_frame_equal(resumed.table, fresh.table)
    assert resumed.metrics.to_dict()["overall"] == fresh.metrics.to_dict()["overall"]
    assert resumed.metrics.to_dict()["per_relation"] == fresh.metrics.to_dict()["per_relation"]
    # The edit changes that relation's scores, so a stale reuse could not pass the comparison above.
    old_scores = before.table.loc[before.table["relation"] == edited, "gold_score"].to_numpy()
    new_scores = resumed.table.loc[resumed.table["relation"] == edited, "gold_score"].to_numpy()
    assert (old_scores != new_scores).any()


def test_bear_dataset_parts_are_resumed_only_on_the_backend_store_key_they_were_made_with(shifted, tiny_clm_dir, tmp_path):
    """A3: a rerun on another caching backend into the same folder resumed the first backend's parts."""
    from bear_ref.dataset import run_bear_dataset
    from deer.backends.models import open_model
    from kg_data.bear import load_bear_dataset
    from tests.benchmark_folders import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    loaded = open_model(str(tiny_clm_dir))

    def run(backend, out):
        return run_bear_dataset(data, loaded, out, {"relations": None}, backend=backend, show_progress=False)

    first = run("hf", tmp_path / "out")
    (tmp_path / "out" / "metadata.json").unlink()  # the hf run stopped after storing its parts (a finished one refuses
    fresh = run("shifted", tmp_path / "fresh")     # a run made otherwise: test_bear_dataset)
    again = run("shifted", tmp_path / "out")
    assert again.metadata["relations_resumed"] == []
    assert again.table["rank"].tolist() == fresh.table["rank"].tolist()
    assert again.metadata["resume_key"] != first.metadata["resume_key"]
