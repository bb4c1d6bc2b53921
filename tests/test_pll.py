"""Batched PLL equals the plain one-mask-at-a-time PLL on a small random BertForMaskedLM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deer.backends.pll import PLLScorer, masked_copies, plain_pll

WORDS = ["the", "capital", "of", "france", "is", "paris", "berlin", "germany", "dog", "a", "mammal", "."]
PIECES = ["par", "##is", "ber", "##lin", "mam", "##mal", "##s", "ox", "##en"]


@pytest.fixture(scope="module")
def tiny_mlm():
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[w for w in WORDS if w not in ("paris", "berlin", "mammal")], *PIECES]
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    model = BertForMaskedLM(config).eval()
    return model, tokenizer


STATEMENTS = ["The capital of France is Paris.", "The capital of Germany is Berlin.", "A dog is a mammal.", "Oxen mammals", "Paris"]


def test_multi_piece_words_exist(tiny_mlm):
    _, tokenizer = tiny_mlm
    assert tokenizer.tokenize("Paris oxen") == ["par", "##is", "ox", "##en"]


@pytest.mark.parametrize("variant", ["original", "within_word_l2r"])
@pytest.mark.parametrize("budget", [8192, 20])
def test_batched_pll_equals_plain(tiny_mlm, variant, budget):
    model, tokenizer = tiny_mlm
    batched = PLLScorer(model, tokenizer, variant=variant, token_budget=budget).score(STATEMENTS)
    plain = [plain_pll(model, tokenizer, s, variant) for s in STATEMENTS]
    np.testing.assert_allclose(batched, plain, atol=1e-4, rtol=0)


def test_variants_differ_only_on_multi_piece_words(tiny_mlm):
    model, tokenizer = tiny_mlm
    single = ["The capital of France is a dog."]
    np.testing.assert_allclose(PLLScorer(model, tokenizer, "original").score(single), PLLScorer(model, tokenizer, "within_word_l2r").score(single), atol=1e-5)
    multi = ["Paris"]
    assert abs(PLLScorer(model, tokenizer, "original").score(multi)[0] - PLLScorer(model, tokenizer, "within_word_l2r").score(multi)[0]) > 1e-6


def test_within_word_l2r_masks_the_rest_of_the_word():
    # [CLS] par ##is is [SEP]; words: None 0 0 1 None
    copies = masked_copies(0, [2, 10, 11, 12, 3], [None, 0, 0, 1, None], [False, True, True, True, False], 4, "within_word_l2r")
    assert [c.input_ids for c in copies] == [[2, 4, 4, 12, 3], [2, 10, 4, 12, 3], [2, 10, 11, 4, 3]]
    assert [c.target for c in copies] == [10, 11, 12]


def test_unknown_variant_is_rejected(tiny_mlm):
    model, tokenizer = tiny_mlm
    with pytest.raises(ValueError, match="PLL variant"):
        PLLScorer(model, tokenizer, variant="sentence_l2r")


def test_deer_refuses_a_masked_lm_on_a_kg_and_bear_runs(tiny_mlm, tiny_kg_dir):
    """PromptEOL reads a causal LM's last state: the KG path refuses DEER on a masked LM by name, as
    the benchmark path does, and still runs BEAR (PLL) on it."""
    from deer.backends.models import LoadedModel
    from deer.runner import run_probe

    model, tokenizer = tiny_mlm
    loaded = LoadedModel.from_objects(model, tokenizer, "tiny-bert")
    with pytest.raises(ValueError, match="the deer probe needs a causal LM; tiny-bert is a masked LM"):
        run_probe("deer", str(tiny_kg_dir), loaded, show_progress=False)
    result = run_probe("bear", str(tiny_kg_dir), loaded, show_progress=False)
    assert result.metadata["scoring"].startswith("pll") and len(result.ranks()) == len(result.queries) > 0


def test_lama_refuses_a_masked_lm_on_a_kg_before_any_pass(tiny_mlm, tiny_kg_dir):
    """LAMA on a KG reads the next token after the query text (a causal LM's): a masked LM is refused by
    name before the model is used (no forward pass), with bear,lama as with lama alone; DEER's refusal
    points only at what runs on it (bear on a KG, lama on a cloze benchmark)."""
    from deer.backends.models import LoadedModel
    from deer.runner import run_kg, run_probe

    model, tokenizer = tiny_mlm
    loaded = LoadedModel.from_objects(model, tokenizer, "tiny-bert")
    passes = []
    hook = model.get_input_embeddings().register_forward_hook(lambda *_: passes.append(1))
    try:
        for probes in (["lama"], ["bear", "lama"]):
            with pytest.raises(ValueError, match="the lama probe needs a causal LM on a KG; tiny-bert is a masked LM") as refused:
                run_kg(probes, str(tiny_kg_dir), loaded, show_progress=False)
            assert "bear on a KG" in str(refused.value) and passes == []
    finally:
        hook.remove()
    with pytest.raises(ValueError, match="the deer probe needs a causal LM; tiny-bert is a masked LM") as refused:
        run_probe("deer", str(tiny_kg_dir), loaded, show_progress=False)
    assert "run lama,bear" not in str(refused.value) and "bear on a KG" in str(refused.value)
    assert "lama on a cloze benchmark" in str(refused.value)


def test_identical_statements_get_identical_scores_in_any_batch():
    """Two entities (or answers) of one name give one statement twice: both must tie with the gold.  Their masked
    copies fell into different batches (other rows, other padding), which rounded them apart by ~2e-7 (a 128-wide
    BERT at the default budget: 11 of 30 random sets), so a gold ranked above or below its twins by where they stood.
    Each distinct statement is now scored once; the plain PLL still agrees within rounding."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=256)).eval()
    rng = np.random.default_rng(0)
    for trial in range(12):
        statements = [" ".join(rng.choice(WORDS, size=rng.integers(2, 12))) for _ in range(8)]
        statements[3] = statements[6] = statements[0]
        for budget, rows in ((512, 64), (40, 3)):
            scores = PLLScorer(model, tokenizer, token_budget=budget, max_batch_size=rows).score(statements)
            assert scores[0] == scores[3] == scores[6], (trial, budget)
    np.testing.assert_allclose(scores[:2], [plain_pll(model, tokenizer, s) for s in statements[:2]], atol=1e-4, rtol=0)
