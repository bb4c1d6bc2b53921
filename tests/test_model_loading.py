"""Issue 22.9: a lab's models -- loading options passed through (``--model-arg KEY=VALUE``,
``model_kwargs=``) and a PEFT adapter merged into the weights (``--adapter``), tested with a tiny
random LoRA on the tiny Llama."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import deer
from deer.backends.models import ModelUnavailableError, open_model
from deer.base.model_spec import ModelSpec, with_loading
from deer.platform.validate import OptionError
from experiments.cli import main

peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def lora_dirs(tmp_path_factory, tiny_clm_dir) -> tuple[Path, Path]:
    """(a random LoRA adapter on the tiny model, the tiny model with that adapter merged by hand)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("lora")
    torch.manual_seed(1)
    base = AutoModelForCausalLM.from_pretrained(tiny_clm_dir)
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    adapted = peft.get_peft_model(base, config)
    adapted.save_pretrained(root / "adapter")
    adapted.merge_and_unload().save_pretrained(root / "merged")
    AutoTokenizer.from_pretrained(tiny_clm_dir).save_pretrained(root / "merged")
    return root / "adapter", root / "merged"


def test_an_adapter_is_merged_into_the_weights(lora_dirs, tiny_clm_dir):
    adapter, merged = lora_dirs
    with_adapter = open_model(str(tiny_clm_dir), adapter=str(adapter))
    by_hand = open_model(str(merged))
    base = open_model(str(tiny_clm_dir))
    assert with_adapter.fingerprint == by_hand.fingerprint != base.fingerprint
    assert type(with_adapter.model).__name__ == "LlamaForCausalLM"  # a plain model again: every kernel applies
    assert with_adapter.metadata()["loading"] == {"adapter": str(adapter)}
    texts = ["a cat is an animal", "Paris"]
    vectors = deer.PromptEOLEncoder(with_adapter.model, with_adapter.tokenizer).embed(texts)
    np.testing.assert_allclose(vectors, deer.PromptEOLEncoder(by_hand.model, by_hand.tokenizer).embed(texts), atol=1e-5)
    assert not np.allclose(vectors, deer.PromptEOLEncoder(base.model, base.tokenizer).embed(texts), atol=1e-3)


def test_model_kwargs_reach_from_pretrained_and_the_fingerprint(tiny_clm_dir):
    base = open_model(str(tiny_clm_dir))
    eager = open_model(str(tiny_clm_dir), model_kwargs={"attn_implementation": "eager"})
    assert eager.model.config._attn_implementation == "eager"
    assert eager.fingerprint.startswith(base.fingerprint + "+args-")  # same weights, another way to run them
    assert eager.metadata()["loading"] == {"model_kwargs": {"attn_implementation": "eager"}}
    spec = ModelSpec(str(tiny_clm_dir), {"attn_implementation": "eager"}, "lora/")
    assert spec == str(tiny_clm_dir) and repr(pickle.loads(pickle.dumps(spec))) == repr(spec)  # the name, options kept


def test_bad_loading_options_are_refused_before_loading(tmp_path, tiny_clm_dir):
    with pytest.raises(OptionError, match="dtype .--dtype. has its own option"):
        open_model(str(tiny_clm_dir), model_kwargs={"torch_dtype": "float16"})
    with pytest.raises(OptionError, match="not a PEFT adapter folder .no adapter_config.json in it."):
        open_model(str(tiny_clm_dir), adapter=str(tmp_path))
    with pytest.raises(OptionError, match="applies to a model given by name"):
        with_loading(object(), {"trust_remote_code": True})
    with pytest.raises(ModelUnavailableError, match="could not be loaded"):
        open_model(str(tiny_clm_dir), model_kwargs={"no_such_keyword_anywhere": 1})


def test_the_cli_passes_model_args_and_adapter_to_every_model(tmp_path, tiny_kg_dir, tiny_clm_dir, lora_dirs):
    adapter, merged = lora_dirs
    common = ["--kg", str(tiny_kg_dir), "--k-shot", "2", "--no-cache"]
    result = CliRunner().invoke(main, ["probe", *common, "--model", str(tiny_clm_dir), "--adapter", str(adapter),
                                       "--model-arg", "attn_implementation=eager", "--out", str(tmp_path / "lora")])
    assert result.exit_code == 0, result.output
    model = json.loads((tmp_path / "lora" / "metadata.json").read_text())["deer"]["model"]
    assert model["loading"] == {"model_kwargs": {"attn_implementation": "eager"}, "adapter": str(adapter)}
    result = CliRunner().invoke(main, ["probe", *common, "--model", str(merged), "--model-arg", "attn_implementation=eager",
                                       "--out", str(tmp_path / "merged")])
    assert result.exit_code == 0, result.output
    by_hand = json.loads((tmp_path / "merged" / "metadata.json").read_text())["deer"]
    assert by_hand["model"]["fingerprint"] == model["fingerprint"]
    assert (json.loads((tmp_path / "merged" / "metrics.json").read_text())
            == json.loads((tmp_path / "lora" / "metrics.json").read_text()))
    bad = CliRunner().invoke(main, ["probe", *common, "--model", str(tiny_clm_dir), "--model-arg", "eager"])
    assert bad.exit_code != 0 and "'eager' is not KEY=VALUE" in bad.output
    bad = CliRunner().invoke(main, ["probe", *common, "--model", str(tiny_clm_dir), "--model-arg", "torch_dtype=float16"])
    assert bad.exit_code != 0 and "--model-arg torch_dtype='float16': the dtype (--dtype) has its own option" in bad.output
    bad = CliRunner().invoke(main, ["probe", *common, "--model", str(tiny_clm_dir), "--adapter", str(tmp_path)])
    assert bad.exit_code != 0 and "no adapter_config.json" in bad.output
