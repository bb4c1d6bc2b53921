"""Model name resolution and clear failures."""

from __future__ import annotations

import pytest

from deer.models import ModelUnavailableError, load_model, resolve_model


def test_aliases_and_hub_ids():
    assert resolve_model("opt-1.3b").source == "facebook/opt-1.3b"
    assert resolve_model("gpt2").source == "openai-community/gpt2"
    assert resolve_model("facebook/opt-350m").kind == "hub"


def test_bundled_default_resolves_to_converted_folder(smollm2_dir):
    resolved = resolve_model("smollm2-135m")
    assert resolved.kind == "bundled" and (smollm2_dir / "config.json").exists()


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelUnavailableError, match="config.json"):
        resolve_model(str(tmp_path))


def test_offline_hub_model_gives_install_hint():
    with pytest.raises(ModelUnavailableError) as error:
        load_model("opt-125m")
    assert "huggingface-cli download facebook/opt-125m" in str(error.value)
