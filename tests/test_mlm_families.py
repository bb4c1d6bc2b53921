"""Masked LMs of every family the toolkit names (and two it did not), with tokenizers of each kind (WordPiece "##",
byte-level BPE "Ġ", SentencePiece Unigram "▁"), built in memory as a user hands them over (no ``architectures`` in the
config): each is judged a masked LM, and its PLL (both variants, batched with right padding), its BEAR statement scores
and its LAMA mask log-probs equal a plain computation written here from the model's own forward pass."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch
import transformers as T

from deer.backends.mask_fill import mask_fill_logprobs
from deer.backends.models import is_masked_lm, open_model
from deer.backends.pll import PLLScorer, plain_pll
from deer.backends.statement_scorer import StatementScorer
from tests.tiny_masked_lms import FAMILIES, SMALL
from tests.toy_tokenizers import tokenizer_of

STATEMENTS = ["The capital of France is Paris.", "Oxen are mammals, aren't they?", "Oxen are mammals, aren't they", "Berlin",
              " Rome is in Italy."]  # the two of one length but a token batched together: right padding


@functools.cache
def family(name: str):
    kind, model_class, config_class, fields = FAMILIES[name]
    tokenizer = tokenizer_of(kind)
    torch.manual_seed(0)
    config = config_class(**({} if name == "distilbert" else SMALL), **fields, vocab_size=len(tokenizer),
                          pad_token_id=tokenizer.pad_token_id)
    return model_class(config).eval(), tokenizer


@torch.inference_mode()
def reference_pll(model, tokenizer, statement: str, variant: str) -> float:
    """One masked copy per non-special token through the model's forward with the tokenizer's whole encoding (token
    types and attention mask included); within_word_l2r also masks the word's tokens to the right (its word_ids)."""
    encoded = tokenizer(statement, return_special_tokens_mask=True)
    ids, words = encoded["input_ids"], encoded.word_ids() if variant == "within_word_l2r" else None
    scored = [i for i, special in enumerate(encoded["special_tokens_mask"]) if not special]
    extra = {key: torch.tensor([encoded[key]]) for key in ("token_type_ids", "attention_mask") if key in encoded}
    total = 0.0
    for position in scored:
        masked = list(ids)
        for right in range(position, len(ids)):
            if right != position and (variant == "original" or right not in scored or words[right] != words[position]):
                break
            masked[right] = tokenizer.mask_token_id
        logits = model(input_ids=torch.tensor([masked]), **extra).logits[0, position]
        total += float(torch.log_softmax(logits.double(), -1)[ids[position]])
    return total


@functools.cache
def expected_pll(name: str, variant: str) -> list[float]:
    model, tokenizer = family(name)
    return [reference_pll(model, tokenizer, s, variant) for s in STATEMENTS]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_an_in_memory_masked_lm_of_each_family_is_scored_by_pll(name):
    """MPNet and CamemBERT (masked-LM model types outside a hard-coded list) built in memory were judged causal LMs:
    BEAR scored them left to right, next-token log-probs of a bidirectional model, without a word."""
    model, tokenizer = family(name)
    assert model.config.architectures is None and is_masked_lm(model)
    expected = expected_pll(name, "within_word_l2r")
    np.testing.assert_allclose(StatementScorer(model, tokenizer).score_statements(STATEMENTS), expected, atol=1e-4, rtol=0)


def test_the_model_types_with_a_masked_lm_class_are_masked_lms_unless_they_attend_left_to_right():
    """The rule that replaced a fixed list of model types: decoders (``is_decoder``, XLM's ``causal``) and encoder-decoders
    (BART) are not masked LMs though transformers has a masked-LM class for their type."""
    from deer.backends.models import is_masked_lm_config

    assert is_masked_lm_config(T.MPNetConfig()) and is_masked_lm_config(T.CamembertConfig()) and is_masked_lm_config(T.XLMConfig())
    assert not is_masked_lm_config(T.XLMConfig(causal=True)) and not is_masked_lm_config(T.CamembertConfig(is_decoder=True))
    assert not is_masked_lm_config(T.BartConfig()) and not is_masked_lm_config(T.LlamaConfig())


@pytest.mark.parametrize("name", ["camembert", "mpnet"])
def test_a_masked_lm_whose_config_names_no_architecture_loads_as_one(tmp_path, name):
    """A folder whose config.json has no ``architectures``: CamemBERT loaded as CamembertForCausalLM (a bidirectional
    encoder scored left to right), MPNet refused; both load as their masked LM now."""
    model, tokenizer = family(name)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("architectures", None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = open_model(str(tmp_path), dtype="float32", device="cpu")
    assert type(loaded.model) is type(model) and is_masked_lm(loaded.model)


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("variant", ["original", "within_word_l2r"])
def test_pll_of_each_family_equals_a_plain_computation(name, variant):
    """The batched PLL applies the head it finds by name to the base model's states at the masked rows: ModernVBERT's
    ``lm_head`` skipped its ``projection_head`` (a wrong PLL, exit 0); a head that with the base model does not hold
    all the weights is not taken now (full logits)."""
    model, tokenizer = family(name)
    expected = expected_pll(name, variant)
    scorer = PLLScorer(model, tokenizer, variant, token_budget=70)
    np.testing.assert_allclose(scorer.score(STATEMENTS), expected, atol=1e-4, rtol=0)
    assert scorer.stats.as_dict()["padded_tokens"] > scorer.stats.as_dict()["tokens"]  # copies of two lengths in a batch
    np.testing.assert_allclose([plain_pll(model, tokenizer, s, variant) for s in STATEMENTS], expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", list(FAMILIES))
@torch.inference_mode()
def test_mask_fill_of_each_family_equals_a_plain_computation(name):
    model, tokenizer = family(name)
    mask = tokenizer.mask_token
    sentences = [f"The capital of France is {mask}.", f"{mask} is the capital of Italy.", f"Oxen are {mask}, aren't they?",
                 f"Oxen are {mask}, aren't they"]  # the last two a token apart, batched together: right padding
    expected = []
    for sentence in sentences:
        encoded = tokenizer(sentence, return_tensors="pt")
        position = int((encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0])
        expected.append(torch.log_softmax(model(**encoded).logits[0, position].double(), -1).numpy())
    got = mask_fill_logprobs(model, tokenizer, sentences, np.arange(len(tokenizer)), token_budget=64)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["electra", "bert", "deberta-v2", "mpnet"])
def test_a_checkpoint_without_its_mlm_head_is_refused(tmp_path, name):
    """An ELECTRA discriminator, or an encoder saved without its head (DeBERTa-v3 is released so), loaded as a masked
    LM whose head transformers drew at random: PLL and LAMA numbers changed from one load to the next, exit 0."""
    from deer.backends.models import ModelUnavailableError

    model, tokenizer = family(name)
    headless = T.ElectraForPreTraining(model.config) if name == "electra" else model.base_model
    headless.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ModelUnavailableError, match=f"has no weights for .* of {type(model).__name__} .*would be random"):
        open_model(str(tmp_path), dtype="float32", device="cpu")
    model.save_pretrained(tmp_path)  # the whole masked LM into the same folder: it loads
    assert type(open_model(str(tmp_path), dtype="float32", device="cpu").model) is type(model)


def test_a_python_tokenizer_scores_the_original_pll_and_refuses_words(tmp_path):
    """A masked LM with a Python (non-fast) tokenizer (BERT-Japanese's, PhoBERT's) failed in every PLL variant with
    transformers' "word_ids() is not available", though "original" reads no words: it is scored now, and
    within_word_l2r is refused naming the variant that runs."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "capital", "of", "france", "is", "par", "##is", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = T.BertJapaneseTokenizer(str(tmp_path / "vocab.txt"), do_lower_case=True, word_tokenizer_type="basic",
                                        subword_tokenizer_type="wordpiece")
    assert not tokenizer.is_fast and tokenizer.tokenize("Paris") == ["par", "##is"]
    torch.manual_seed(0)
    model = T.BertForMaskedLM(T.BertConfig(vocab_size=len(words), **SMALL)).eval()
    statements = ["The capital of France is Paris.", "Paris is the capital."]
    expected = [reference_pll(model, tokenizer, s, "original") for s in statements]
    np.testing.assert_allclose(PLLScorer(model, tokenizer, "original").score(statements), expected, atol=1e-4, rtol=0)
    np.testing.assert_allclose([plain_pll(model, tokenizer, s, "original") for s in statements], expected, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="'within_word_l2r' needs the word boundaries of a fast tokenizer.*'original'"):
        StatementScorer(model, tokenizer).score_statements(statements)


def test_the_left_to_right_scorers_refuse_a_masked_lm():
    """The prefix trie, the shared prefix and plain_conditional_scores read a masked LM left to right and returned those
    numbers (the trie and the plain one; the shared prefix failed on a shape); benchmarks/bench_bear_dataset.py, which
    calls them directly, timed and compared them as BEAR on a masked LM.  They refuse it now; StatementScorer's PLL,
    BEAR's score for it, is unchanged."""
    from deer.backends.clm_scorer import SharedPrefixScorer
    from deer.backends.plain import plain_conditional_scores
    from deer.backends.trie_scorer import PrefixTrieScorer

    model, tokenizer = family("roberta")
    for scorer in (lambda: PrefixTrieScorer(model, tokenizer).score_texts(STATEMENTS[:2]),
                   lambda: SharedPrefixScorer(model, tokenizer).score_texts("The capital of", [" France is Paris."], whole=True),
                   lambda: plain_conditional_scores(model, tokenizer, "", STATEMENTS[:2])):
        with pytest.raises(ValueError, match="is a masked LM"):
            scorer()
    pll = StatementScorer(model, tokenizer).score_statements(STATEMENTS)
    np.testing.assert_allclose(pll, expected_pll("roberta", "within_word_l2r"), atol=1e-4, rtol=0)
