"""Tokenisation with an explicit BOS policy, shared by the encoder and the likelihood scorers.

Policy (the one lm-pub-quiz uses for causal LMs): every prompt starts with the tokenizer's BOS
token when it defines one, whether or not the tokenizer adds it by itself, and never twice.
Without a BOS token (some vocabularies have none) the text's tokens stand alone.
"""

from __future__ import annotations

from typing import Sequence


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


def batch_token_ids(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """``token_ids`` for many texts at once (the fast tokenizer batches internally)."""
    if not texts:
        return []
    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    bos = bos_id(tokenizer)
    return [[bos, *ids] if bos is not None else list(ids) for ids in encoded]


def bos_policy(tokenizer) -> dict:
    return {"policy": "prepend BOS when the tokenizer defines one", "bos_token": tokenizer.bos_token, "bos_token_id": bos_id(tokenizer)}
