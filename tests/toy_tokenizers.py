"""Small tokenizers built in the test (no download), shared by several test files: a RoBERTa-style byte-level BPE on
SmolLM2's vocabulary and a Llama-2-style legacy SentencePiece look-alike."""

from __future__ import annotations


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
