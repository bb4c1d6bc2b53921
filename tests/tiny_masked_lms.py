"""Tiny random masked LMs of every family the toolkit names (and two it did not), shared by several test files: each
family's tokenizer kind (its tokenizer from ``tests/toy_tokenizers.py``'s ``tokenizer_of``), masked-LM class, config
class and the config's own fields, and the small shape they share (``SMALL``).  The causal LMs are in
``tests/tiny_models.py``."""

from __future__ import annotations

import transformers as T


def modernvbert_config(**text):
    """ModernVBERT: a ModernBERT text model (its ``lm_head`` only the Linear after a ``projection_head``) and a vision tower."""
    vision = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=16)
    return T.ModernVBertConfig(text_config=dict(text, global_attn_every_n_layers=2, local_attention=8), vision_config=vision,
                               image_token_id=text["vocab_size"] - 1)


SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, max_position_embeddings=70)
FAMILIES = {  # family: (tokenizer kind, masked-LM class, config class, the config's own fields)
    "bert": ("wordpiece", T.BertForMaskedLM, T.BertConfig, {}),
    "distilbert": ("wordpiece", T.DistilBertForMaskedLM, T.DistilBertConfig,
                   dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=70)),
    "electra": ("wordpiece", T.ElectraForMaskedLM, T.ElectraConfig, dict(embedding_size=16)),
    "mpnet": ("wordpiece", T.MPNetForMaskedLM, T.MPNetConfig, {}),
    "roberta": ("bpe", T.RobertaForMaskedLM, T.RobertaConfig, {}),
    "modernbert": ("bpe", T.ModernBertForMaskedLM, T.ModernBertConfig, dict(global_attn_every_n_layers=2, local_attention=8)),
    "modernvbert": ("wordpiece", T.ModernVBertForMaskedLM, modernvbert_config, {}),
    "xlm-roberta": ("xlm-roberta", T.XLMRobertaForMaskedLM, T.XLMRobertaConfig, {}),
    "camembert": ("camembert", T.CamembertForMaskedLM, T.CamembertConfig, {}),
    "albert": ("albert", T.AlbertForMaskedLM, T.AlbertConfig, dict(embedding_size=16)),
    "deberta-v2": ("deberta-v2", T.DebertaV2ForMaskedLM, T.DebertaV2Config,
                   dict(relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"], position_biased_input=False)),
}
