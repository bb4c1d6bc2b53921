"""LAMA on a benchmark reads each answer's token where the sentence has it: at a masked LM's mask, the
token the filled sentence has at the mask's position (byte-level BPE's space-prefixed one, WordPiece's as
before); after a causal LM's context, the statement's first token after the context's tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bear_ref.cloze_scoring import answer_token_ids, single_token_words
from deer.backends.models import LoadedModel
from deer.platform.cloze_texts import mask_sentence
from deer.runner import run_cloze
from kg_data.cloze import lama_cloze_task
from kg_data.lama import load_lama
from tests.benchmark_folders import write_lama
from tests.toy_tokenizers import roberta_style_tokenizer, sentencepiece_tokenizer


@pytest.fixture(scope="module")
def roberta_tokenizer(smollm2_dir):
    return roberta_style_tokenizer(smollm2_dir)


def wordpiece_tokenizer():
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "capital", "of", "france", "is", "london", ".", "par", "##is",
             "ox", "##en", "gold"]
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)


def test_masked_answer_token_is_the_filled_sentences_token_at_the_mask(roberta_tokenizer):
    tok = roberta_tokenizer
    sentence = "The capital of France is " + tok.mask_token + " ."
    position = tok(sentence)["input_ids"].index(tok.mask_token_id)
    labels = ["Paris", "London", "Berlin"]
    at_mask = [tok(sentence.replace(tok.mask_token, label))["input_ids"][position] for label in labels]
    assert tok.convert_ids_to_tokens(at_mask) == ["ĠParis", "ĠLondon", "ĠBerlin"]
    assert answer_token_ids(tok, labels, masked=True).tolist() == at_mask
    # one token as it fills the mask (with the space the mask stands for), not as the bare word
    words = ["Paris", "London", "capital", "Zanzibarx"]
    assert single_token_words(tok, words, masked=True) == [w for w in words if len(tok(" " + w, add_special_tokens=False)["input_ids"]) == 1]
    bare_only = next(w for w in ("ris", "aris", "ondon", "apital") if len(tok(w, add_special_tokens=False)["input_ids"]) == 1
                     and len(tok(" " + w, add_special_tokens=False)["input_ids"]) > 1)
    assert single_token_words(tok, [bare_only], masked=True) == []


def test_wordpiece_masked_answers_are_as_before():
    """BERT's WordPiece: the word's own first piece, as the mask has it (what it gave before)."""
    tok = wordpiece_tokenizer()
    labels = ["Paris", "London", "oxen", "gold", "zzz"]
    assert answer_token_ids(tok, labels, masked=True).tolist() == [ids[0] for ids in tok(labels, add_special_tokens=False)["input_ids"]]
    assert single_token_words(tok, ["paris", "parisx", "the", "London", "Gold", "oxen"], masked=True) == ["the", "London", "Gold"]


def tiny_roberta(tok) -> LoadedModel:
    """A RoBERTa-like masked LM of random weights (seed 0) over ``tok``."""
    import transformers

    torch.manual_seed(0)
    model = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        pad_token_id=tok.pad_token_id, max_position_embeddings=tok.pad_token_id + 300)).eval()
    return LoadedModel.from_objects(model, tok, "tiny-roberta")


def test_masked_lm_lama_on_a_benchmark_equals_one_forward_pass_per_filled_sentence(tmp_path, roberta_tokenizer):
    """A RoBERTa-like masked LM: each candidate's score is log p(the token the filled sentence has at the
    mask) in one whole forward pass of the masked sentence, with the mask at a sentence's start too."""
    tok = roberta_tokenizer
    loaded = tiny_roberta(tok)
    labels = ["Paris", "London", "actor", "France", "lawyer", "gold"]
    task = lama_cloze_task(load_lama(write_lama(tmp_path / "lama")), labels, causal=False)
    result = run_cloze(task, loaded, ["lama"], show_progress=False)
    starts = 0
    for row, query in enumerate(task.queries):
        sentence = mask_sentence(tok, query)
        starts += sentence.startswith(tok.mask_token)
        encoded = tok(sentence)["input_ids"]
        position = encoded.index(tok.mask_token_id)
        with torch.no_grad():
            logprobs = torch.log_softmax(loaded.model(input_ids=torch.tensor([encoded])).logits[0, position], -1)
        candidates = task.candidate_set(query).labels
        filled = [tok(sentence.replace(tok.mask_token, label))["input_ids"][position] for label in candidates]
        expected = logprobs[torch.as_tensor(filled)].numpy()
        np.testing.assert_allclose(result.table["lama_gold_score"][row], expected[query.gold], atol=1e-5)
        rank = 1 + np.sum(expected > expected[query.gold]) + (np.sum(expected == expected[query.gold]) - 1) / 2
        assert result.table["lama_rank"][row] == rank, (sentence, candidates)
    assert starts > 0  # a mask at the sentence's start, where the token has no space before it


def next_token_task(rows, labels):
    """A benchmark of (mode, template, subject, answer) rows over one candidate set."""
    from kg_data.cloze import ClozeQuery
    from kg_data.task import CandidateSet, Task

    queries = [ClozeQuery("lama", "P1", f"f{i}", i + 1, mode, 0 if mode == "template" else -1, template, subject, answer, "set",
                          labels.index(answer)) for i, (mode, template, subject, answer) in enumerate(rows)]
    return Task("next-token", queries, {"set": CandidateSet(tuple(labels))}, {})


@torch.inference_mode()
def assert_next_token_rows_equal_whole_passes(result, task, model, tokenizer):
    """Each next-token row's scores: log p(the statement's first token after the context) in one whole
    forward pass of the statement (the token located by character offsets)."""
    from deer.backends.plain import plain_logprobs, statement_ids_and_start
    from deer.platform.cloze_texts import deer_query_text
    from kg_data.cloze import statement

    assert set(result.table["lama_rule"]) == {"next-token"}
    for row, query in enumerate(task.queries):
        context = deer_query_text(query)
        expected = []
        for label in task.candidate_set(query).labels:
            ids, start = statement_ids_and_start(tokenizer, context, statement(query, label)[len(context):])
            expected.append(float(plain_logprobs(model, ids[:start])[start - 1, ids[start]]))
        expected = np.asarray(expected)
        np.testing.assert_allclose(result.table["lama_gold_score"][row], expected[query.gold], atol=1e-4, err_msg=query.template)
        rank = 1 + np.sum(expected > expected[query.gold]) + (np.sum(expected == expected[query.gold]) - 1) / 2
        assert result.table["lama_rank"][row] == rank, query.template


def test_causal_lama_next_token_is_the_statements_first_token_with_no_space_before_the_slot(tiny_clm):
    """Byte-level BPE: after 'album "' or 'France (' the label's first token has no space ('T', not 'ĠTitanic');
    after 'the cap' the statement's first token ('Ġcapital') straddles the context's end."""
    model, tokenizer = tiny_clm
    labels = ["Titanic", "FR", "Paris", "ital", "e"]
    task = next_token_task([("template-free", 'The band released the album "[Y]" in 1999.', "x", "Titanic"),
                            ("template-free", "Paris is the capital of France ([Y]).", "x", "FR"),
                            ("template", "The capital of [X] is [Y] .", "France", "Paris"),
                            ("template-free", "Paris is the cap[Y] of France.", "x", "ital"),
                            # LAMA's text is not capitalised: the query text is the statement's start all the same
                            ("template-free", "paris is the capital of France ([Y]).", "x", "FR")], labels)
    result = run_cloze(task, LoadedModel.from_objects(model, tokenizer, "tiny-clm"), ["lama"], show_progress=False)
    assert_next_token_rows_equal_whole_passes(result, task, model, tokenizer)
    assert result.metadata_of("lama")["straddling_prefixes"] == 1  # 'Paris is the' before 'Ġcapital'


def test_causal_lama_next_token_on_a_legacy_sentencepiece_tokenizer():
    """Llama-2's legacy SentencePiece: " Paris" starts with a lone '▁' (every label's first token alike); the
    statement's first token after "... is" is '▁Pa'."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = sentencepiece_tokenizer()
    assert tokenizer.convert_ids_to_tokens(tokenizer(" Paris", add_special_tokens=False)["input_ids"])[0] == "▁"
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=tokenizer.bos_token_id,
                                         eos_token_id=tokenizer.eos_token_id)).eval()
    labels = ["Paris", "Berlin", "Rome", "FR"]
    task = next_token_task([("template", "The capital of [X] is [Y] .", "France", "Paris"),
                            ("template", "The capital of [X] is [Y] .", "Germany", "Berlin"),
                            ("template-free", 'The album "[Y]" (FR) was released.', "x", "Rome"),
                            ("template-free", "Rome is in Italy ([Y]).", "x", "FR")], labels)
    result = run_cloze(task, LoadedModel.from_objects(model, tokenizer, "tiny-llama2"), ["lama"], show_progress=False)
    assert_next_token_rows_equal_whole_passes(result, task, model, tokenizer)


def test_causal_single_token_words_count_the_tokens_a_statement_has_on_a_legacy_sentencepiece_tokenizer():
    """Llama-2's legacy SentencePiece: " Rome" alone is ['▁', '▁Rome'] (every word two tokens or more, so the causal
    single-token vocabulary was empty and a LAMA run stopped with 'no query to score'); in "[X] is [Y] ." the statement
    has '▁Rome' after "is", one token, and its first token is the one the causal probe reads ('▁Pa' for Paris, not '▁')."""
    from deer.backends.boundary import split_statements

    tok = sentencepiece_tokenizer()
    words = ["Paris", "Rome", "France", "Berlin", "capital", "Italy"]
    assert all(len(tok(" " + w, add_special_tokens=False)["input_ids"]) > 1 for w in words)
    in_statement = split_statements(tok, "France is", [" " + w for w in words]).continuation_ids
    assert single_token_words(tok, words, masked=False) == [w for w, ids in zip(words, in_statement, strict=True) if len(ids) == 1]
    assert single_token_words(tok, words, masked=False) == ["Rome", "France", "capital"]
    assert answer_token_ids(tok, words, masked=False).tolist() == [ids[0] for ids in in_statement]


def test_causal_single_token_words_on_byte_level_bpe_are_as_before(tiny_clm):
    """SmolLM2's byte-level BPE (the tiny causal model's): the words one token as " word" stay the vocabulary, in order."""
    tok = tiny_clm[1]
    pieces = tok.convert_ids_to_tokens(list(range(0, len(tok), 7)))
    words = [tok.convert_tokens_to_string([p]).strip() for p in pieces] + ["Paris", "New York", "e", "-", "1999", "'s"]
    words = [w for w in words if w]
    before = [w for w, ids in zip(words, tok([" " + w for w in words], add_special_tokens=False)["input_ids"], strict=True)
              if len(ids) == 1]
    assert len(before) > 1000 and single_token_words(tok, words, masked=False) == before
    firsts = [ids[0] for ids in tok([" " + w for w in words], add_special_tokens=False)["input_ids"]]
    assert answer_token_ids(tok, words, masked=False).tolist() == firsts


def case_variant_lama(folder):
    """``write_lama``'s data with case variants in the common vocabulary ("paris", "Gold", "LONDON") and a fact whose
    object is one ("paris")."""
    import json

    from tests.benchmark_folders import trex_record

    write_lama(folder)
    (folder / "common_vocab_cased.txt").write_text("Paris\nLondon\nactor\nFrance\nlawyer\ngold\nparis\nGold\nLONDON\n")
    with (folder / "TREx" / "P19.jsonl").open("a") as f:
        f.write(json.dumps(trex_record("p", "Pia", "paris", ["Pia was born in [MASK] ."])) + "\n")
    return load_lama(folder)


@torch.inference_mode()
def test_masked_lama_ranks_an_uncased_tokenizers_case_variants_as_one_candidate(tmp_path):
    """An uncased BERT: "Paris" and "paris" are one token id, so LAMA (which ranks token ids) has one candidate for
    them, labelled by the first in the vocabulary; the gold of a fact whose object is "paris" is that candidate.  They
    were two candidates of one score: every gold tied with its variant, its rank half a place worse."""
    from types import SimpleNamespace

    import transformers

    from bear_ref.benchmark import build_task

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris", "london", "actor", "france", "lawyer", "gold", "was", "born",
             "in", "is", "a", "by", "profession", ".", "the", "color", "used"]
    tok = transformers.BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1,
                                                                 num_attention_heads=2, intermediate_size=64)).eval()
    task = build_task(case_variant_lama(tmp_path / "lama"), SimpleNamespace(is_masked_lm=True, tokenizer=tok))
    assert task.candidate_sets["common-vocab"].labels == ("Paris", "London", "actor", "France", "lawyer", "gold")
    assert task.info["vocabulary"] == 6 and task.candidate_sets["TREx/P19"].labels == ("Paris", "London")
    pia = [q for q in task.queries if q.subject == "Pia"]
    assert pia and all(task.candidate_set(q).labels[q.gold] == "Paris" for q in pia)
    result = run_cloze(task, LoadedModel.from_objects(model, tok, "tiny-bert"), ["lama"], show_progress=False)
    for row, query in enumerate(task.queries):
        encoded = tok(mask_sentence(tok, query), return_tensors="pt")["input_ids"]
        logprobs = torch.log_softmax(model(input_ids=encoded).logits[0, int((encoded[0] == tok.mask_token_id).nonzero()[0, 0])], -1)
        ids = tok.convert_tokens_to_ids([label.lower() for label in task.candidate_set(query).labels])
        assert len(set(ids)) == len(ids)
        scores = logprobs[torch.as_tensor(ids)].numpy()
        assert result.table["lama_rank"][row] == 1 + np.sum(scores > scores[query.gold]), query


def test_masked_lama_on_a_cased_tokenizer_is_as_before(tmp_path, roberta_tokenizer):
    """A cased (byte-level BPE) masked LM: no two words share a token id, so the task and every number are as before."""
    from types import SimpleNamespace

    from bear_ref.benchmark import build_task
    from deer.platform.benchmark_rows import task_digest

    tok = roberta_tokenizer
    loaded = tiny_roberta(tok)
    data = case_variant_lama(tmp_path / "lama")
    before = lama_cloze_task(data, single_token_words(tok, data.common_vocab, masked=True), causal=False)
    task = build_task(data, SimpleNamespace(is_masked_lm=True, tokenizer=tok))
    assert "Gold" in before.candidate_sets["common-vocab"].labels  # a case variant, a token of its own here
    assert task.candidate_sets["common-vocab"].labels == before.candidate_sets["common-vocab"].labels
    assert task_digest(task) == task_digest(before)
    assert task.info == {**before.info, "single_token_rule": task.info["single_token_rule"]}
    result, expected = (run_cloze(t, loaded, ["lama", "bear"], show_progress=False) for t in (task, before))
    assert result.table.equals(expected.table) and result.probe_metrics == expected.probe_metrics
