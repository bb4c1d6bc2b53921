"""What a backend reads from a loaded model's config."""

from __future__ import annotations


def text_config(model):
    """The config of the model's text part (a multimodal model nests it; a text model's is its own)."""
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config
