"""Small tokenizers built in the test (no download), shared by several test files: a RoBERTa-style byte-level BPE on
SmolLM2's vocabulary, a Llama-2-style legacy SentencePiece look-alike, and a small trained vocabulary of each kind a
masked LM family uses (``tokenizer_of``: WordPiece, byte-level BPE, SentencePiece Unigram)."""

from __future__ import annotations

import functools
import json

import transformers as T
from tokenizers import Tokenizer, models, pre_tokenizers, trainers


def roberta_style_tokenizer(smollm2_dir):
    """A RoBERTa-style byte-level BPE tokenizer (SmolLM2's vocabulary, RoBERTa's special tokens, a <mask>
    that takes the space before it as RoBERTa's does)."""
    from tokenizers import AddedToken, Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    tk.add_special_tokens([AddedToken("<s>"), AddedToken("</s>"), AddedToken("<pad>"), AddedToken("<mask>", lstrip=True, special=True)])
    tk.post_processor = processors.RobertaProcessing(("</s>", tk.token_to_id("</s>")), ("<s>", tk.token_to_id("<s>")),
                                                     trim_offsets=True, add_prefix_space=False)
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>",
                                   pad_token="<pad>", mask_token="<mask>", unk_token=None)


def sentencepiece_tokenizer():
    """A Llama-2-style legacy SentencePiece look-alike: '▁' prepended and every space made '▁' (Llama-2's
    tokenizer.json normalizer), BPE merges that stay inside words: " Paris" is ['▁', '▁Pa', 'ris']."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    corpus = ["The capital of France is Paris.", "The capital of Germany is Berlin.", "Rome is in Italy.",
              'The album "Rome" (FR) was released.'] * 50
    tk.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"]))
    tk.pre_tokenizer = None
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


# The sentences tokenizer_of trains each kind's vocabulary on.
CORPUS = ["The capital of France is Paris.", "The capital of Germany is Berlin.", "A dog is a mammal.",
          "Oxen are mammals, aren't they?", "Paris is a city in France.", "Rome is the capital of Italy."] * 20
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _trained(model, pre_tokenizer, trainer, lower: bool = False) -> dict:
    rust = Tokenizer(model)
    rust.pre_tokenizer = pre_tokenizer
    rust.train_from_iterator([c.lower() if lower else c for c in CORPUS], trainer)
    return json.loads(rust.to_str())["model"]


@functools.cache
def tokenizer_of(kind: str):
    """A small vocabulary (most words several tokens) of each tokenizer kind, in its family's tokenizer class."""
    if kind == "wordpiece":
        vocab = _trained(models.WordPiece(unk_token="[UNK]"), pre_tokenizers.BertPreTokenizer(),
                         trainers.WordPieceTrainer(vocab_size=75, special_tokens=BERT_SPECIALS), lower=True)["vocab"]
        return T.BertTokenizer(vocab=vocab)
    if kind == "bpe":
        trained = _trained(models.BPE(), pre_tokenizers.ByteLevel(add_prefix_space=False),
                           trainers.BpeTrainer(vocab_size=290, special_tokens=ROBERTA_SPECIALS,
                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        return T.RobertaTokenizer(vocab=trained["vocab"], merges=[tuple(m) for m in trained["merges"]])
    specials = ROBERTA_SPECIALS if kind in ("xlm-roberta", "camembert") else ["<pad>", "<unk>", *BERT_SPECIALS[2:]]
    vocab = [tuple(piece) for piece in _trained(models.Unigram(), pre_tokenizers.Metaspace(), trainers.UnigramTrainer(
        vocab_size=90, special_tokens=specials, unk_token="<unk>"))["vocab"]]
    return {"xlm-roberta": T.XLMRobertaTokenizer, "camembert": T.CamembertTokenizer, "albert": T.AlbertTokenizer,
            "deberta-v2": T.DebertaV2Tokenizer}[kind](vocab=vocab)
