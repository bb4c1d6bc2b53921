"""Tiny random causal LMs built in the test (no download), shared by several test files: a model of each family in
``ARCHITECTURES`` under eager or SDPA attention (``tiny_model``), the tolerances an optimised path meets against the
plain one (one whole forward pass per prompt or statement), a whole sequence's log-prob from that plain pass
(``whole_sequence_logprob``), and a checkpoint series of the tiny model (``save_checkpoint``).  The masked LMs are in
``tests/tiny_masked_lms.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from deer.backends.attention import configured_backend

VECTOR_RTOL = 1e-5
SCORE_ATOL = 1e-4
WINDOW = 5  # sliding window, in tokens: shorter than every statement of tests/test_equivalence.py

# name -> (config class path, config kwargs); vocabulary, BOS/EOS ids are added per tokenizer.
ARCHITECTURES = {
    "gpt2": ("GPT2Config", dict(n_embd=32, n_layer=2, n_head=4, n_positions=256)),
    # OPT-350M's shape: layers 1024 wide projected to 512 (here 32 -> 16), post-layer-norm.
    "opt-proj": ("OPTConfig", dict(hidden_size=32, word_embed_proj_dim=16, ffn_dim=64, num_hidden_layers=2,
                                   num_attention_heads=4, max_position_embeddings=256, do_layer_norm_before=False)),
    "llama": ("LlamaConfig", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=256)),
    "qwen2": ("Qwen2Config", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=256)),
    "gemma2": ("Gemma2Config", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=8, max_position_embeddings=256, sliding_window=WINDOW,
                                    final_logit_softcapping=2.0, attn_logit_softcapping=5.0)),
    "gemma3": ("Gemma3TextConfig", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, sliding_window=WINDOW,
                                        layer_types=["sliding_attention", "full_attention", "sliding_attention"])),
    "mistral": ("MistralConfig", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=256, sliding_window=WINDOW)),
    "gpt-neox": ("GPTNeoXConfig", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       max_position_embeddings=256, rotary_pct=0.5)),
}
BACKENDS = ["eager", "sdpa"]


class Unavailable(Exception):
    """This transformers has no such family, or no such attention back-end for it."""


_MODELS: dict = {}


def tiny_model(name: str, backend: str, tokenizer):
    """A random 2-3 layer model of the family ``name`` with ``backend`` attention (cached per module run);
    skips the test when this transformers has no such family or back-end."""
    try:
        return build_tiny_model(name, backend, tokenizer)
    except Unavailable as reason:
        pytest.skip(str(reason))


def build_tiny_model(name: str, backend: str, tokenizer):
    import transformers

    if (name, backend) not in _MODELS:
        class_name, kwargs = ARCHITECTURES[name]
        if not hasattr(transformers, class_name):
            raise Unavailable(f"transformers {transformers.__version__} has no {class_name}")
        config = getattr(transformers, class_name)(
            vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id, **kwargs,
        )
        model_class = transformers.AutoModelForCausalLM._model_mapping[type(config)]
        if backend == "sdpa" and not model_class._supports_sdpa:
            raise Unavailable(f"transformers {transformers.__version__} has no SDPA attention for {model_class.__name__}")
        torch.manual_seed(0)
        model = model_class._from_config(config, attn_implementation=backend).eval()
        # Default inits give near-uniform next-token distributions (OPT: log-prob spread 0.01),
        # under which a wrong mask moves scores by less than the tolerance.  Unit-scale weights
        # make every token and position matter.
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.dim() >= 2:
                    parameter.normal_(0.0, parameter.shape[-1] ** -0.5)
        assert configured_backend(model) == backend
        _MODELS[name, backend] = model
    return _MODELS[name, backend]


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@torch.inference_mode()
def whole_sequence_logprob(model, ids) -> float:
    """Sum of log p(token_t | tokens_<t), t >= 1, from one plain forward pass with the full LM head."""
    logprobs = torch.log_softmax(model(input_ids=torch.as_tensor([ids])).logits[0].float(), dim=-1)
    return float(logprobs[torch.arange(len(ids) - 1), torch.as_tensor(ids[1:])].double().sum())


def save_checkpoint(tiny_clm_dir: Path, out: Path, step: int) -> None:
    """The tiny model with its weights nudged by ``step``, saved as ``out/checkpoint-<step>``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_clm_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * step * torch.sin(torch.arange(p.numel(), dtype=p.dtype)).reshape(p.shape))
    model.save_pretrained(out / f"checkpoint-{step}")
    AutoTokenizer.from_pretrained(tiny_clm_dir).save_pretrained(out / f"checkpoint-{step}")
