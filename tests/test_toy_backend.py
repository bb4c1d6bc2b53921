"""A toy backend in one module (``tests/toy_backend.py``), registered by name and edited in nowhere else,
runs DEER, BEAR and LAMA through the Python API and the command line with the plain backend's numbers;
``cache=True`` on it is refused by name."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import bear_ref
import deer
from deer import backends
from deer.backends import ModelBackend
from deer.backends.models import LoadedModel, as_loaded_model, open_model
from deer.backends.tokenization import batch_token_ids
from deer.base.errors import OptionError
from deer.platform.result import load_results
from deer.runner import run_cloze
from experiments.cli import main
from kg_data.cloze import lama_cloze_task
from kg_data.lama import load_lama
from kg_data.load import load_kg
from kg_data.queries import build_queries
from tests.benchmark_folders import write_lama
from tests.toy_backend import ToyBackend

RANKS = ["rank_raw", "rank_filtered"]


@pytest.fixture()
def toy(monkeypatch):
    monkeypatch.setattr(backends, "REGISTERED", dict(backends.REGISTERED))  # forgotten after the test
    backends.register_backend("toy", "tests.toy_backend:ToyBackend")


def _columns(result):
    return result.table[[f"{result.probe}_{name}" for name in RANKS]]


def test_deer_bear_and_lama_through_the_api_equal_the_plain_backend(toy, tiny_kg_dir, tiny_clm):
    loaded = as_loaded_model(*tiny_clm)
    queries = build_queries(load_kg(tiny_kg_dir), "train")
    for run in (deer.probe, bear_ref.bear, bear_ref.lama):
        with_toy = run(queries, loaded, k_shot=2, backend="toy", show_progress=False)
        plain = run(queries, loaded, k_shot=2, backend="plain", show_progress=False)
        assert with_toy.metadata["backend"] == "toy"
        assert _columns(with_toy).equals(_columns(plain)), run.__name__
    with pytest.raises(OptionError, match="the toy backend cannot cache"):
        deer.probe(queries, loaded, k_shot=2, backend="toy", cache=True, show_progress=False)


def _tiny_bert() -> LoadedModel:
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris", "london", "was", "born", "in", "."]
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32)).eval()
    return LoadedModel.from_objects(model, tokenizer, "tiny-bert")


def test_lama_on_a_masked_lm_goes_through_its_mask_filler(toy, tmp_path):
    loaded = _tiny_bert()
    task = lama_cloze_task(load_lama(write_lama(tmp_path / "lama")), ["Paris", "London"], causal=False)
    with_toy = run_cloze(task, loaded, ["lama"], show_progress=False, backend="toy")
    plain = run_cloze(task, loaded, ["lama"], show_progress=False, backend="plain")
    assert set(with_toy.table["lama_rule"]) == {"mask-fill"}
    assert with_toy.table["lama_gold_score"].tolist() == plain.table["lama_gold_score"].tolist()
    with pytest.raises(OptionError, match="the toy backend cannot cache"):
        run_cloze(task, loaded, ["lama"], show_progress=False, backend="toy", store_root=tmp_path / "store")


def test_deer_bear_and_lama_through_the_command_line(toy, tiny_kg_dir, tiny_clm_dir, tmp_path):
    """The commands list it, take it, and store nothing with it (their default caching is for backends that can)."""
    assert "toy" in CliRunner().invoke(main, ["backends"], catch_exceptions=False).output
    common = ["--kg", str(tiny_kg_dir), "--split", "train", "--model", str(tiny_clm_dir), "--k-shot", "2"]
    folders = {}
    for backend in ("toy", "plain"):
        out = folders[backend] = tmp_path / backend
        for probe in ("deer", "bear", "lama"):
            done = CliRunner().invoke(main, ["probe", "--probe", probe, *common, "--backend", backend, "--out", str(out)], catch_exceptions=False)
            assert done.exit_code == 0, done.output
    toy_runs, plain_runs = load_results(folders["toy"]), load_results(folders["plain"])
    assert set(toy_runs) == {"deer", "bear", "lama"}
    for probe, result in toy_runs.items():
        assert result.metadata["backend"] == "toy"
        np.testing.assert_array_equal(_columns(result).to_numpy(), _columns(plain_runs[probe]).to_numpy())


def test_the_backend_answers_for_its_model_and_opens_it_from_a_name(toy, tiny_clm, tiny_clm_dir):
    """``open_backend`` loads a model from a folder (or takes a LoadedModel) and the backend, not the model
    object, answers what the runner asks: positions, masked or causal, device, width, token counts,
    evaluation mode."""
    opened = backends.open_backend("toy", str(tiny_clm_dir), dtype="float32", device="cpu")
    assert isinstance(opened.loaded, LoadedModel) and opened.loaded.source and opened.model is opened.loaded.model
    model, tokenizer = tiny_clm
    toy = backends.open_backend("toy", (model, tokenizer))
    assert toy.max_positions == model.config.max_position_embeddings and toy.is_masked_lm is False
    assert toy.device == torch.device("cpu") and toy.output_size == model.config.hidden_size
    texts = ["a short one", "and a somewhat longer text than that"]
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    assert toy.token_counts(texts) == [len(bos + tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    model.train()
    with toy.evaluation_mode():
        assert not model.training
    assert model.training  # a model that was training trains again after
    model.eval()
    assert backends.open_backend("toy", _tiny_bert()).is_masked_lm is True


def test_a_backend_class_that_does_not_answer_for_its_model_is_refused_by_name(monkeypatch, tiny_clm):
    monkeypatch.setattr(backends, "REGISTERED", dict(backends.REGISTERED))
    backends.register_backend("bare", "tests.test_toy_backend:BareBackend")
    with pytest.raises(OptionError, match="bare.*ModelBackend"):
        backends.open_backend("bare", tiny_clm)


def test_a_backend_class_leaving_out_a_member_of_the_contract_is_refused_when_chosen(monkeypatch):
    """The contract is abstract (lm-eval's ``LM``): a backend without ``mask_filler`` and ``token_counts`` failed
    mid-run, when a probe first asked for them; it is refused when chosen, naming what it lacks, and cannot be made."""
    monkeypatch.setattr(backends, "REGISTERED", dict(backends.REGISTERED))
    backends.register_backend("partial", "tests.test_toy_backend:PartialBackend")
    with pytest.raises(OptionError, match=r"backend='partial': PartialBackend leaves out mask_filler, token_counts of the "
                                          r"backend contract"):
        backends.backend_class("partial")
    with pytest.raises(OptionError, match="leaves out mask_filler, token_counts"):
        deer.probe("wn18rr", "no-model-is-loaded", backend="partial", show_progress=False)
    with pytest.raises(TypeError, match="abstract"):
        PartialBackend(None, None)
    assert not backends.model_backend.missing_members(ToyBackend)  # the toy answers every member itself


class PartialBackend(ModelBackend):
    """The contract but for ``mask_filler`` and ``token_counts``."""

    name = "partial"
    load = classmethod(lambda cls, model, tokenizer=None, dtype="auto", device="auto": None)
    max_positions = is_masked_lm = device = output_size = None

    def evaluation_mode(self):
        return contextlib.nullcontext()

    def encoder(self, special_tokens="bos"):
        raise NotImplementedError

    def statement_scorer(self, pll_variant="within_word_l2r"):
        raise NotImplementedError


def test_the_backend_class_loads_its_model(monkeypatch, tiny_clm_dir):
    """``open_backend`` has the class load the model (``ModelBackend.load``): an engine with its own loader
    (vLLM) overrides it, and every probe then runs on what it loaded."""
    monkeypatch.setattr(backends, "REGISTERED", dict(backends.REGISTERED))
    backends.register_backend("self-loading", "tests.test_toy_backend:SelfLoadingBackend")
    SelfLoadingBackend.asked.clear()
    monkeypatch.setattr(SelfLoadingBackend, "folder", str(tiny_clm_dir))
    opened = backends.open_backend("self-loading", "any-name-its-engine-knows", dtype="float32")
    assert SelfLoadingBackend.asked == [("any-name-its-engine-knows", "float32")]
    assert opened.loaded.name == "engine-loaded" and opened.model is opened.loaded.model and opened.output_size > 0


class SelfLoadingBackend(ToyBackend):
    """A backend whose engine loads its own model (here: the tiny test model, whatever the name)."""

    asked: list = []
    folder = ""  # where its engine finds the weights (the test sets it)

    @classmethod
    def load(cls, model, tokenizer=None, dtype="auto", device="auto"):
        cls.asked.append((model, dtype))
        return dataclasses.replace(open_model(cls.folder), name="engine-loaded")


class BareBackend:
    """The old protocol only: no model facts."""

    name, can_cache, store_key = "bare", False, {}

    def __init__(self, model, tokenizer, token_budget=None, show_progress=True):
        self.model, self.tokenizer = model, tokenizer


def test_the_length_guard_counts_tokens_through_the_backend(toy, monkeypatch, tiny_kg_dir, tiny_clm):
    """The guard asks the backend how many tokens a text is (``token_counts``), so an engine with its own
    tokenization is checked by its own count: here a backend counting one token more than the tokenizer
    turns a prompt that just fits into one refused."""
    from deer.platform.length_guard import PromptTooLongError, guard_lengths
    from deer.platform.task_texts import kg_benchmark_task
    from deer.platform.templates import PromptTemplates
    from deer.probes import get_probe

    queries, templates = build_queries(load_kg(tiny_kg_dir), "test"), PromptTemplates(k_shot=0)
    backend = backends.open_backend("toy", tiny_clm)
    longest = max(backend.token_counts([templates.query_prompt(queries.kg, tuple(t)) for t in queries.triples.tolist()]))
    monkeypatch.setattr(ToyBackend, "max_positions", property(lambda self: longest))
    task, lama = kg_benchmark_task(queries, templates), [get_probe("lama")]
    guard_lengths(task, lama, backend, templates)  # fits, as the tokenizer counts
    monkeypatch.setattr(ToyBackend, "token_counts", lambda self, texts, special_tokens="bos": [
        len(ids) + 1 for ids in batch_token_ids(self.tokenizer, texts, special_tokens)])
    with pytest.raises(PromptTooLongError, match="more than the model's"):
        guard_lengths(task, lama, backend, templates)


def test_a_model_an_engine_loaded_is_described_without_torch(tiny_clm_dir):
    """``LoadedModel.metadata()`` reads the parameter count and attention back-end from a torch model only: a
    handle of an engine's own (what a vLLM backend's ``load`` would put there) is described with None for both."""
    loaded = open_model(str(tiny_clm_dir))
    described = loaded.metadata()
    assert described["parameters"] > 0 and described["attention"]

    class EngineHandle:  # no parameters(), no config
        pass

    handle = dataclasses.replace(loaded, model=EngineHandle())
    assert {key: handle.metadata()[key] for key in ("parameters", "attention", "class")} == {
        "parameters": None, "attention": None, "class": "EngineHandle"}


def test_the_run_functions_take_an_opened_backend_and_open_nothing_again(toy, tiny_kg_dir, tiny_clm, tmp_path, monkeypatch):
    """The run functions took a loaded model plus a backend *name* and opened the backend again (run_cloze, the BEAR
    data set), and their callers had opened one already.  Each takes the opened backend now: the results equal those
    of the backend opened by name, nothing is loaded a second time, and a backend named otherwise is refused."""
    from tests.benchmark_folders import hand_built_bear

    loaded = as_loaded_model(*tiny_clm)
    opened = backends.open_backend("toy", loaded, show_progress=False)

    def loaded_again(*args, **kwargs):
        raise AssertionError("an opened backend was loaded again")

    queries = build_queries(load_kg(tiny_kg_dir), "train")
    task = lama_cloze_task(load_lama(write_lama(tmp_path / "lama")), ["Paris", "London"])
    by_name = {run.__name__: run(queries, loaded, k_shot=2, backend="toy", show_progress=False)
               for run in (deer.probe, bear_ref.bear, bear_ref.lama)}
    cloze_by_name = run_cloze(task, loaded, ["lama", "bear"], show_progress=False, backend="toy")
    dataset_by_name = bear_ref.bear_dataset(hand_built_bear(), loaded, backend="toy", show_progress=False)
    monkeypatch.setattr(ToyBackend, "load", classmethod(loaded_again))
    for run in (deer.probe, bear_ref.bear, bear_ref.lama):
        result = run(queries, opened, k_shot=2, show_progress=False)
        assert result.metadata["backend"] == "toy" and _columns(result).equals(_columns(by_name[run.__name__])), run.__name__
    cloze = run_cloze(task, opened, ["lama", "bear"], show_progress=False)
    assert cloze.table.equals(cloze_by_name.table) and cloze.metadata_of("bear")["backend"] == "toy"
    dataset = bear_ref.bear_dataset(hand_built_bear(), opened, show_progress=False)
    assert dataset.table.equals(dataset_by_name.table) and dataset.metadata["backend"] == "toy"
    with pytest.raises(OptionError, match=r"backend='plain': the model given is a toy backend opened already"):
        deer.probe(queries, opened, backend="plain", show_progress=False)
    with pytest.raises(OptionError, match=r"token_budget=64: the toy backend given was opened with token_budget=None"):
        run_cloze(task, opened, ["lama"], token_budget=64, show_progress=False)
