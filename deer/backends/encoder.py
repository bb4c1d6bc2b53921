"""PromptEOL encoder: last-layer hidden state at the last real token of each prompt.

Prompts are deduplicated, sorted by length and right-padded in batches under a token budget, through the
base transformer only (the LM head runs only for LAMA's next-token log-probs); a long shared token prefix
runs once (``deer.backends.shared_prefix``).  Results come back in input order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from deer.backends.batching import auto_batch_limits, length_sorted_batches, pad_right
from deer.backends.model_backend import EncoderOutput, PromptEncoder
from deer.backends.model_config import text_config
from deer.backends.shared_prefix import hidden_after_prefix, prefix_groups
from deer.backends.tokenization import padding_id
from deer.base.vectors import normalize_rows
from deer.base.work import WorkCounter


def lm_head(model) -> torch.nn.Module:
    """What turns final hidden states into logits: the model's part holding its output embeddings (a BERT-family
    head transforms the states before them: dense, activation, norm); most heads are the output embeddings alone."""
    output = model.get_output_embeddings()
    children = list(model.children())
    if any(child is output for child in children):
        return output
    return next((child for child in children if any(module is output for module in child.modules())), output)


def next_token_log_softmax(model, hidden: torch.Tensor) -> torch.Tensor:
    """log p(next token) from final hidden states (n, d), applying the LM head only to these rows."""
    logits = lm_head(model)(hidden).float()
    # Gemma-style logit soft-capping: the model's own forward applies it; here the LM head is
    # called directly, so it is applied here (plain full forward passes must not apply it again).
    softcap = getattr(text_config(model), "final_logit_softcapping", None)
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return torch.log_softmax(logits, dim=-1)


def token_logprobs(model, hidden: torch.Tensor, targets: Sequence[int], rows: np.ndarray | None = None) -> np.ndarray:
    """log p(targets[j] | hidden row rows[j]) (rows default: row j), float64; the LM head runs on 256 rows at a
    time, so the logits stay small for large vocabularies."""
    targets = np.asarray(targets, dtype=np.int64)
    rows = np.arange(len(targets)) if rows is None else np.asarray(rows, dtype=np.int64)
    out = np.zeros(len(targets), dtype=np.float64)
    for start in range(0, len(hidden), 256):
        here = np.flatnonzero((rows >= start) & (rows < start + 256))
        if len(here):
            logprobs = next_token_log_softmax(model, hidden[start : start + 256])
            picked = logprobs[torch.as_tensor(rows[here] - start, device=hidden.device),
                              torch.as_tensor(targets[here], device=hidden.device)]
            out[here] = picked.double().cpu().numpy()
    return out


def output_size(model) -> int:
    """Width of a causal LM's last hidden state: what its LM head reads (OPT-350M's 512, not its hidden_size)."""
    return int(model.get_output_embeddings().weight.shape[-1])


def distinct_prompts(id_lists: Sequence[Sequence[int]]) -> tuple[list[tuple[int, ...]], list[list[int]]]:
    """(each distinct prompt once, in first-seen order; the input positions of each one's copies): an encoder runs
    identical prompts once.  An empty prompt is a ValueError (no tokens and no BOS: no last state to take)."""
    if id_lists and min(len(ids) for ids in id_lists) == 0:
        raise ValueError("cannot encode an empty prompt (no tokens and no BOS token)")
    distinct: dict[tuple[int, ...], list[int]] = {}
    for position, ids in enumerate(id_lists):
        distinct.setdefault(tuple(ids), []).append(position)
    return list(distinct), list(distinct.values())


class Encoder(PromptEncoder):
    """What the torch encoders share: ``output_size`` read from the model (``tokenize`` and ``encode`` from ``PromptEncoder``)."""

    @property
    def output_size(self) -> int:
        return output_size(self.model)


class PromptEOLEncoder(Encoder):
    """Batched PromptEOL embeddings for a causal LM (model in eval mode)."""

    def __init__(self, model, tokenizer, token_budget: int | None = None, max_batch_size: int | None = None,
                 show_progress: bool = True, special_tokens: str = "bos", reuse_prefix: bool = True):
        """``token_budget`` / ``max_batch_size``: padded tokens and rows per batch (None: what the device holds).
        ``special_tokens``: "bos" (the BOS policy) or "tokenizer".  ``reuse_prefix``: a shared token prefix runs once."""
        self.model, self.tokenizer, self.special_tokens = model, tokenizer, special_tokens
        budget, rows = auto_batch_limits(model)  # None: what the model's device holds
        self.token_budget = budget if token_budget is None else token_budget
        self.max_batch_size = rows if max_batch_size is None else max_batch_size
        self.show_progress, self.reuse_prefix = show_progress, reuse_prefix
        self.stats = WorkCounter("prompts", "tokens", "padded_tokens")
        self.device = next(model.parameters()).device
        self.pad_id = padding_id(tokenizer)

    @classmethod
    def from_pretrained(cls, name: str, dtype: str = "auto", device: str = "auto", **options) -> PromptEOLEncoder:
        """An encoder for a model alias, hub id or folder (``deer models``), loaded in eval mode."""
        from deer.backends.models import load_model

        model, tokenizer, _ = load_model(name, dtype=dtype, device=device)
        return cls(model, tokenizer, **options)

    def embed(self, texts: Sequence[str], normalize: bool = False) -> np.ndarray:
        """float32 (len(texts), d): the last-layer state at each whole prompt's last token (``PromptTemplates``
        builds DEER's prompts).  ``normalize``: unit length, so dot products are cosines."""
        vectors = self.encode(texts, description="embedding").embeddings
        return normalize_rows(vectors) if normalize else vectors

    @torch.inference_mode()
    def encode_ids(self, id_lists: Sequence[Sequence[int]], next_token_ids: np.ndarray | None = None,
                   description: str = "encoding", progress: tqdm | None = None,
                   on_batch: Callable[[np.ndarray, np.ndarray], None] | None = None) -> EncoderOutput:
        """As ``encode`` for token lists; ``progress``: a tqdm bar to advance.  ``on_batch(positions, vectors)``:
        each batch's float32 embeddings handed on instead of gathered (``embeddings`` is None)."""
        n = len(id_lists)
        prompts, copies = distinct_prompts(id_lists)  # each batch's results go to every copy
        self.stats.add(duplicate_prompts=n - len(copies))

        embeddings = logprobs = None  # embeddings sized by the first batch's hidden states
        if next_token_ids is not None:
            gather_ids = torch.as_tensor(np.asarray(next_token_ids, dtype=np.int64), device=self.device)
            logprobs = np.zeros((n, len(gather_ids)), dtype=np.float32)
        own_progress = progress is None
        if own_progress:
            progress = tqdm(total=n, desc=description, unit="prompt", disable=not self.show_progress, leave=False)
        batches = self._hidden_batches(prompts)
        while True:
            with self.stats.forward():
                step = next(batches, None)
                if step is None:
                    break
                batch, hidden = step
                positions = np.asarray([p for u in batch for p in copies[u]], dtype=np.int64)
                repeats = torch.as_tensor([len(copies[u]) for u in batch], device=hidden.device)
                hidden = torch.repeat_interleave(hidden, repeats, dim=0)
                vectors = hidden.float().cpu().numpy()
                if on_batch is None:
                    if embeddings is None:
                        embeddings = np.zeros((n, hidden.shape[-1]), dtype=np.float32)
                    embeddings[positions] = vectors
                if logprobs is not None:
                    logprobs[positions] = next_token_log_softmax(self.model, hidden)[:, gather_ids].cpu().numpy()
            self.stats.add(prompts=len(positions))
            if on_batch is not None:
                on_batch(positions, vectors)
            progress.update(len(positions))
        if own_progress:
            progress.close()
        if embeddings is None and on_batch is None:
            embeddings = np.zeros((0, self.output_size), dtype=np.float32)
        return EncoderOutput(embeddings, logprobs)

    def _hidden_batches(self, id_lists: Sequence[Sequence[int]]) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        """(indices, last-token states) per forward pass: groups sharing a long prefix, then the rest."""
        groups, rest = prefix_groups(id_lists) if self.reuse_prefix else ([], np.arange(len(id_lists)))
        for shared, members in groups:
            tails = [id_lists[i][shared:] for i in members]
            for batch, hidden, fed in hidden_after_prefix(self.model, id_lists[members[0]][:shared], tails):
                tokens = sum(len(tails[i]) for i in batch)
                self.stats.add(tokens=fed, padded_tokens=fed, prefix_tokens=fed - tokens, tail_tokens=tokens)
                yield members[batch], hidden
        for batch in length_sorted_batches([len(id_lists[i]) for i in rest], self.token_budget, self.max_batch_size):
            batch = rest[batch]
            input_ids, attention_mask = pad_right([id_lists[i] for i in batch], self.pad_id)
            # No padding mask: under causal attention a right-padded row's real tokens never see
            # the padding after them, and without a mask the back-end takes its causal fast path.
            output = self.model.base_model(input_ids=torch.as_tensor(input_ids, device=self.device), use_cache=False)
            last = torch.as_tensor(attention_mask.sum(axis=1) - 1, device=self.device)
            self.stats.add(tokens=int(attention_mask.sum()), padded_tokens=int(attention_mask.size))
            yield batch, output.last_hidden_state[torch.arange(len(batch), device=self.device), last]
