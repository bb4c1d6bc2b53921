"""The cloze benchmarks: LAMA reader, query texts, template-free prompts, agreement statistics, and
every probe's scores on cloze queries equal to the plain path (one whole forward pass per prompt
or statement) on several architectures and both attention back-ends."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from bear_ref.cloze_scoring import single_token_words
from deer.backends.mask_fill import mask_fill_logprobs
from deer.backends.models import LoadedModel
from deer.backends.plain import plain_last_state, plain_logprobs, plain_statement_score
from deer.backends.tokenization import batch_token_ids
from deer.platform.cloze_texts import deer_query_text, lama_rule, mask_sentence
from deer.platform.metrics import cloze_metrics
from deer.platform.templates import candidate_prompt
from deer.runner import run_cloze
from experiments.cloze_report import accuracy_agreement, mode_agreement, pair_agreement
from kg_data.bear import load_bear_dataset
from kg_data.cloze import answer_context, bear_cloze_task, lama_cloze_task, statement
from kg_data.errors import KGFormatError
from kg_data.lama import first_usable_sentence, load_lama
from kg_data.task import ClozeQuery
from tests.benchmark_folders import hand_built_bear, trex_record, write_lama
from tests.tiny_models import build_tiny_model


def shipped_lama() -> Path | None:
    """The LAMA folder the toolkit itself finds (../shared/data, $DEER_DATA_DIR, ...), or None."""
    from kg_data.locate import find_dataset

    try:
        return find_dataset("lama")
    except FileNotFoundError:
        return None

# -- the LAMA reader ------------------------------------------------------------------------------


def test_a_lama_source_named_twice_is_read_once(tmp_path):
    """`--sources TREx,TREx` listed TREx's relations without a data file twice and recorded the source twice."""
    folder = write_lama(tmp_path / "lama")
    once, twice = load_lama(folder, sources=["TREx"]), load_lama(folder, sources=["TREx", "TREx"])
    assert (twice.relations_without_file, twice.selection) == (once.relations_without_file, once.selection)
    assert {key: len(r.facts) for key, r in twice.relations.items()} == {key: len(r.facts) for key, r in once.relations.items()}


def test_lama_reader_on_constructed_files(tmp_path):
    data = load_lama(write_lama(tmp_path / "lama"))
    assert list(data.relations) == ["TREx/P19", "TREx/P106", "Google_RE/place_of_birth", "Squad/squad"]
    assert {k: len(r.facts) for k, r in data.relations.items()} == {"TREx/P19": 3, "TREx/P106": 2, "Google_RE/place_of_birth": 1,
                                                                    "Squad/squad": 1}
    assert data.relations_without_file == ["TREx/P17", "Google_RE/date_of_birth", "Google_RE/place_of_death"]
    assert data.relations["Google_RE/place_of_birth"].template == "[X] was born in [Y] ."
    assert data.relations["Squad/squad"].template is None
    assert data.relations["TREx/P19"].objects == ["Paris", "London", "Zanzibar"]
    assert data.relations["TREx/P19"].facts[0].masked_sentences[1].startswith("Allan Peiper (born")
    assert data.common_vocab == ["Paris", "London", "actor", "France", "lawyer", "gold"]
    sampled = load_lama(tmp_path / "lama", max_facts=2, seed=3)
    assert len(sampled.relations["TREx/P19"].facts) == 2
    assert sampled.relations["TREx/P19"].objects == ["Paris", "London", "Zanzibar"]  # objects: the whole file
    assert [f.fact_id for f in sampled.relations["TREx/P19"].facts] == [f.fact_id for f in load_lama(tmp_path / "lama", max_facts=2, seed=3).relations["TREx/P19"].facts]


def test_lama_reader_names_file_and_line_of_a_bad_fact(tmp_path):
    folder = write_lama(tmp_path / "lama")
    with open(folder / "TREx" / "P106.jsonl", "a") as handle:
        handle.write(json.dumps({"uuid": "x", "obj_label": "", "sub_label": "Y", "evidences": []}) + "\n")
    with pytest.raises(KGFormatError, match=r"P106\.jsonl:3: key 'obj_label' must be a non-empty string"):
        load_lama(folder)
    with pytest.raises(ValueError, match="P999"):
        load_lama(write_lama(tmp_path / "other"), relations=["P999"])


@pytest.mark.parametrize("max_facts, rule", [(True, "an integer >= 1"), (0, ">= 1"), (1.5, "an integer >= 1")])
def test_lama_reader_refuses_a_max_facts_that_is_no_count(tmp_path, max_facts, rule):
    """``max_facts=True`` read as 1 and scored one fact per relation (bool is an int): refused as BEAR's max_instances is."""
    with pytest.raises(ValueError, match=rf"max_facts must be {rule}, got {max_facts!r} \(None: every fact\)"):
        load_lama(write_lama(tmp_path / "lama"), max_facts=max_facts)
    assert len(load_lama(tmp_path / "lama", max_facts=np.int64(2)).relations["TREx/P19"].facts) == 2  # numpy's ints count


@pytest.mark.skipif(shipped_lama() is None, reason="no LAMA data folder found (../shared/data/lama)")
def test_lama_reader_on_the_shipped_files():
    data = load_lama(shipped_lama())
    counts = {key: r.total_facts for key, r in data.relations.items()}
    trex = {k: v for k, v in counts.items() if k.startswith("TREx/")}
    assert len(trex) == 28 and sum(trex.values()) == 22881  # the README's count of this partial copy
    assert (counts["TREx/P19"], counts["TREx/P20"], counts["TREx/P463"], counts["TREx/P108"]) == (944, 953, 225, 383)
    assert (counts["Google_RE/date_of_birth"], counts["Google_RE/place_of_birth"], counts["Google_RE/place_of_death"]) == (1825, 2937, 766)
    assert counts["Squad/squad"] == 305
    assert sorted(k.split("/")[1] for k in data.relations_without_file) == sorted(
        "P17 P30 P36 P37 P47 P131 P190 P276 P279 P361 P530 P1001 P1376 P166 P69 P54 P1923 P102".split())
    assert len(data.common_vocab) == 21018


# -- query texts --------------------------------------------------------------------------------


def test_bear_instance_query_texts_and_candidates_exactly():
    task = bear_cloze_task(hand_built_bear())
    assert len(task.queries) == 6  # 3 templates x 2 instances, template-major
    greece = [q for q in task.queries if q.fact == "Q41"]
    assert [deer_query_text(q) for q in greece] == [
        "The head of government of Greece is",
        "Fill in the blank: ___ served as the head of government for Greece.\nAnswer:",  # answer first: no context
        "Greece was already governed by",
    ]
    assert [lama_rule(q) for q in greece] == ["next-token", "statement", "statement"]
    assert [(q.answer, q.gold, q.row) for q in greece] == [("Kyriakos Mitsotakis", 1, 0)] * 3
    ireland = [q for q in task.queries if q.fact == "Q27"]
    assert deer_query_text(ireland[2]) == "Ireland was already governed by"  # first character capitalised, as BEAR's statement
    assert statement(ireland[1], "Josip Broz Tito") == "Josip Broz Tito served as the head of government for ireland."
    assert task.candidate_sets["P6"].labels == ("Khalifa bin Zayed", "Kyriakos Mitsotakis", "Josip Broz Tito")
    assert candidate_prompt("Josip Broz Tito") == (
        'This sentence: "{word}" means in one word: "{one word}"\nThis sentence: "Josip Broz Tito" means in one word: "')
    assert candidate_prompt("oak", "a tree").startswith('oak - a tree\nThis sentence: "{word}"')


def test_template_free_prompt_from_a_masked_sentence_exactly(tmp_path):
    data = load_lama(write_lama(tmp_path / "lama"))
    task = lama_cloze_task(data, ["Paris", "London", "actor", "lawyer", "gold"], candidate_kinds=["common-vocab"])
    free = {q.fact: q for q in task.queries if q.mode == "template-free"}
    # Fact a: the first sentence starts with the mask (nothing for a causal LM to read): the second is used.
    assert deer_query_text(free["a"]) == answer_context(free["a"]) == "Allan Peiper (born 26 April 1960 in"
    assert statement(free["a"], "Paris") == "Allan Peiper (born 26 April 1960 in Paris, France) is a former Professional cyclist."
    assert lama_rule(free["a"]) == "next-token" and free["a"].template_index == -1
    assert deer_query_text(free["d"]) == "Dora , an"
    assert "e" not in free  # only sentences with two masks
    assert task.info["counts"]["TREx/P106"]["no_usable_sentence"] == 1
    assert task.info["counts"]["TREx/P19"]["object_not_in_vocabulary"] == 1  # Zanzibar
    assert deer_query_text(free["s1"]) == "The"
    template = {q.fact: q for q in task.queries if q.mode == "template"}
    assert "s1" not in template  # SQuAD has no template
    assert deer_query_text(template["a"]) == "Allan Peiper was born in"
    assert lama_rule(template["d"]) == "statement"  # "[X] is a [Y] by profession ."
    assert template["a"].gold == 0 and template["b"].gold == 1
    # A masked LM reads the whole sentence: the first sentence with one mask, even at the start.
    masked = lama_cloze_task(data, ["Paris", "London", "actor", "lawyer", "gold"], candidate_kinds=["relation"], causal=False)
    first = next(q for q in masked.queries if q.fact == "a" and q.mode == "template-free")

    class Tok:
        mask_token = "[MASK]"

    assert mask_sentence(Tok(), first) == "[MASK] is where he lives."
    assert first_usable_sentence(["no mask", "[MASK] x", "a [MASK]"], need_prefix=True) == "a [MASK]"


def test_candidates_per_relation_keep_only_vocabulary_objects(tmp_path):
    data = load_lama(write_lama(tmp_path / "lama"))
    task = lama_cloze_task(data, ["Paris", "London", "actor"], modes=["template"], candidate_kinds=["relation"])
    assert task.candidate_sets["TREx/P19"].labels == ("Paris", "London")
    assert task.candidate_sets["TREx/P106"].labels == ("actor",)
    assert [(q.fact, q.candidates, q.gold) for q in task.queries] == [
        ("a", "TREx/P19", 0), ("b", "TREx/P19", 1), ("d", "TREx/P106", 0), ("g1", "Google_RE/place_of_birth", 0)]


def test_a_repeated_subject_and_object_is_asked_once_by_the_template(tmp_path):
    """LAMA asks a template once per distinct (sub_label, obj_label) ('distinct template facts'); the shipped T-REx P176 holds
    'BMW 3 Series'/'BMW' 4 times, and each repeat was one more identical query in the relation's P@1."""
    folder = write_lama(tmp_path / "lama")
    extra = [trex_record("b2", "Bob", "London", ["Bob lived in [MASK] ."]), trex_record("b3", "Bob", "Paris", ["Bob, [MASK] ."]),
             trex_record("b4", "Bob", "London", ["In [MASK] , Bob ."])]
    with open(folder / "TREx" / "P19.jsonl", "a") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in extra)
    rows = [json.loads(line) for line in (folder / "TREx" / "P19.jsonl").read_text().splitlines()]
    vocabulary = ["Paris", "London"]
    distinct = list(dict.fromkeys((r["sub_label"], r["obj_label"]) for r in rows if r["obj_label"] in vocabulary))
    task = lama_cloze_task(load_lama(folder, relations=["P19"]), vocabulary, candidate_kinds=["relation"])
    template = [(q.subject, q.answer) for q in task.queries if q.mode == "template"]
    assert template == distinct and len(distinct) == 3  # the first of each repeated pair is asked
    free = [q.fact for q in task.queries if q.mode == "template-free"]
    assert free == [r["uuid"] for r in rows if r["obj_label"] in vocabulary]  # every fact keeps its own sentence
    assert task.info["counts"]["TREx/P19"]["template_repeats"] == len(free) - len(distinct) == 2


# -- agreement statistics on constructed inputs --------------------------------------------------


def test_accuracy_agreement_by_hand():
    result = accuracy_agreement([1, 1, 0, 0, 1, 0], [1, 0, 1, 0, 1, 0])
    assert (result["both"], result["only_a"], result["only_b"], result["neither"]) == pytest.approx((2 / 6, 1 / 6, 1 / 6, 2 / 6))
    # observed 4/6; expected 0.5*0.5 + 0.5*0.5 = 0.5; kappa = (2/3 - 1/2) / (1/2) = 1/3
    assert result["cohen_kappa"] == pytest.approx(1 / 3)


def test_pair_agreement_by_hand():
    ranks = np.array([1, 10, 100, 1000, np.nan])
    same = pair_agreement(ranks, ranks, [1, 0, 0, 0, 0], [1, 0, 0, 0, 0], bootstrap=50)
    assert same["n"] == 4 and same["pearson_r_log"] == pytest.approx(1.0) and same["spearman_rho"] == pytest.approx(1.0)
    assert same["accuracy"]["cohen_kappa"] == pytest.approx(1.0)
    reversed_ = pair_agreement([1, 10, 100, 1000], [1000, 100, 10, 1], [1, 0, 0, 0], [0, 0, 0, 1], bootstrap=0)
    assert reversed_["pearson_r_log"] == pytest.approx(-1.0) and reversed_["kendall_tau"] == pytest.approx(-1.0)


def constructed_table() -> pd.DataFrame:
    rows = []
    for fact, (t_rank, f_rank) in enumerate([(1, 2), (3, 1), (20, 40), (2, 2)]):
        for mode, rank in (("template", t_rank), ("template-free", f_rank)):
            rows.append({"source": "TREx" if fact < 3 else "Google_RE", "relation": "P1" if fact < 2 else ("P2" if fact < 3 else "pob"),
                         "fact": str(fact), "row": fact, "mode": mode, "candidates": "common-vocab", "n_candidates": 50,
                         "deer_rank": float(rank), "deer_correct": float(rank == 1), "lama_rank": float(rank), "lama_correct": float(rank == 1)})
    return pd.DataFrame(rows)


def test_cloze_metrics_and_mode_agreement_on_a_constructed_table():
    table = constructed_table()
    metrics = cloze_metrics(table)
    trex = metrics["deer"]["common-vocab"]["template"]["per_source"]["TREx"]
    assert trex["n"] == 3 and trex["p@1"] == pytest.approx(1 / 3) and trex["p@10"] == pytest.approx(2 / 3)
    assert trex["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 20) / 3)
    assert trex["p@1_macro"] == pytest.approx((0.5 + 0.0) / 2)  # P1: 1 of 2, P2: 0 of 1
    # Beside them, the random baseline over 50 candidates and the chance-adjusted index (PyKEEN's).
    assert trex["random"]["p@1"] == trex["random_p@1"] == pytest.approx(1 / 50) and trex["random"]["mr"] == pytest.approx(25.5)
    assert trex["random"]["mrr"] == pytest.approx(sum(1 / k for k in range(1, 51)) / 50)
    assert trex["adjusted"]["p@1"] == pytest.approx((1 / 3 - 1 / 50) / (1 - 1 / 50))
    assert trex["adjusted"]["mr"] == pytest.approx((trex["mr"] - 25.5) / (1 - 25.5)) and trex["mr"] == pytest.approx(8)
    rows = mode_agreement(table, bootstrap=0)
    deer = next(r for r in rows if r["probe"] == "deer")
    assert deer["n"] == 4
    expected = np.corrcoef(np.log10([1, 3, 20, 2]), np.log10([2, 1, 40, 2]))[0, 1]
    assert deer["pearson_r_log"] == pytest.approx(expected)
    assert deer["accuracy"]["both"] == 0 and deer["accuracy"]["only_a"] == pytest.approx(1 / 4)


# -- every probe equals the plain path on cloze queries ------------------------------------------


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_cloze_probes_equal_the_plain_path(tmp_path, family, backend, smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    model = build_tiny_model(family, backend, tokenizer)
    loaded = LoadedModel.from_objects(model, tokenizer, f"tiny-{family}")
    data = load_lama(write_lama(tmp_path / "lama"))
    vocabulary = single_token_words(tokenizer, data.common_vocab, masked=False)
    task = lama_cloze_task(data, vocabulary)
    result = run_cloze(task, loaded, out=tmp_path / "run", token_budget=64, show_progress=False)
    table = result.table
    candidate_ids = {w: tokenizer(" " + w, add_special_tokens=False)["input_ids"] for w in vocabulary}
    for i, q in enumerate(task.queries):
        labels = task.candidate_set(q).labels
        query_ids = batch_token_ids(tokenizer, [deer_query_text(q)], "bos")[0]
        # DEER: cosine of one whole pass per prompt
        query_vector = plain_last_state(model, query_ids)
        vectors = np.stack([plain_last_state(model, ids) for ids in batch_token_ids(tokenizer, [candidate_prompt(w) for w in labels], "bos")])
        cosine = vectors @ query_vector / np.linalg.norm(vectors, axis=1) / np.linalg.norm(query_vector)
        assert table.loc[i, "deer_gold_score"] == pytest.approx(cosine[q.gold], abs=1e-5)
        # BEAR (and statement-scored LAMA): whole statements, one pass each
        if q.candidates != "common-vocab":
            plain = [plain_statement_score(model, ids) for ids in batch_token_ids(tokenizer, [statement(q, w) for w in labels], "bos")]
            assert table.loc[i, "bear_gold_score"] == pytest.approx(plain[q.gold], abs=1e-4)
            assert table.loc[i, "bear_rank"] == _rank(plain, q.gold)
        if lama_rule(q) == "next-token":
            logprobs = plain_logprobs(model, query_ids)[-1]
            plain = [float(logprobs[candidate_ids[w][0]]) for w in labels]
            assert table.loc[i, "lama_gold_score"] == pytest.approx(plain[q.gold], abs=1e-4)
            assert table.loc[i, "lama_rank"] == _rank(plain, q.gold)
        elif q.candidates == "common-vocab":
            assert math.isnan(table.loc[i, "lama_rank"])  # statements are not scored against the whole vocabulary
    # A second run reuses every stored probe and gives the same table.
    again = run_cloze(task, loaded, out=tmp_path / "run", token_budget=64, show_progress=False)
    assert [probe for probe in again.probes if again.metadata_of(probe)["resumed"]] == ["deer", "lama", "bear"]
    pd.testing.assert_frame_equal(again.table, table)
    # The plain backend (one whole pass per text) gives the same table through the same pipeline; it stores nothing.
    plain_run = run_cloze(task, loaded, out=tmp_path / "plain", token_budget=64, show_progress=False, backend="plain")
    assert {plain_run.metadata_of(p)["backend"] for p in plain_run.probes} == {"plain"} and not (tmp_path / "plain" / "parts").exists()
    for probe in ("deer", "lama", "bear"):
        np.testing.assert_allclose(plain_run.table[f"{probe}_gold_score"], table[f"{probe}_gold_score"], atol=1e-4)
        pd.testing.assert_series_equal(plain_run.table[f"{probe}_rank"], table[f"{probe}_rank"])


def _rank(scores, gold) -> float:
    scores = np.asarray(scores)
    return float(1 + np.sum(scores > scores[gold]) + (np.sum(scores == scores[gold]) - 1) / 2)


def test_bear_in_a_cloze_run_equals_the_bear_data_set_probe(tmp_path, smollm2_tokenizer):
    from bear_ref.dataset import bear_format
    from deer.backends.statement_scorer import StatementScorer
    from tests.bear_tables import score_relation

    model = build_tiny_model("llama", "sdpa", smollm2_tokenizer)
    loaded = LoadedModel.from_objects(model, smollm2_tokenizer, "tiny-llama")
    dataset = hand_built_bear()
    result = run_cloze(bear_cloze_task(dataset), loaded, ["deer", "bear"], show_progress=False)
    ours = bear_format(result.table, dataset, "bear").sort_values(["relation", "template", "row"], ignore_index=True)
    reference = score_relation(StatementScorer(model, smollm2_tokenizer), dataset.relations["P6"])
    reference = reference.sort_values(["relation", "template", "row"], ignore_index=True)
    assert ours["rank"].tolist() == reference["rank"].tolist()
    assert ours["predicted_id"].tolist() == reference["predicted_id"].tolist()
    np.testing.assert_allclose(ours["gold_score"], reference["gold_score"], atol=1e-6)


def test_a_cloze_run_resumes_only_under_the_same_model_identity(tmp_path, smollm2_tokenizer):
    """The stored rows of a cloze run are keyed by the run spec's model identity (weights, vocabulary,
    dtype and BOS policy): the same tokenizer with another BOS token (same vocabulary, other scores) is
    scored anew and equals a fresh run, never handed the stored rows."""
    import copy

    from deer.platform.run_spec import model_identity

    model = build_tiny_model("llama", "sdpa", smollm2_tokenizer)
    other_bos = copy.deepcopy(smollm2_tokenizer)
    other_bos.bos_token = other_bos.eos_token
    first, changed = (LoadedModel.from_objects(model, tok, "tiny-llama") for tok in (smollm2_tokenizer, other_bos))
    assert first.tokenizer_fingerprint == changed.tokenizer_fingerprint and model_identity(first) != model_identity(changed)
    task = bear_cloze_task(hand_built_bear())
    run_cloze(task, first, ["bear"], out=tmp_path, show_progress=False)
    assert run_cloze(task, first, ["bear"], out=tmp_path, show_progress=False).metadata["resumed"] is True
    rerun = run_cloze(task, changed, ["bear"], out=tmp_path, show_progress=False)
    fresh = run_cloze(task, changed, ["bear"], show_progress=False)
    assert rerun.metadata["resumed"] is False
    np.testing.assert_array_equal(rerun.table["bear_gold_score"], fresh.table["bear_gold_score"])
    assert len(list((tmp_path / "parts").iterdir())) == 2


def test_masked_lm_lama_equals_one_forward_per_sentence():
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "capital", "of", "france", "is", "paris", "berlin", ".", "was", "born", "in"]
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64)).eval()
    sentences = ["the capital of france is [MASK] .", "[MASK] was born in paris .", "paris is [MASK]"]
    ids = np.asarray([tokenizer.convert_tokens_to_ids(t) for t in ("paris", "berlin", "france")])
    batched = mask_fill_logprobs(model, tokenizer, sentences, ids, token_budget=16)
    for row, sentence in enumerate(sentences):
        encoded = tokenizer(sentence, return_tensors="pt")["input_ids"]
        position = int((encoded[0] == tokenizer.mask_token_id).nonzero()[0, 0])
        with torch.no_grad():
            plain = torch.log_softmax(model(input_ids=encoded).logits[0, position], dim=-1)[torch.as_tensor(ids)]
        np.testing.assert_allclose(batched[row], plain.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="exactly one mask"):
        mask_fill_logprobs(model, tokenizer, ["no mask here"], ids)
    assert single_token_words(tokenizer, ["paris", "parisx", "the"], masked=True) == ["paris", "the"]


def test_deer_refuses_a_masked_lm(tmp_path):
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris", "london", "was", "born", "in", "."]
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    model = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32)).eval()
    loaded = LoadedModel.from_objects(model, tokenizer, "tiny-bert")
    task = lama_cloze_task(load_lama(write_lama(tmp_path / "lama")), ["Paris", "London"], causal=False)
    with pytest.raises(ValueError, match="masked LM"):
        run_cloze(task, loaded, ["deer"], show_progress=False)
    result = run_cloze(task, loaded, ["lama"], show_progress=False)
    assert set(result.table["lama_rule"]) == {"mask-fill"} and result.table["lama_rank"].notna().all()
    plain = run_cloze(task, loaded, ["lama"], show_progress=False, backend="plain")  # one masked sentence per pass
    np.testing.assert_allclose(plain.table["lama_gold_score"], result.table["lama_gold_score"], atol=1e-5)
    assert plain.table["lama_rank"].tolist() == result.table["lama_rank"].tolist()


# -- the commands ---------------------------------------------------------------------------------


def second_tiny_model(folder: Path, smollm2_dir: Path) -> Path:
    """A tiny random GPT-2 with SmolLM2's tokenizer, saved as an HF folder (another model to order)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    build_tiny_model("gpt2", "sdpa", tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_cloze_commands_end_to_end(tmp_path, tiny_clm_dir, smollm2_dir):
    from click.testing import CliRunner

    from experiments.cli import main

    lama = write_lama(tmp_path / "lama")
    out = tmp_path / "cloze"
    result = CliRunner().invoke(main, ["cloze", "--dataset", str(lama), "--model", str(tiny_clm_dir), "--candidates", "relation",
                                       "--bootstrap", "20", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert {"summary.md", "metrics.json", "agreement.json", "cloze"} <= {p.name for p in out.iterdir()}
    table = pd.read_parquet(out / "cloze" / "queries.parquet")
    assert {"deer_rank", "lama_rank", "bear_rank"} <= set(table.columns) and set(table["candidates"]) != {"common-vocab"}
    assert "| relation | template | deer | TREx |" in (out / "summary.md").read_text()
    # `deer probe --kg <LAMA folder>` (0.1's spelling, gone in 0.2) says what to type: `deer cloze --probes deer`
    probe_out = tmp_path / "probe"
    result = CliRunner().invoke(main, ["probe", "--kg", str(lama), "--model", str(tiny_clm_dir), "--out", str(probe_out)])
    assert result.exit_code == 2 and f"deer cloze --dataset {lama} --probes deer" in result.output, result.output
    assert not probe_out.exists()
    # `deer experiment agreement --kg <LAMA folder>` with two models: per-model folders and the orderings
    other = second_tiny_model(tmp_path / "tiny-gpt2", smollm2_dir)
    order_out = tmp_path / "orderings"
    result = CliRunner().invoke(main, ["experiment", "agreement", "--kg", str(lama), "--model", str(tiny_clm_dir), "--model", str(other),
                                       "--probes", "deer,lama", "--bootstrap", "0", "--out", str(order_out)])
    assert result.exit_code == 0, result.output
    orderings = json.loads((order_out / "orderings.json").read_text())
    assert orderings["models"] == [str(tiny_clm_dir), str(other)]
    assert {row["pair"] for row in orderings["orderings"]} == {"deer vs lama"}
    assert all(row["n_models"] == 2 for row in orderings["orderings"])
    # `deer experiment screen --kg <LAMA folder>`: every checkpoint on the benchmark, DEER and the reference
    result = CliRunner().invoke(main, ["experiment", "screen", "--kg", str(lama), "--model", str(tiny_clm_dir), "--model", str(other),
                                       "--reference", "lama", "--out", str(tmp_path / "screen")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "screen" / "orderings.json").read_text())["orderings"]
    bad = CliRunner().invoke(main, ["cloze", "--dataset", str(lama), "--probes", "deer,nope"])
    assert bad.exit_code != 0 and "--probes" in bad.output


def test_deer_on_a_bear_format_data_set_writes_the_comparison(tmp_path, tiny_clm_dir):
    from experiments.benchmarks import probe_benchmark
    from kg_data.bear import save_lm_pub_quiz_folder

    folder = save_lm_pub_quiz_folder(hand_built_bear(), tmp_path / "bear")
    report = probe_benchmark(str(folder), str(tiny_clm_dir), probes=["deer", "bear"], bootstrap=20, out=tmp_path / "out")
    comparison = report["bear_dataset"]
    assert set(comparison["metrics"]) == {"deer", "bear"}
    assert comparison["metrics"]["deer"]["overall"]["instances"] == 2
    assert comparison["agreement"][0]["group"] == "all" and comparison["agreement"][0]["n"] == 6
    assert "DEER accuracy" in (tmp_path / "out" / "bear_dataset" / "summary.md").read_text()


def test_template_vs_template_free_pairs_each_fact_line_once():
    """Bug 16: duplicate LAMA fact ids cross-joined the template-vs-template-free agreement (n = 5 for 3 facts)."""
    from experiments.cloze_report import mode_agreement

    rows = []
    for fact, row, rank in (("f1", 1, 1.0), ("f1", 2, 3.0), ("f2", 3, 7.0)):  # f1 twice in its file, as LAMA has
        for mode, shift in (("template", 0.0), ("template-free", 1.0)):
            rows.append({"source": "T-REx", "relation": "P19", "fact": fact, "row": row, "candidates": "relation",
                         "mode": mode, "deer_rank": rank + shift, "deer_correct": float(rank + shift == 1)})
    table = pd.DataFrame(rows)
    (result,) = mode_agreement(table, bootstrap=0)
    assert result["n"] == 3


def test_an_unknown_relation_is_refused_with_the_relations_there_are(tmp_path):
    """Issue 22.6: a missing LAMA/BEAR relation said only which was missing, not which exist."""
    from tests.benchmark_folders import write_dataset

    with pytest.raises(ValueError, match=r"P999 have no data file .*; relations with one: P106, P19, place_of_birth, squad$"):
        load_lama(write_lama(tmp_path / "lama"), relations=["P999"])
    bear = str(write_dataset(tmp_path / "BEARmini"))  # its metadata also lists P999, which has no file
    with pytest.raises(ValueError, match=r"P404 not in .*metadata_relations.json; it has P36, P37, P999$"):
        load_bear_dataset(bear, relations=["P404"])
    with pytest.raises(ValueError, match=r"P999 have no .jsonl file in .*BEARmini; relations with one: P36, P37$"):
        load_bear_dataset(bear, relations=["P999"])


def test_deer_cloze_prints_its_headline_numbers(tmp_path, tiny_clm_dir):
    """Issue 22.7: `deer cloze` prints P@1 / P@10 / MRR per candidate set, mode and probe (the numbers of metrics.json)."""
    from click.testing import CliRunner

    from experiments.cli import main

    out = tmp_path / "cloze"
    result = CliRunner().invoke(main, ["cloze", "--dataset", str(write_lama(tmp_path / "lama")), "--model", str(tiny_clm_dir),
                                       "--candidates", "relation", "--probes", "deer,lama", "--bootstrap", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    overall = json.loads((out / "metrics.json").read_text())["deer"]["relation"]["template"]["overall"]
    assert "candidates    mode           probe       n     P@1    P@10     MRR  random P@1" in result.output
    assert f"relation      template       deer   {overall['n']:>6}{overall['p@1']:>8.3f}{overall['p@10']:>8.3f}{overall['mrr']:>8.4f}" \
        in result.output


def test_lama_statements_are_lamas_own_and_bears_are_capitalised():
    """LAMA fills [X] and [Y] as its parse_template does, never capitalising (its subject 'iCarly' stays
    'iCarly', its sentence 'paris is ...' stays lower case); a BEAR-format data set's statement is capitalised
    as lm-pub-quiz does.  Every probe reads these texts (BEAR and LAMA the statement, DEER the context)."""
    lama = ClozeQuery("TREx", "P449", "f1", 3, "template", 0, "[X] was originally aired on [Y] .", "iCarly", "Nickelodeon",
                      "relation", 0)
    assert statement(lama, "Nickelodeon") == "iCarly was originally aired on Nickelodeon ."
    assert answer_context(lama) == deer_query_text(lama) == "iCarly was originally aired on"
    free = dataclasses.replace(lama, mode="template-free", template_index=-1, template="[Y] is where he was born .")
    assert statement(free, "paris") == "paris is where he was born ."
    bear = dataclasses.replace(lama, source="bear")
    assert statement(bear, "Nickelodeon") == "ICarly was originally aired on Nickelodeon ."
    assert answer_context(bear) == "ICarly was originally aired on"


def test_a_probe_that_ranks_no_query_is_refused_not_written_as_an_empty_column(tmp_path, tiny_clm_dir):
    """`deer cloze --probes bear --candidates common-vocab`: BEAR ranks a relation's objects only, so it scored none of
    the queries and the run wrote an all-NaN column and an empty headline with exit code 0."""
    from click.testing import CliRunner

    from experiments.cli import main

    lama = write_lama(tmp_path / "lama")
    command = ["cloze", "--dataset", str(lama), "--model", str(tiny_clm_dir), "--modes", "template", "--bootstrap", "0"]
    result = CliRunner().invoke(main, [*command, "--probes", "bear", "--candidates", "common-vocab", "--out", str(tmp_path / "a")])
    assert result.exit_code == 1 and "bear probe ranks none" in result.output
    assert not (tmp_path / "a" / "cloze" / "queries.parquet").exists()
    scored = CliRunner().invoke(main, [*command, "--probes", "bear", "--candidates", "relation", "--out", str(tmp_path / "b")])
    assert scored.exit_code == 0, scored.output
    assert pd.read_parquet(tmp_path / "b" / "cloze" / "queries.parquet")["bear_rank"].notna().all()


def test_deer_ties_the_gold_with_an_answer_of_the_same_label(tmp_path, tiny_clm_dir):
    """Two answers labelled "Paris" have one candidate prompt, so one vector: DEER must score them alike.  The product
    over a set rounded them apart by row (answers 0 and 4 of 6), so the same question ranked its gold "Paris" 4.0
    as the first and 3.0 as the second.  Relations P1 and P2 ask the same question of the same answers, gold the first
    and the second "Paris": each gold ties its twin, so both get one half-integer rank."""
    from deer.backends.models import open_model
    from deer.runner import run_cloze
    from kg_data.bear import load_bear_dataset

    folder = tmp_path / "twins"
    folder.mkdir()
    labels = ["Paris", "Rome", "Oslo", "Bern", "Paris", "Madrid"]
    ids = [f"Q{i}" for i in range(len(labels))]
    relation = {"templates": ["The home of [X] is [Y]."], "answer_space_ids": ids, "answer_space_labels": labels}
    (folder / "metadata_relations.json").write_text(json.dumps({"P1": relation, "P2": relation}))
    for code, gold in (("P1", 0), ("P2", 4)):
        (folder / f"{code}.jsonl").write_text("".join(
            json.dumps({"sub_id": f"S{i}", "sub_label": name, "obj_id": ids[gold], "obj_label": "Paris"}) + "\n"
            for i, name in enumerate(["Ann", "Bob", "Cy", "Dee", "Eve", "Fay"])))
    table = run_cloze(bear_cloze_task(load_bear_dataset(str(folder))), open_model(str(tiny_clm_dir)), ["deer"],
                      show_progress=False).table
    first, second = (table.loc[table["relation"] == code, "deer_rank"].to_numpy() for code in ("P1", "P2"))
    assert np.array_equal(first, second)
    assert np.all(first * 2 % 2 == 1)  # the gold and its twin tie (every other answer has another prompt)


def test_cloze_parts_are_resumed_only_on_the_backend_store_key_they_were_made_with(shifted, tiny_clm_dir, tmp_path):
    """A4: run_cloze's part key lacked the backend's store_key: another caching backend resumed the first one's rows."""
    from deer.backends.models import open_model
    from deer.runner import run_cloze
    from kg_data.bear import load_bear_dataset
    from kg_data.cloze import bear_cloze_task
    from tests.benchmark_folders import write_dataset

    task = bear_cloze_task(load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini"))))
    loaded = open_model(str(tiny_clm_dir))

    def run(backend, out):
        return run_cloze(task, loaded, ["bear"], out, backend=backend, show_progress=False)

    run("hf", tmp_path / "out")
    fresh = run("shifted", tmp_path / "fresh")
    again = run("shifted", tmp_path / "out")
    assert again.metadata_of("bear")["resumed"] is False
    assert again.table["bear_rank"].tolist() == fresh.table["bear_rank"].tolist()


def test_a_model_whose_fingerprint_hashes_no_weights_stores_and_resumes_no_cloze_parts(tiny_clm_dir, tmp_path):
    """A5: run_cloze and run_bear_dataset stored and resumed parts under a given (not hashed) identity, so a rerun after
    the weights changed resumed the old weights' rows; now they keep no parts for such a model, and a store root is
    refused as run_kg refuses cache=True."""
    import torch

    from bear_ref.dataset import run_bear_dataset
    from deer.backends.models import LoadedModel, load_model
    from deer.platform.validate import OptionError
    from deer.runner import run_cloze
    from kg_data.bear import load_bear_dataset
    from kg_data.cloze import bear_cloze_task
    from tests.benchmark_folders import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    task = bear_cloze_task(data)
    model, tokenizer, _ = load_model(str(tiny_clm_dir))  # its own copy: the weights change below
    identity = "in-training:tiny:step-None"
    first = run_cloze(task, LoadedModel.from_objects(model, tokenizer, fingerprint=identity), ["bear"], tmp_path / "out",
                      show_progress=False)
    with torch.no_grad():  # training moved the weights
        torch.manual_seed(1)
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    changed = LoadedModel.from_objects(model, tokenizer, fingerprint=identity)
    fresh = run_cloze(task, changed, ["bear"], None, show_progress=False)
    again = run_cloze(task, changed, ["bear"], tmp_path / "out", show_progress=False)
    assert not (tmp_path / "out" / "parts").exists()
    assert again.metadata_of("bear")["resumed"] is False
    assert again.table["bear_rank"].tolist() == fresh.table["bear_rank"].tolist() != first.table["bear_rank"].tolist()
    with pytest.raises(OptionError, match="does not hash its weights"):
        run_cloze(task, changed, ["deer"], None, show_progress=False, store_root=tmp_path / "stores")
    assert not (tmp_path / "stores").exists()
    run_bear_dataset(data, changed, tmp_path / "dataset", {"relations": None}, show_progress=False)
    assert not (tmp_path / "dataset" / "parts").exists()
