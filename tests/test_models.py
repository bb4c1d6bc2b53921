"""Model name resolution, fingerprints and clear failures; a causal LM checkpoint that lacks weights is refused by the
probes that would read them at random."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import transformers as T
from click.testing import CliRunner
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

import bear_ref
import deer
from deer.backends.models import RANDOM_HEAD, ModelUnavailableError, load_model, open_model, resolve_model
from experiments.cli import main


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
    assert "hf download facebook/opt-125m" in str(error.value)  # huggingface_hub 1.x has no huggingface-cli


# -- weight fingerprint ---------------------------------------------------------------------------


def _embedding_model(rows: int = 100, width: int = 64, dtype=None):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(rows, width), torch.nn.Linear(width, 8))
    return model.to(dtype) if dtype is not None else model


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
def test_fingerprint_sees_an_edit_past_the_first_2048_values(dtype_name):
    import torch

    from deer.backends.fingerprints import model_fingerprint

    model = _embedding_model(dtype=getattr(torch, dtype_name))
    before = model_fingerprint(model)
    original = model[0].weight[90, 3].item()
    with torch.no_grad():
        model[0].weight[90, 3] = original + 1.0  # value 5763 of the tensor, far past the first 2,048
    assert model_fingerprint(model) != before
    with torch.no_grad():
        model[0].weight[90, 3] = original
    assert model_fingerprint(model) == before


def test_fingerprint_names_shapes_and_dtypes():
    import torch

    from deer.backends.fingerprints import tensors_fingerprint

    weight = torch.arange(12, dtype=torch.float32)
    base = tensors_fingerprint([("w", weight)])
    assert tensors_fingerprint([("v", weight)]) != base
    assert tensors_fingerprint([("w", weight.reshape(3, 4))]) != base
    assert tensors_fingerprint([("w", weight.view(torch.int32))]) != base  # same bytes, other dtype


def test_identical_weights_in_two_copies_share_the_fingerprint(tmp_path):
    import copy

    import torch

    from deer.backends.fingerprints import model_fingerprint, tensors_fingerprint

    model = _embedding_model()
    twin = copy.deepcopy(model)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(model.parameters(), twin.parameters(), strict=True))
    assert model_fingerprint(twin) == model_fingerprint(model)
    # Saved and read back from disk (another folder, other memory): still the same.
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    reloaded = _embedding_model()
    with torch.no_grad():
        for parameter in reloaded.parameters():
            parameter.zero_()
    reloaded.load_state_dict(torch.load(tmp_path / "weights.pt"))
    assert model_fingerprint(reloaded) == model_fingerprint(model)
    # The thread count and a non-contiguous layout change nothing.
    items = list(model.state_dict().items())
    assert tensors_fingerprint(items, threads=0) == tensors_fingerprint(items, threads=4)
    transposed = model[1].weight.detach().t().contiguous().t()
    assert not transposed.is_contiguous()
    assert tensors_fingerprint([("w", transposed)]) == tensors_fingerprint([("w", model[1].weight.detach().clone())])


def test_fingerprint_of_a_loaded_model_in_two_copies(tiny_clm_dir):
    from deer.backends.fingerprints import model_fingerprint

    first, _, _ = load_model(str(tiny_clm_dir))
    second, _, _ = load_model(str(tiny_clm_dir))
    assert model_fingerprint(first) == model_fingerprint(second)
    assert model_fingerprint(first) != model_fingerprint(load_model(str(tiny_clm_dir), dtype="bfloat16")[0])


def test_device_auto_takes_the_gpu_when_there_is_one(monkeypatch):
    import torch

    from deer.backends.models import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda:0"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cuda:1") == "cuda:1" and resolve_device("cpu") == "cpu"


def test_a_dtype_or_device_other_than_the_given_models_is_refused(tiny_clm, tiny_kg_dir):
    """A model object (or a LoadedModel) given with dtype="bfloat16" ran in its own float32 without a
    word, its run recorded as float32: a dtype or device it does not have is refused, its own is accepted."""
    import deer
    from deer.backends.models import as_loaded_model
    from deer.base.errors import OptionError

    model, tokenizer = tiny_clm
    with pytest.raises(OptionError, match=r"dtype='bfloat16'.*loaded already, in float32"):
        deer.probe(str(tiny_kg_dir), (model, tokenizer), dtype="bfloat16", show_progress=False)
    loaded = as_loaded_model(model, tokenizer, dtype="float32", device="cpu")
    with pytest.raises(OptionError, match=r"device='cuda:1'.*loaded already, in float32 on cpu"):
        as_loaded_model(loaded, dtype="auto", device="cuda:1")
    assert as_loaded_model(loaded, dtype="float32", device="cpu") is loaded


def test_a_tokenizer_beside_a_model_that_has_its_own_is_refused(tiny_clm, tiny_clm_dir, tiny_kg_dir):
    """deer.probe(kg, "folder", tokenizer=mine) ran with the folder's tokenizer, mine dropped without a
    word: a tokenizer is taken only beside a model object; beside a name or a LoadedModel it is refused."""
    import deer
    from deer.backends.models import as_loaded_model
    from deer.base.errors import OptionError

    model, tokenizer = tiny_clm
    with pytest.raises(OptionError, match=r"tokenizer=.*a model given by name or a LoadedModel has its own"):
        deer.probe(str(tiny_kg_dir), str(tiny_clm_dir), tokenizer=tokenizer, show_progress=False)
    loaded = as_loaded_model(model, tokenizer)
    with pytest.raises(OptionError, match=r"tokenizer=.*has its own"):
        as_loaded_model(loaded, copy.deepcopy(tokenizer))  # another tokenizer object
    assert as_loaded_model(loaded, loaded.tokenizer) is loaded


def test_a_tokenizer_beside_a_model_and_tokenizer_pair_is_refused(tiny_clm):
    """as_loaded_model((model, its_tokenizer), another) ran with the pair's tokenizer, the other dropped without a word."""
    from deer.backends.models import as_loaded_model
    from deer.base.errors import OptionError

    model, tokenizer = tiny_clm
    with pytest.raises(OptionError, match=r"tokenizer=.*as has a \(model, tokenizer\) pair"):
        as_loaded_model((model, tokenizer), copy.deepcopy(tokenizer))
    assert as_loaded_model((model, tokenizer), tokenizer).tokenizer is tokenizer


def test_a_bert_family_model_trained_as_a_decoder_is_a_causal_lm(tmp_path, tiny_clm_dir):
    """A RoBERTa trained left to right (RobertaForCausalLM, is_decoder) was loaded as RobertaForMaskedLM and scored
    with pseudo log-likelihood, its model type being a masked LM's: a decoder is loaded and scored as a causal LM."""
    from transformers import AutoTokenizer, RobertaConfig, RobertaForCausalLM

    from deer.backends.models import is_masked_lm, is_masked_lm_config, open_model

    tokenizer = AutoTokenizer.from_pretrained(tiny_clm_dir)
    config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=4, is_decoder=True)
    RobertaForCausalLM(config).save_pretrained(tmp_path / "decoder")
    tokenizer.save_pretrained(tmp_path / "decoder")
    loaded = open_model(str(tmp_path / "decoder"))
    assert type(loaded.model).__name__ == "RobertaForCausalLM" and not is_masked_lm(loaded.model)
    assert is_masked_lm_config(RobertaConfig()) and is_masked_lm_config(RobertaConfig(architectures=["RobertaForMaskedLM"]))


def test_a_roberta_decoders_statements_score_as_in_one_whole_pass(tmp_path, tiny_clm_dir):
    """A RoBERTa decoder's statement scores (prefix trie, shared context) differed from one whole pass per statement:
    RoBERTa numbers positions from its padding id + 1 where the hf kernels passed their own from 0, and its LM head
    transforms the hidden states (dense, GELU, norm) before the output embeddings, which the kernels applied alone."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer, RobertaConfig, RobertaForCausalLM

    from deer.backends import open_backend
    from deer.backends.model_config import max_positions, position_offset

    tokenizer = AutoTokenizer.from_pretrained(tiny_clm_dir)
    torch.manual_seed(0)
    RobertaForCausalLM(RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=4, is_decoder=True, pad_token_id=tokenizer.pad_token_id,
                                     )).save_pretrained(tmp_path / "decoder")  # its padding id the tokenizer's, as a RoBERTa's is
    tokenizer.save_pretrained(tmp_path / "decoder")
    hf, plain = (open_backend(name, str(tmp_path / "decoder"), show_progress=False) for name in ("hf", "plain"))
    offset = tokenizer.pad_token_id + 1  # positions begin after the padding id
    assert position_offset(hf.model) == offset and max_positions(hf.model) == hf.model.config.max_position_embeddings - offset
    statements = ["a cat is an animal", "Paris is a city", "Paris is a river"]
    expected = plain.statement_scorer().score_statements(statements)
    np.testing.assert_allclose(hf.statement_scorer().score_statements(statements), expected, rtol=1e-5, atol=1e-4)
    context, continuations = "Paris is a", [" city", " river"]
    np.testing.assert_allclose(hf.statement_scorer().score(context, continuations),
                               plain.statement_scorer().score(context, continuations), rtol=1e-5, atol=1e-4)


def _twin_with_config(model, **changes):
    """The same weights under a config with ``changes`` (another activation, norm epsilon...)."""
    twin = type(model)(type(model.config)(**{**model.config.to_dict(), **changes})).eval()
    twin.load_state_dict(model.state_dict())
    return twin


def test_the_same_weights_under_another_config_are_another_model(tiny_clm, tiny_clm_dir, tiny_kg_dir, tmp_path):
    """The fingerprint hashes the config as well as the weights: with cache=True the second model used to read the
    first one's stored vectors (same weights, other activation: the first model's MRR)."""
    import torch

    from deer.backends.fingerprints import model_fingerprint

    model, tokenizer = tiny_clm
    twin = _twin_with_config(model, hidden_act="relu", rms_norm_eps=0.5)
    assert model_fingerprint(twin) != model_fingerprint(model)
    # One model loaded twice, from another folder or with another attention back-end, keeps its fingerprint.
    assert model_fingerprint(load_model(str(tiny_clm_dir))[0]) == model_fingerprint(model)
    eager = type(model).from_pretrained(tiny_clm_dir, attn_implementation="eager", dtype=torch.float32)
    assert model_fingerprint(eager) == model_fingerprint(model)
    cache = tmp_path / "cache"
    deer.probe(str(tiny_kg_dir), (model, tokenizer), k_shot=2, cache=True, cache_dir=cache, show_progress=False)
    cached = deer.probe(str(tiny_kg_dir), (twin, tokenizer), k_shot=2, cache=True, cache_dir=cache, show_progress=False)
    fresh = deer.probe(str(tiny_kg_dir), (twin, tokenizer), k_shot=2, show_progress=False)
    assert cached.metadata["cache"]["entities_encoded_now"] > 0
    np.testing.assert_array_equal(cached.ranks(), fresh.ranks())


def test_a_tokenizer_that_splits_text_otherwise_is_another_tokenizer(tiny_clm, tiny_clm_dir, tiny_kg_dir, tmp_path):
    """A lower-casing normalizer (same vocabulary) changes the fingerprint; loading twice or a padded call does not."""
    from tokenizers import normalizers
    from transformers import AutoTokenizer

    from deer.backends.fingerprints import tokenizer_fingerprint

    model, tokenizer = tiny_clm
    before = tokenizer_fingerprint(tokenizer)
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(tiny_clm_dir)) == before
    lower = AutoTokenizer.from_pretrained(tiny_clm_dir)
    lower(["Paris", "a longer text"], padding=True, truncation=True, max_length=3)  # sets the backend's padding/truncation
    assert tokenizer_fingerprint(lower) == before
    lower.backend_tokenizer.normalizer = normalizers.Lowercase()
    assert lower("Paris")["input_ids"] != tokenizer("Paris")["input_ids"]
    assert tokenizer_fingerprint(lower) != before
    cache = tmp_path / "cache"
    deer.probe(str(tiny_kg_dir), (model, tokenizer), k_shot=2, cache=True, cache_dir=cache, show_progress=False)
    cached = deer.probe(str(tiny_kg_dir), (model, lower), k_shot=2, cache=True, cache_dir=cache, show_progress=False)
    fresh = deer.probe(str(tiny_kg_dir), (model, lower), k_shot=2, show_progress=False)
    np.testing.assert_array_equal(cached.ranks(), fresh.ranks())


def test_a_loaded_model_changed_in_place_is_fingerprinted_again(tiny_clm_dir, tiny_kg_dir, tmp_path):
    """A LoadedModel fine-tuned (here: scaled) after it was opened used to keep its fingerprint, and cache=True
    returned the old weights' numbers; a config entry set in place likewise."""
    import torch

    loaded = deer.open_model(str(tiny_clm_dir))
    first = loaded.fingerprint
    cache = tmp_path / "cache"
    deer.probe(str(tiny_kg_dir), loaded, k_shot=2, cache=True, cache_dir=cache, show_progress=False)
    with torch.no_grad():
        for parameter in loaded.model.parameters():
            parameter.mul_(1.5)
    cached = deer.probe(str(tiny_kg_dir), loaded, k_shot=2, cache=True, cache_dir=cache, show_progress=False)
    fresh = deer.probe(str(tiny_kg_dir), deer.LoadedModel.from_objects(loaded.model, loaded.tokenizer), k_shot=2,
                       show_progress=False)
    np.testing.assert_array_equal(cached.ranks(), fresh.ranks())
    assert loaded.fingerprint != first and cached.metadata["model"]["fingerprint"] == loaded.fingerprint
    from deer.backends.fingerprints import weights_stamp

    assert weights_stamp(loaded.model) == loaded.stamp  # probing writes nothing in place: no hashing on every call
    scaled = loaded.fingerprint
    loaded.model.config.rms_norm_eps = 0.5
    assert loaded.current().fingerprint != scaled


@pytest.mark.parametrize("entry", ["probe", "open_backend", "folder"])
def test_a_model_and_tokenizer_of_different_vocabularies_are_refused(entry, tiny_clm, tiny_kg_dir, tmp_path):
    """deer.probe(KG, (model, tok)) with a 512-row embedding and SmolLM2's 49,152-id tokenizer ended in torch's
    "IndexError: index out of range in self" mid-run; open_backend accepted the pair.  It is refused when the model
    is taken (a pair, a model with tokenizer=, or a folder saved that way), naming both sizes."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from deer.backends import open_backend
    from deer.base.errors import OptionError

    _, tokenizer = tiny_clm
    torch.manual_seed(0)
    small = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)).eval()
    sizes = rf"vocabulary has {tokenizer.vocab_size:,} ids.*input embedding has 512 rows"
    with pytest.raises(OptionError, match=sizes):
        if entry == "probe":
            deer.probe(str(tiny_kg_dir), (small, tokenizer), k_shot=1, show_progress=False)
        elif entry == "open_backend":
            open_backend("hf", small, tokenizer=tokenizer)
        else:
            small.save_pretrained(tmp_path / "mismatched")
            tokenizer.save_pretrained(tmp_path / "mismatched")
            open_backend("hf", str(tmp_path / "mismatched"))


def test_special_tokens_past_the_embedding_are_refused_and_a_padded_embedding_is_not(tiny_clm):
    """A tokenizer whose base vocabulary fits but whose BOS lies past the embedding would fail in torch on the
    first prompt; an embedding with more rows than the tokenizer has ids (padded to a multiple of 64) is fine."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from deer.backends.models import check_vocabulary
    from deer.base.errors import OptionError

    _, tokenizer = tiny_clm

    def llama(rows):
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(vocab_size=rows, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=1))

    check_vocabulary(llama(len(tokenizer) + 64), tokenizer, "padded")  # no error

    class BosPastTheEnd:
        vocab_size, bos_token_id, eos_token_id = 100, 100, 2

    with pytest.raises(OptionError, match=r"bos id 100.*100 rows"):
        check_vocabulary(llama(100), BosPastTheEnd(), "tiny")


# -- a causal LM checkpoint that lacks weights (was test_causal_missing_weights.py) ----------------


HEADLESS = r"the (bear|lama) probe reads the LM head, which the checkpoint of .* lacks \(lm_head.weight\): it would be random"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, smollm2_dir):
    """Folders of one untied tiny Llama: 'whole', 'headless' (its base model saved alone), 'holed' (one MLP weight cut)."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False)).eval()
    root = tmp_path_factory.mktemp("checkpoints")
    for name, saved in (("whole", model), ("headless", model.model), ("holed", model)):
        saved.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    weights = load_file(root / "holed" / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, root / "holed" / "model.safetensors", metadata={"format": "pt"})
    return {name: str(root / name) for name in ("whole", "headless", "holed")}


def test_a_checkpoint_without_its_head_runs_deer_and_refuses_the_probes_that_read_it(checkpoints, tiny_kg_dir):
    options = dict(cache=False, show_progress=False)
    whole = deer.probe(str(tiny_kg_dir), checkpoints["whole"], **options)
    headless = deer.probe(str(tiny_kg_dir), checkpoints["headless"], **options)
    assert headless.table["deer_rank_filtered"].tolist() == whole.table["deer_rank_filtered"].tolist()
    assert headless.metrics.flat() == whole.metrics.flat()
    fingerprints = {open_model(checkpoints["headless"], dtype="float32", device="cpu").fingerprint for _ in range(2)}
    assert len(fingerprints) == 1  # the absent head is made the same at every load: DEER's store is found again
    for probe in (bear_ref.bear, bear_ref.lama):
        assert probe(str(tiny_kg_dir), checkpoints["whole"], **options).metrics["n"] > 0  # a head present: not refused
        with pytest.raises(ValueError, match=HEADLESS):
            probe(str(tiny_kg_dir), checkpoints["headless"], **options)
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", checkpoints["headless"],
                                       "--probe", "bear", "--no-cache", "--out", str(tiny_kg_dir.parent / "out")])
    assert result.exit_code == 1 and "reads the LM head" in result.output
    assert not (tiny_kg_dir.parent / "out" / "metrics.json").exists()


def test_a_checkpoint_missing_a_weight_of_the_body_is_refused(checkpoints):
    with pytest.raises(ModelUnavailableError, match=r"no weights for 1 parameters of LlamaForCausalLM "
                                                    r"\(model\.layers\.1\.mlp\.up_proj\.weight\): they would be random"):
        open_model(checkpoints["holed"], dtype="float32", device="cpu")


FAMILIES = {  # tied and untied heads, a head with a bias (Phi, GPT-J), OPT's projected output
    "gpt2": lambda v: T.GPT2Config(vocab_size=v, n_embd=32, n_layer=2, n_head=4),
    "opt": lambda v: T.OPTConfig(vocab_size=v, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
                                 word_embed_proj_dim=16),
    "gpt_neox": lambda v: T.GPTNeoXConfig(vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4),
    "phi": lambda v: T.PhiConfig(vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4),
    "gptj": lambda v: T.GPTJConfig(vocab_size=v, n_embd=32, n_layer=2, n_head=4, rotary_dim=4),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_saved_whole_loads_unmarked_and_without_its_head_marked(family, tmp_path, smollm2_dir):
    """No false alarm on a whole checkpoint (a tied head is not in the file), and exactly the head's parameters named
    where an untied head is left out."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(FAMILIES[family](len(tokenizer))).eval()
    model.save_pretrained(tmp_path / "whole")
    tokenizer.save_pretrained(tmp_path / "whole")
    assert getattr(load_model(str(tmp_path / "whole"), dtype="float32", device="cpu")[0], RANDOM_HEAD) == ()
    head = model.get_output_embeddings()
    if head.weight is model.get_input_embeddings().weight:
        return  # tied: no checkpoint can lack the head alone
    model.base_model.save_pretrained(tmp_path / "headless")
    tokenizer.save_pretrained(tmp_path / "headless")
    expected = tuple(sorted(f"lm_head.{name}" for name, _ in head.named_parameters()))
    assert getattr(load_model(str(tmp_path / "headless"), dtype="float32", device="cpu")[0], RANDOM_HEAD) == expected
