"""Tokenisation with an explicit BOS policy, shared by the encoder and the likelihood scorers.

Policy (lm-pub-quiz's for causal LMs): every prompt starts with the tokenizer's BOS token when it defines one,
never twice; ``special_tokens="tokenizer"`` (the DEER authors' template style): ``tokenizer(text)`` as is.
"""

from __future__ import annotations

from collections.abc import Sequence


def bos_id(tokenizer) -> int | None:
    return tokenizer.bos_token_id


def padding_id(tokenizer) -> int:
    """Id used for padding slots: the pad token, else EOS, else 0 (masked out either way)."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else (tokenizer.eos_token_id or 0))


def token_ids(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` for a causal LM, with BOS prepended by the policy above."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    bos = bos_id(tokenizer)
    return [bos, *ids] if bos is not None else list(ids)


SPECIAL_TOKEN_MODES = ("bos", "tokenizer")
TOKENIZER_BATCH = 2048  # texts per tokenizer call: its per-token objects for many texts take far more than the ids


def batch_token_ids(tokenizer, texts: Sequence[str], special_tokens: str = "bos") -> list[list[int]]:
    """``token_ids`` for many texts at once; ``special_tokens="tokenizer"``: the tokenizer's own special tokens."""
    if special_tokens not in SPECIAL_TOKEN_MODES:
        raise ValueError(f"special_tokens must be one of {SPECIAL_TOKEN_MODES}, got '{special_tokens}'")
    bos = None if special_tokens == "tokenizer" else bos_id(tokenizer)
    add_special = special_tokens == "tokenizer"
    fast = _plain_rust_tokenizer(tokenizer)
    ids: list[list[int]] = []
    for start in range(0, len(texts), TOKENIZER_BATCH):  # the tokenizer's per-text objects of one batch at a time
        batch = list(texts[start:start + TOKENIZER_BATCH])
        if fast is not None:
            encoded = [encoding.ids for encoding in fast.encode_batch_fast(batch, add_special_tokens=add_special)]
        else:
            encoded = tokenizer(batch, add_special_tokens=add_special)["input_ids"]
        if bos is not None:
            for row in encoded:  # each a fresh list: BOS inserted in place (20x faster than building new lists)
                row.insert(0, bos)
        ids.extend(encoded)
    return ids


def _plain_rust_tokenizer(tokenizer):
    """The Rust tokenizer under a transformers fast tokenizer where calling it gives exactly what ``tokenizer(texts)``
    gives (no truncation or padding, special tokens split alike, no rewriting in Python), else None: its
    ``encode_batch_fast`` skips offsets and per-text objects, a quarter less time on a large KG's prompts."""
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    backend, cls = getattr(tokenizer, "_tokenizer", None), type(tokenizer)
    plain_class = cls._encode_plus is TokenizersBackend._encode_plus and cls.__call__ is PreTrainedTokenizerBase.__call__
    if (not plain_class or not hasattr(backend, "encode_batch_fast") or backend.truncation or backend.padding
            or backend.encode_special_tokens != bool(tokenizer.split_special_tokens)):
        return None
    return backend


def bos_policy(tokenizer) -> dict:
    return {"policy": "prepend BOS when the tokenizer defines one", "bos_token": tokenizer.bos_token, "bos_token_id": bos_id(tokenizer)}
