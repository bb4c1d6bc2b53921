"""What a backend reads from a loaded model's config."""

from __future__ import annotations


def text_config(model):
    """The config of the model's text part (a multimodal model nests it; a text model's is its own)."""
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


POSITION_ATTRIBUTES = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def position_offset(model) -> int:
    """The first position id a kernel passes: RoBERTa's family numbers positions from its padding id + 1, others from 0."""
    embeddings = getattr(getattr(model, "base_model", None), "embeddings", None)
    padding = getattr(getattr(embeddings, "position_embeddings", None), "padding_idx", None)
    return 0 if padding is None else padding + 1


def max_positions(model) -> int | None:
    """The model's position limit from its config (None if none), less ``position_offset``: roberta-base's 514 hold 512."""
    config = text_config(model)
    for attribute in POSITION_ATTRIBUTES:
        value = getattr(config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value - position_offset(model)
    return None
