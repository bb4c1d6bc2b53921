"""The vLLM backend (``--backend vllm``): DEER, BEAR and LAMA on causal LMs through vLLM's engine.

Every prompt and statement reaches the engine as the toolkit's own token ids (``batch_token_ids``, the BOS policy
included), so its vectors and scores are the hf backend's up to the last bits:
- DEER: each prompt's last-layer state at its last token, from a pooling engine (``runner="pooling"``,
  ``convert="embed"``, LAST pooling without activation or normalisation; prefix caching on, so a shared few-shot
  block runs once);
- BEAR: each statement's summed log p of every token after the first, from a generating engine's prompt
  log-probs (``prompt_logprobs=0``: the log p of each prompt token);
- LAMA: log p(id | prompt) for the asked ids, read from the full next-token distribution (``logprobs=-1``,
  the engine made with ``max_logprobs=-1``).
Each engine is made on its first use (DEER alone starts only the pooling one), in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless set: no spawned engine process, so library code, notebooks and
pytest need no ``__main__`` guard).  The model's facts come from its files (config.json, the tokenizer, the
weight files' bytes for the fingerprint), never from a torch module; masked LMs and unknown engine options are
refused before an engine starts.  Install: ``pip install 'deer-probe-toolkit[vllm]'`` (GPU) or
``scripts/install_vllm.sh`` (vLLM's CPU build, in ``.venv-vllm``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from deer.backends.encoder import Encoder, EncoderOutput, distinct_prompts
from deer.backends.fingerprints import config_fingerprint, files_fingerprint, tokenizer_fingerprint
from deer.backends.model_backend import ModelBackend
from deer.backends.model_config import max_positions, text_config
from deer.backends.models import (
    LoadedModel,
    ModelUnavailableError,
    is_masked_lm_config,
    resolve_device,
    resolve_dtype,
    resolve_model,
)
from deer.backends.tokenization import batch_token_ids
from deer.base.errors import OptionError
from deer.base.extras import import_extra
from deer.base.model_spec import loading_options, loading_suffix
from deer.base.work import WorkCounter

# What the backend sets itself: an engine option of these names is refused (``dtype``/``device`` have their own).
OWN_OPTIONS = frozenset({"model", "tokenizer", "runner", "convert", "pooler_config", "max_logprobs", "skip_tokenizer_init",
                         "tokenizer_mode"})
# Engine options that change how fast it runs, not what it computes: left out of the fingerprint, so a store
# filled with one memory setting is read back with another (tensor parallelism and batching move only last bits,
# as batch sizes do on the hf backend).
RUNTIME_OPTIONS = frozenset({"tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization", "kv_cache_memory_bytes",
                             "max_model_len", "enforce_eager", "max_num_seqs", "max_num_batched_tokens", "swap_space",
                             "cpu_offload_gb", "enable_prefix_caching", "block_size", "disable_log_stats", "seed",
                             "distributed_executor_backend", "compilation_config", "enable_chunked_prefill"})
CPU_KV_CACHE_BYTES = 1 << 30  # on vLLM's CPU build, where no memory option is given: 1 GiB of KV cache, not 92% of RAM
# On vLLM's CPU build, where no compilation_config is given: no torch.compile.  Measured on SmolLM2-135M (2 busy
# cores): an engine started in 5 s instead of 60-80 s (its compile cache failed to load each time), and ran
# 15-30% slower per token: --model-arg compilation_config=2 compiles for a long CPU run.
CPU_COMPILATION = {"mode": 0}
PROMPTS_PER_CALL = 256  # prompts handed to the engine at once: progress and ``on_batch`` in steps of this size
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
HUB_FILES = ("*.json", "*.model", "*.tiktoken", "*.txt", "*.py")  # what a hub snapshot needs besides the weights


def engine_option_names() -> frozenset[str]:
    """Every option vLLM's ``EngineArgs`` takes (what ``LLM(...)`` passes on), less those the backend sets itself."""
    import_extra("vllm", "vllm", "--backend vllm")
    from vllm.engine.arg_utils import EngineArgs

    return frozenset(field.name for field in dataclasses.fields(EngineArgs)) - OWN_OPTIONS


def check_engine_options(options: dict) -> None:
    """Each engine option (``--model-arg``, ``model_kwargs``) one vLLM takes; else an OptionError naming it."""
    known = engine_option_names()
    for key, value in options.items():
        if key in OWN_OPTIONS:
            raise OptionError("model_kwargs", f"{key}={value!r}", "the vllm backend sets it itself")
        if key not in known:
            raise OptionError("model_kwargs", f"{key}={value!r}", "not an option of vLLM's engine (vllm.EngineArgs); "
                                                                  "e.g. tensor_parallel_size, gpu_memory_utilization, "
                                                                  "max_model_len, enforce_eager")


def engine_device(device: str) -> str:
    """The device the engine runs on: vLLM's platform ("cpu" on its CPU build, "cuda" on GPUs, the visible ones);
    ``device`` asking for another is an OptionError, before the engine starts."""
    from vllm.platforms import current_platform

    platform = current_platform.device_type or "cpu"
    wanted = resolve_device(device) if device != "auto" else platform
    kind, _, index = str(wanted).partition(":")
    if kind != platform:
        raise OptionError("device", device, f"this vLLM runs on {platform} (vLLM's {'CPU build' if platform == 'cpu' else platform} "
                                            "is installed)")
    if index not in ("", "0"):
        raise OptionError("device", device, "vLLM runs on the visible GPUs from the first: choose them with CUDA_VISIBLE_DEVICES "
                                            "(and --model-arg tensor_parallel_size=N), and leave --device out")
    return "cpu" if platform == "cpu" else f"{platform}:0"


def weights_folder(resolved, options: dict) -> Path:
    """The local folder of the model's files: a folder as it is; a hub id's snapshot (from the hub cache, or
    downloaded as vLLM would) with its ``revision``."""
    if resolved.kind != "hub":
        return Path(resolved.source)
    from huggingface_hub import snapshot_download

    revision = resolved.revision or options.get("revision")
    try:  # the config, tokenizer and code files with the safetensors weights; PyTorch's weights only where there are none
        folder = Path(snapshot_download(resolved.source, revision=revision, allow_patterns=[*HUB_FILES, "*.safetensors"]))
        if not any(folder.glob("*.safetensors")):
            folder = Path(snapshot_download(resolved.source, revision=revision, allow_patterns=[*HUB_FILES, "*.bin", "*.pt"]))
        return folder
    except Exception as error:  # noqa: BLE001 - offline, unknown id: one message names the model
        raise ModelUnavailableError(f"Model '{resolved.name}' (hub id '{resolved.source}') could not be had: "
                                    f"{type(error).__name__}: {error}") from error


@dataclasses.dataclass
class VLLMEngines:
    """The model as the vllm backend holds it: where its files are, its dtype and engine options; its engines
    (``pooling`` for vectors, ``generate`` for log-probs) are made on first use and shared by every backend
    opened on the same model in this process (``SHARED``: an engine takes up to a minute to start, and a script or
    test may open the backend again), one model's at a time: opening another model's releases them."""

    folder: str
    dtype: str
    options: dict

    @property
    def key(self) -> tuple:
        return self.folder, self.dtype, json.dumps(self.options, sort_keys=True, default=str)

    def engine(self, runner: str):
        """The engine for ``runner`` ("pooling" or "generate"), started now if this model has none yet."""
        if SHARED.key != self.key:
            release_engines()
            SHARED.key = self.key
        if runner not in SHARED.engines:
            SHARED.engines[runner] = start_engine(self, runner)
        return SHARED.engines[runner]


SHARED = SimpleNamespace(key=None, engines={})  # the one model whose engines this process holds (``VLLMEngines``)


def start_engine(model: VLLMEngines, runner: str):
    """A vLLM engine on ``model`` for ``runner``: "pooling" (LAST pooling, no activation: the last state as it is;
    prefix caching on) or "generate" (``max_logprobs=-1``: whole next-token distributions for LAMA)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process (see the module docstring)
    from vllm import LLM
    from vllm.config import PoolerConfig
    from vllm.platforms import current_platform

    options = dict(model.options)
    if (current_platform.device_type or "cpu") == "cpu":  # vLLM's CPU build: defaults for tests and small models
        memory = {"kv_cache_memory_bytes", "gpu_memory_utilization"} & set(options) or os.environ.get("VLLM_CPU_KVCACHE_SPACE")
        if not memory:
            options["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        options.setdefault("compilation_config", CPU_COMPILATION)
    if runner == "pooling":
        options = {"enable_prefix_caching": True, **options, "runner": "pooling", "convert": "embed",
                   "pooler_config": PoolerConfig(pooling_type="LAST", use_activation=False)}
    else:
        options = {**options, "runner": "generate", "max_logprobs": -1}
    with kept_random_state():  # in this process, vLLM seeds Python's, NumPy's and torch's global generators
        return LLM(model=model.folder, dtype=model.dtype, **options)


@contextlib.contextmanager
def kept_random_state():
    """The global random generators (Python's, NumPy's, torch's CPU one) as they were before the enclosed code."""
    import random

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


def release_engines() -> None:
    """Drop this process's engines and free what they hold (on a GPU: its memory, for the next model's)."""
    import gc

    SHARED.key, SHARED.engines = None, {}
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def vllm_version() -> str:
    try:
        return importlib_metadata.version("vllm")
    except importlib_metadata.PackageNotFoundError:  # vLLM's CPU build installs as vllm-cpu
        return importlib_metadata.version("vllm-cpu")


def last_logprob_rows(logprobs, ids: Sequence[int]) -> list[float]:
    """From vLLM's prompt log-probs (``FlatLogprobs`` or a list of {token id: Logprob}, None first), log p of
    each prompt token after the first, in order."""
    values = []
    if hasattr(logprobs, "start_indices"):  # FlatLogprobs: lists, no object per entry
        for position in range(1, len(ids)):
            start, end = logprobs.start_indices[position], logprobs.end_indices[position]
            values.append(logprobs.logprobs[start + logprobs.token_ids[start:end].index(ids[position])])
        return values
    return [logprobs[position][ids[position]].logprob for position in range(1, len(ids))]


def next_token_distribution(logprobs, vocabulary: int) -> np.ndarray:
    """float32 (vocabulary,) log p(next token) from the first generated position's log-probs (``logprobs=-1``)."""
    row = np.full(vocabulary, -np.inf, dtype=np.float32)
    if hasattr(logprobs, "start_indices"):
        start, end = logprobs.start_indices[0], logprobs.end_indices[0]
        row[np.asarray(logprobs.token_ids[start:end])] = logprobs.logprobs[start:end]
    else:
        for token, entry in logprobs[0].items():
            row[token] = entry.logprob
    return row


class VLLMEncoder(Encoder):
    """``PromptEOLEncoder``'s interface on the pooling engine (``next_token_ids``: also the generating engine's
    full next-token distribution, the asked ids read from it)."""

    max_batch_size = None  # the engine schedules its own batches

    def __init__(self, backend: VLLMBackend, special_tokens: str = "bos"):
        self.backend, self.tokenizer, self.special_tokens = backend, backend.tokenizer, special_tokens
        self.token_budget, self.show_progress = backend.token_budget, backend.show_progress
        self.stats = WorkCounter("prompts", "tokens", "padded_tokens")

    @property
    def output_size(self) -> int:
        return self.backend.output_size

    def encode_ids(self, id_lists: Sequence[Sequence[int]], next_token_ids: np.ndarray | None = None,
                   description: str = "encoding", progress=None, on_batch=None) -> EncoderOutput:
        """As ``PromptEOLEncoder.encode_ids``: float32 vectors in input order (handed to ``on_batch(positions,
        vectors)`` per engine call instead, where given), and log p of ``next_token_ids`` after each prompt.
        Identical prompts go to the engine once."""
        n = len(id_lists)
        prompts, copies = distinct_prompts(id_lists)
        self.stats.add(duplicate_prompts=n - len(prompts))
        embeddings = None if on_batch is not None else np.zeros((n, self.output_size), dtype=np.float32)
        logprobs = None if next_token_ids is None else np.zeros((n, len(next_token_ids)), dtype=np.float32)
        for start in range(0, len(prompts), PROMPTS_PER_CALL):
            chunk = prompts[start:start + PROMPTS_PER_CALL]
            rows = [copies[start + i] for i in range(len(chunk))]
            positions = np.asarray([p for row in rows for p in row], dtype=np.int64)
            repeats = [len(row) for row in rows]
            with self.stats.forward():
                vectors = np.repeat(self._vectors(chunk), repeats, axis=0)
                if logprobs is not None:
                    wanted = np.asarray(next_token_ids, dtype=np.int64)
                    logprobs[positions] = np.repeat(self._next_token_logprobs(chunk, wanted), repeats, axis=0)
            tokens = sum(len(ids) for ids in chunk)
            self.stats.add(prompts=len(positions), tokens=tokens, padded_tokens=tokens)
            if on_batch is not None:
                on_batch(positions, vectors)
            else:
                embeddings[positions] = vectors
            if progress is not None:
                progress.update(len(positions))
        return EncoderOutput(embeddings, logprobs)

    def _vectors(self, prompts: Sequence[tuple[int, ...]]) -> np.ndarray:
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=[int(token) for token in ids]) for ids in prompts]
        outputs = self.backend.engines.engine("pooling").embed(prompts, use_tqdm=False)
        vectors = np.asarray([output.outputs.embedding for output in outputs], dtype=np.float32).reshape(len(prompts), -1)
        if vectors.shape[1] != self.output_size:
            raise RuntimeError(f"vLLM's pooled vectors have {vectors.shape[1]} columns; the model's config says "
                               f"{self.output_size} (output_size): this model's last state is not what the config states")
        return vectors

    def _next_token_logprobs(self, prompts: Sequence[tuple[int, ...]], wanted: np.ndarray) -> np.ndarray:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=[int(token) for token in ids]) for ids in prompts]
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1, detokenize=False, flat_logprobs=True)
        outputs = self.backend.engines.engine("generate").generate(prompts, params, use_tqdm=False)
        vocabulary = self.backend.vocabulary_size
        return np.stack([next_token_distribution(output.outputs[0].logprobs, vocabulary)[wanted] for output in outputs])


class VLLMStatementScorer:
    """``StatementScorer``'s interface on the generating engine: each whole statement's summed log p of every
    token after the first, from its prompt log-probs (as the plain backend scores: ``score(context, continuations)``
    scores ``context + continuation``)."""

    method = statements_method = "vllm-whole-statement-sum-logprob"

    def __init__(self, backend: VLLMBackend):
        self.backend = backend
        self.stats = WorkCounter("statements", "tokens")

    def score(self, context: str, continuations: Sequence[str]) -> np.ndarray:
        return self.score_statements([context + continuation for continuation in continuations])

    def score_statements(self, statements: Sequence[str], progress=None) -> np.ndarray:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids = batch_token_ids(self.backend.tokenizer, statements)
        scores = np.zeros(len(statements), dtype=np.float64)
        scored = [i for i, row in enumerate(ids) if len(row) > 1]  # one token: nothing after the first, 0
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False, flat_logprobs=True)
        for start in range(0, len(scored), PROMPTS_PER_CALL):
            chunk = scored[start:start + PROMPTS_PER_CALL]
            with self.stats.forward():
                outputs = self.backend.engines.engine("generate").generate(
                    [TokensPrompt(prompt_token_ids=ids[i]) for i in chunk], params, use_tqdm=False)
            for i, output in zip(chunk, outputs, strict=True):
                scores[i] = float(np.sum(np.asarray(last_logprob_rows(output.prompt_logprobs, ids[i]), dtype=np.float64)))
            self.stats.add(statements=len(chunk), tokens=sum(len(ids[i]) for i in chunk))
            if progress is not None:
                progress(len(chunk))
        if progress is not None and len(scored) < len(statements):
            progress(len(statements) - len(scored))
        return scores

    def work(self) -> dict:
        return self.stats.as_dict()


class VLLMBackend(ModelBackend):
    """vLLM's engines: DEER, BEAR and LAMA on causal LMs (the vllm extra); every model fact from the model's files."""

    name = "vllm"
    can_cache = True

    @classmethod
    def load(cls, model, tokenizer=None, dtype: str = "auto", device: str = "auto") -> LoadedModel:
        """The model by name, folder or ``ModelSpec`` (``model_kwargs``: vLLM engine options), or the name and
        source of a ``LoadedModel``: checked (a masked LM, an adapter, an engine option vLLM lacks, a device it
        does not run on: each refused by name), its tokenizer loaded and its weight files fingerprinted; no
        engine starts until a probe asks for one.  A model object in memory is refused: vLLM loads its own weights."""
        started = time.perf_counter()
        if isinstance(model, LoadedModel):
            dtype = model.dtype if dtype in (None, "auto") else dtype
            model = _spec_of(model)
        if not isinstance(model, (str, os.PathLike)) or tokenizer is not None:
            raise OptionError("model", type(model).__name__ if not isinstance(model, (str, os.PathLike)) else str(model),
                              "the vllm backend loads the weights itself: give a name, hub id or folder (and no tokenizer "
                              "object), or use --backend hf for a model in memory")
        name = model if isinstance(model, str) else str(model)
        options, adapter = loading_options(model)
        if adapter is not None:
            raise OptionError("adapter", adapter, "the vllm backend runs merged weights only: merge the adapter into the model "
                                                  "(peft's merge_and_unload, save_pretrained) and give that folder")
        resolved = resolve_model(name)
        config = _config(resolved.source, {**options, **({"revision": resolved.revision} if resolved.revision else {})})
        if is_masked_lm_config(config):  # read from config.json: said before vLLM is even imported
            kind = ", ".join(getattr(config, "architectures", None) or [config.model_type])
            raise OptionError("backend", "vllm", f"{name} is a masked LM ({kind}); the vllm backend runs causal LMs only "
                                                 "(no pseudo log-likelihood, no mask filling): use --backend hf")
        check_engine_options(options)  # imports vLLM: its absence is said here
        device = engine_device(device)
        folder = weights_folder(resolved, options)
        dtype = resolve_dtype(dtype, device)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder, **{k: options[k] for k in ("trust_remote_code",) if k in options})
        computing = {key: value for key, value in options.items() if key not in RUNTIME_OPTIONS}
        fingerprint = f"{files_fingerprint(weight_files(folder))}+config-{config_fingerprint(SimpleNamespace(config=config))}"
        engines = VLLMEngines(str(folder), dtype, {k: v for k, v in options.items() if k != "revision"})  # the folder is the revision's
        loading = {"model_kwargs": options} if options else {}
        return LoadedModel(name, engines, tokenizer, str(folder), fingerprint + loading_suffix(computing),
                           tokenizer_fingerprint(tokenizer), dtype, device, time.perf_counter() - started, loading=loading)

    def __init__(self, model, tokenizer, token_budget: int | None = None, show_progress: bool = True):
        super().__init__(model, tokenizer, token_budget, show_progress)
        self.engines: VLLMEngines = model
        self._config = _config(Path(model.folder), model.options)

    @property
    def store_key(self) -> dict:
        """vLLM's vectors and scores differ from transformers' in the last bits: they are stored apart."""
        return {"engine": "vllm", "vllm": vllm_version()}

    @property
    def max_positions(self) -> int | None:
        limit = max_positions(SimpleNamespace(config=self._config))
        engine_limit = self.engines.options.get("max_model_len")
        return engine_limit if limit is None else min(limit, engine_limit or limit)

    @property
    def is_masked_lm(self) -> bool:
        return False  # refused when loaded

    @property
    def device(self) -> torch.device:
        return torch.device(self.loaded.device if self.loaded is not None else "cpu")

    @property
    def output_size(self) -> int:
        """The last state's width: OPT's projected width (``word_embed_proj_dim``) where it has one, else ``hidden_size``."""
        config = text_config(SimpleNamespace(config=self._config))
        return int(getattr(config, "word_embed_proj_dim", None) or config.hidden_size)

    @property
    def vocabulary_size(self) -> int:
        return int(text_config(SimpleNamespace(config=self._config)).vocab_size)

    def evaluation_mode(self):
        return contextlib.nullcontext()  # the engine only ever runs inference

    def token_counts(self, texts: Sequence[str], special_tokens: str = "bos") -> list[int]:
        return [len(ids) for ids in batch_token_ids(self.tokenizer, texts, special_tokens)]

    def encoder(self, special_tokens: str = "bos") -> VLLMEncoder:
        return VLLMEncoder(self, special_tokens)

    def statement_scorer(self, pll_variant: str = "within_word_l2r") -> VLLMStatementScorer:
        return VLLMStatementScorer(self)  # causal LMs only: pll_variant never applies

    def mask_filler(self):
        raise ValueError("the vllm backend runs causal LMs only; a masked LM's mask filling needs --backend hf")


def _spec_of(loaded: LoadedModel):
    """A ``LoadedModel``'s name with its loading options (its source folder where the name is not one any more)."""
    from deer.base.model_spec import ModelSpec

    options = loaded.loading.get("model_kwargs") or {}
    if loaded.loading.get("adapter"):
        raise OptionError("adapter", loaded.loading["adapter"], "the vllm backend runs merged weights only")
    if loaded.source == "in-memory":
        raise OptionError("model", loaded.name, "the vllm backend loads the weights itself: give a name, hub id or folder "
                                                "(this model is in memory)")
    return ModelSpec(loaded.source, options) if options else loaded.source


def _config(source, options: dict):
    """The model's transformers config from its config.json (no weights read), a hub id's with its ``revision``."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, **{k: options[k] for k in ("trust_remote_code", "revision") if k in options})
    except (OSError, ValueError) as error:
        raise ModelUnavailableError(f"{source}: its config.json could not be read: {error}") from error


def weight_files(folder: Path) -> list[Path]:
    """The weight files of a model folder (safetensors first; else PyTorch's, else GGUF), sorted by name."""
    for pattern in WEIGHT_FILES:
        files = sorted(Path(folder).glob(pattern))
        if files:
            return files
    raise ModelUnavailableError(f"{folder}: no weight files ({', '.join(WEIGHT_FILES)})")
