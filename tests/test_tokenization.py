"""``batch_token_ids`` (which calls the Rust tokenizer directly where that is safe) equals the plain path,
``tokenizer(text)`` one text at a time, on tokenizers of each kind and with the settings that make the
direct call unsafe (truncation or padding set on the Rust tokenizer, special tokens split)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer, BertTokenizerFast, PreTrainedTokenizerFast

from deer.backends.tokenization import _plain_rust_tokenizer, batch_token_ids, bos_id

TEXTS = [
    'This sentence : "dog: a domesticated carnivorous mammal" means in one word:"',
    "Ünïcödé — naïve café, 東京 and emoji 🙂 ",
    "  leading and trailing spaces  ",
    "",
    "a special token <|im_start|> inside the text, and <s> [CLS] too",
    "digits 1234567890 and punctuation ?!;:'\"()[]{}",
]


def plain(tokenizer, text: str, special_tokens: str) -> list[int]:
    if special_tokens == "tokenizer":
        return tokenizer(text)["input_ids"]
    bos = bos_id(tokenizer)
    return ([bos] if bos is not None else []) + tokenizer(text, add_special_tokens=False)["input_ids"]


def byte_level_bpe() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    rust = Tokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rust.train_from_iterator(TEXTS * 20, trainer)
    rust.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=rust, bos_token="<s>", eos_token="</s>")


def wordpiece() -> BertTokenizerFast:
    words = sorted({w.lower().strip("\"'():;,!?") for text in TEXTS for w in text.split()} - {""})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    return BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_dir):
    return AutoTokenizer.from_pretrained(smollm2_dir)


def _tokenizers(smollm2_tokenizer):
    truncating = byte_level_bpe()
    truncating.backend_tokenizer.enable_truncation(max_length=5)  # set on the Rust side, as some tokenizer.json files do
    splitting = byte_level_bpe()
    splitting.split_special_tokens = True
    return {"smollm2 (BPE, sentencepiece-style)": smollm2_tokenizer, "byte-level BPE trained here": byte_level_bpe(),
            "WordPiece (BERT)": wordpiece(), "truncation set on the Rust tokenizer": truncating,
            "special tokens split": splitting}


@pytest.mark.parametrize("special_tokens", ["bos", "tokenizer"])
def test_batch_token_ids_equal_one_text_at_a_time(smollm2_tokenizer, special_tokens):
    for name, tokenizer in _tokenizers(smollm2_tokenizer).items():
        expected = [plain(tokenizer, text, special_tokens) for text in TEXTS]
        assert batch_token_ids(tokenizer, TEXTS, special_tokens) == expected, name


def test_the_direct_call_is_taken_only_where_it_is_exact(smollm2_tokenizer):
    """Not vacuous: the common tokenizers take the direct call; the unsafe settings do not."""
    taken = {name: _plain_rust_tokenizer(tokenizer) is not None for name, tokenizer in _tokenizers(smollm2_tokenizer).items()}
    assert taken["smollm2 (BPE, sentencepiece-style)"] and taken["byte-level BPE trained here"] and taken["WordPiece (BERT)"]
    assert not taken["truncation set on the Rust tokenizer"]
    assert not taken["special tokens split"]  # the Rust side not (yet) told to split them: the plain call


def test_a_slow_python_tokenizer_takes_the_plain_call(smollm2_tokenizer):
    class Rewriting(type(smollm2_tokenizer)):  # a class that changes ids in Python must never be bypassed
        def _encode_plus(self, *args, **kwargs):
            return super()._encode_plus(*args, **kwargs)

    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer.name_or_path)
    tokenizer.__class__ = Rewriting
    assert _plain_rust_tokenizer(tokenizer) is None
    assert batch_token_ids(tokenizer, TEXTS) == [plain(tokenizer, text, "bos") for text in TEXTS]
