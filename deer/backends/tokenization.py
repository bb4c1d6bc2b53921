"""Tokenisation with an explicit BOS policy, shared by the encoder and the likelihood scorers.

Policy (lm-pub-quiz's for causal LMs): every prompt starts with the tokenizer's BOS token when it
defines one, whether or not the tokenizer adds it by itself, and never twice.  The exception
(``special_tokens="tokenizer"``, for the DEER authors' template style): ``tokenizer(text)`` as is.
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
    prefix = [] if special_tokens == "tokenizer" or bos_id(tokenizer) is None else [bos_id(tokenizer)]
    ids: list[list[int]] = []
    for start in range(0, len(texts), TOKENIZER_BATCH):  # the tokenizer's per-text objects of one batch at a time
        batch = list(texts[start:start + TOKENIZER_BATCH])
        encoded = tokenizer(batch)["input_ids"] if special_tokens == "tokenizer" else tokenizer(batch, add_special_tokens=False)["input_ids"]
        ids.extend([*prefix, *row] for row in encoded)
    return ids


def bos_policy(tokenizer) -> dict:
    return {"policy": "prepend BOS when the tokenizer defines one", "bos_token": tokenizer.bos_token, "bos_token_id": bos_id(tokenizer)}
