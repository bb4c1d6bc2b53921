"""Pseudo log-likelihood (PLL) of statements under a masked LM, batched.

PLL(S) = sum over scored (non-special) tokens t of log p(t | S with t masked) (Salazar et al. 2020,
``original``); ``within_word_l2r`` (Kauf & Ivanova 2023) also masks the tokens of t's word to its
right.  One masked copy per scored token, length-sorted into batches, the MLM head only on the masked row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from deer.backends.batching import length_sorted_batches, pad_right
from deer.backends.tokenization import padding_id
from deer.base.work import WorkCounter

PLL_VARIANTS = ("original", "within_word_l2r")


@dataclasses.dataclass
class MaskedCopy:
    """One forward input: ``input_ids`` with ``position`` masked (and maybe more), scoring ``target``."""

    statement: int
    input_ids: list[int]
    position: int
    target: int


def masked_copies(statement: int, input_ids: Sequence[int], word_ids: Sequence | None, scored: Sequence[bool], mask_id: int,
                  variant: str) -> list[MaskedCopy]:
    """The masked copies of one tokenised statement (``word_ids``: its word per token; ``variant``: checked by PLLScorer)."""
    copies = []
    positions = [i for i, s in enumerate(scored) if s]
    for k, position in enumerate(positions):
        ids = list(input_ids)
        ids[position] = mask_id
        if variant == "within_word_l2r" and word_ids[position] is not None:
            for right in positions[k + 1 :]:
                if word_ids[right] != word_ids[position]:
                    break  # words are contiguous: the first other word ends this one
                ids[right] = mask_id
        copies.append(MaskedCopy(statement, ids, position, int(input_ids[position])))
    return copies


def statement_word_ids(encoded, index: int, variant: str) -> list | None:
    """Statement ``index``'s word per token where ``variant`` masks by words (None for "original"): a Python (non-fast)
    tokenizer has no word boundaries (BERT-Japanese's, PhoBERT's), so only "original" runs with it."""
    if variant != "within_word_l2r":
        return None
    if not encoded.is_fast:
        raise ValueError("PLL variant 'within_word_l2r' needs the word boundaries of a fast tokenizer; this tokenizer is a "
                         "Python one: use the 'original' variant (pll_variant='original', --pll-variant original)")
    return encoded.word_ids(index)


def _mlm_head(model):
    """The MLM head module applied to final hidden states, when the model exposes one that with the base model holds
    all its weights (ModernVBERT's ``lm_head`` is only the Linear after its ``projection_head``: full logits then)."""
    heads = (getattr(model, name, None) for name in ("cls", "lm_head", "predictions"))
    head = next((head for head in heads if head is not None), None)
    if head is None:
        return None
    held = {id(t) for module in (model.base_model, head) for t in [*module.parameters(), *module.buffers()]}
    return head if all(id(t) in held for t in [*model.parameters(), *model.buffers()]) else None


class PLLScorer:
    """Batched PLL for a masked LM in eval mode."""

    def __init__(self, model, tokenizer, variant: str = "within_word_l2r", token_budget: int = 8192, max_batch_size: int = 256):
        if variant not in PLL_VARIANTS:
            raise ValueError(f"PLL variant must be one of {PLL_VARIANTS}, got '{variant}'")
        if tokenizer.mask_token_id is None:
            raise ValueError("the tokenizer has no mask token; PLL needs a masked LM")
        self.model, self.tokenizer, self.variant = model, tokenizer, variant
        self.token_budget, self.max_batch_size = token_budget, max_batch_size
        self.device = next(model.parameters()).device
        self.pad_id = padding_id(tokenizer)
        self.stats = WorkCounter("statements", "masked_copies", "tokens", "padded_tokens")

    @torch.inference_mode()
    def score(self, statements: Sequence[str]) -> np.ndarray:
        """PLL per statement: float64 (n,), nats."""
        # each distinct statement scored once: copies of one in other batches (rows, padding) may round apart, a lost tie
        distinct = {text: i for i, text in enumerate(dict.fromkeys(statements))}
        scores = self._score_distinct(list(distinct))
        self.stats.add(statements=len(statements))
        return scores[[distinct[text] for text in statements]]

    def _score_distinct(self, statements: Sequence[str]) -> np.ndarray:
        encoded = self.tokenizer(list(statements), return_special_tokens_mask=True)
        copies = []
        for i, ids in enumerate(encoded["input_ids"]):
            scored = [not s for s in encoded["special_tokens_mask"][i]]
            words = statement_word_ids(encoded, i, self.variant)
            copies += masked_copies(i, list(ids), words, scored, self.tokenizer.mask_token_id, self.variant)
        scores = np.zeros(len(statements), dtype=np.float64)
        head = _mlm_head(self.model)
        for batch in length_sorted_batches([len(c.input_ids) for c in copies], self.token_budget, self.max_batch_size):
            chosen = [copies[b] for b in batch]
            inputs, mask = pad_right([c.input_ids for c in chosen], self.pad_id)
            batch_inputs = {"input_ids": torch.as_tensor(inputs, device=self.device),
                            "attention_mask": torch.as_tensor(mask, device=self.device)}
            rows = torch.arange(len(chosen), device=self.device)
            positions = torch.as_tensor([c.position for c in chosen], device=self.device)
            with self.stats.forward():
                if head is not None:  # head on the masked rows only
                    logits = head(self.model.base_model(**batch_inputs).last_hidden_state[rows, positions])
                else:
                    logits = self.model(**batch_inputs).logits[rows, positions]
                targets = torch.as_tensor([c.target for c in chosen], device=self.device)
                values = torch.log_softmax(logits.float(), dim=-1)[rows, targets].double().cpu().numpy()
            np.add.at(scores, [c.statement for c in chosen], values)
            self.stats.add(masked_copies=len(chosen), tokens=int(mask.sum()), padded_tokens=int(mask.size))
        return scores


@torch.inference_mode()
def plain_pll(model, tokenizer, statement: str, variant: str = "within_word_l2r") -> float:
    """Reference PLL: one statement, one masked copy at a time, the full model's logits."""
    encoded = tokenizer(statement, return_special_tokens_mask=True)
    ids = list(encoded["input_ids"])
    words = statement_word_ids(encoded, 0, variant)
    scored = [i for i, special in enumerate(encoded["special_tokens_mask"]) if not special]
    total = 0.0
    for position in scored:
        masked = list(ids)
        masked[position] = tokenizer.mask_token_id
        if variant == "within_word_l2r" and words[position] is not None:
            right = position + 1
            while right < len(ids) and right in scored and words[right] == words[position]:
                masked[right] = tokenizer.mask_token_id
                right += 1
        logits = model(input_ids=torch.tensor([masked], device=next(model.parameters()).device)).logits[0, position]
        total += float(torch.log_softmax(logits.float(), dim=-1)[ids[position]])
    return total
