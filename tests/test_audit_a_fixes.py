"""Audit A's defects (s9): stored work reused only for what it was made with.

A1: run_probes reused a folder's ranks whatever probe options they were made with.
A2: BEAR's KG score store was keyed without the backend's ``store_key``.
A3, A4: the BEAR data-set resume key and run_cloze's part key lacked it too.
A5: cloze parts were stored and resumed for a model whose fingerprint hashes no weights.
A7: row_checksums' docstring claimed more than a sum detects.
"""

from __future__ import annotations

import json

import pytest

from deer.backends.hf import HFBackend
from deer.backends.statement_scorer import StatementScorer
from deer.platform.templates import PromptTemplates
from experiments.runs import run_probes
from kg_data import build_queries, load_kg


def _quiet(*_args) -> None:
    return None


def test_run_probes_reuses_a_probes_ranks_only_for_the_options_they_were_made_with(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """A1: the folder's LAMA ranks (single_token=False) were handed back, logged as reused, when single_token=True
    was asked; now each probe's options are recorded and other options are refused by name.  (s12: single_token=True
    ranks fewer queries, so since the run spec is that of the queries ranked, it is refused as another run spec; the
    options' own refusal is seen with BEAR's pll_variant, which leaves the queries as they are.)"""
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    templates, folder = PromptTemplates(), tmp_path / "run"
    first = run_probes(queries, str(tiny_clm_dir), ["lama"], folder, templates, log=_quiet)
    assert json.loads((folder / "metadata.json").read_text())["lama"]["options"] == {"single_token": False}
    again = run_probes(queries, str(tiny_clm_dir), ["lama"], folder, templates, log=_quiet,
                       probe_options={"lama": {"single_token": False}})
    assert again.experiment["reused"] == ["lama"]  # the same options: read back
    assert again.ranks("filtered", "lama").tolist() == first.ranks("filtered", "lama").tolist()
    with pytest.raises(ValueError, match=r"another run spec \(queries: ") as refused:
        run_probes(queries, str(tiny_clm_dir), ["lama"], folder, templates, log=_quiet,
                   probe_options={"lama": {"single_token": True}})
    assert str(folder) in str(refused.value)
    run_probes(queries, str(tiny_clm_dir), ["bear"], folder, templates, log=_quiet)
    with pytest.raises(ValueError, match=r"pll_variant: the folder 'within_word_l2r', asked 'original'") as refused:
        run_probes(queries, str(tiny_clm_dir), ["bear"], folder, templates, log=_quiet,
                   probe_options={"bear": {"pll_variant": "original"}})
    assert str(folder) in str(refused.value)


def test_run_probes_reruns_lamas_single_token_run_into_its_own_folder(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """s12: the folder was named and checked by the spec of every query, but the run recorded the spec of the queries
    LAMA's single_token ranks (fewer), so a rerun into it was refused as another run spec.  Now a rerun reuses its
    ranks, a run adding a probe runs them all on those queries, and another run (single_token=False) is refused."""
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    templates, single = PromptTemplates(), {"lama": {"single_token": True}}
    first = run_probes(queries, str(tiny_clm_dir), ["lama"], None, templates, log=_quiet, runs_dir=tmp_path,
                       probe_options=single)
    assert 0 < len(first.table) < len(queries)  # the tiny KG has a query whose gold is no single token
    for folder in (None, first.folder):  # the default folder again, and the folder given
        again = run_probes(queries, str(tiny_clm_dir), ["lama"], folder, templates, log=_quiet, runs_dir=tmp_path,
                           probe_options=single)
        assert again.folder == first.folder and again.experiment["reused"] == ["lama"]
        assert again.ranks("filtered", "lama").tolist() == first.ranks("filtered", "lama").tolist()
    both = run_probes(queries, str(tiny_clm_dir), ["deer", "lama"], first.folder, templates, log=_quiet, probe_options=single)
    assert both.experiment["reused"] == [] and len(both.table) == len(first.table)
    assert both.ranks("filtered", "lama").tolist() == first.ranks("filtered", "lama").tolist()
    with pytest.raises(ValueError, match=r"another run spec \(queries: "):
        run_probes(queries, str(tiny_clm_dir), ["lama"], first.folder, templates, log=_quiet)


class _NegatedScorer(StatementScorer):
    def score(self, context, continuations):
        return -super().score(context, continuations)

    def score_statements(self, statements, *args, **kwargs):
        return -super().score_statements(statements, *args, **kwargs)


class ShiftedBackend(HFBackend):
    """A caching backend whose scores are not the model's own (declared in ``store_key``, as the protocol asks)."""

    name = "shifted"
    store_key = {"variant": "negated-scores"}

    def statement_scorer(self, pll_variant="within_word_l2r"):
        return _NegatedScorer(self.model, self.tokenizer, token_budget=512, pll_variant=pll_variant)


@pytest.fixture()
def shifted(monkeypatch):
    from deer import backends

    monkeypatch.setattr(backends, "REGISTERED", dict(backends.REGISTERED))  # forgotten after the test
    backends.register_backend("shifted", "tests.test_audit_a_fixes:ShiftedBackend")


def test_bear_kg_score_rows_are_stored_apart_per_backend_store_key(shifted, tiny_kg_dir, tiny_clm_dir, tmp_path):
    """A2: a caching backend whose scores differ read the hf backend's stored BEAR rows (same key)."""
    from bear_ref.kg_probe import score_store
    from deer.backends.models import open_model
    from deer.runner import run_kg

    queries = build_queries(load_kg(tiny_kg_dir), "test")
    loaded = open_model(str(tiny_clm_dir))
    cache = tmp_path / "cache"

    def run(**options):
        return run_kg(["bear"], queries, loaded, show_progress=False, **options)

    run(backend="hf", cache=True, cache_dir=cache)
    fresh = run(backend="shifted", cache=False)
    cached = run(backend="shifted", cache=True, cache_dir=cache)
    assert cached.metadata_of("bear")["cache"]["queries_from_cache"] == 0
    assert cached.ranks("filtered", "bear").tolist() == fresh.ranks("filtered", "bear").tolist()
    # the model's own scores (store_key {}): the store as before
    templates = PromptTemplates()
    assert score_store(loaded, queries, templates, "m", cache).folder == score_store(loaded, queries, templates, "m", cache, {}).folder


def test_stored_vectors_and_score_rows_of_another_toolkit_version_are_made_again(tiny_kg_dir, tiny_clm_dir, tmp_path,
                                                                                   monkeypatch):
    """The prompt and BEAR score stores were keyed by hand-bumped ENCODER_VERSION / SCORER_VERSION alone: a release that
    changed how a text is encoded or scored without bumping them (the causal-RoBERTa position offset did not) read the
    older release's vectors and rows as its own.  The keys now hold the toolkit's version, as the cloze parts' do."""
    import deer
    from deer.backends.models import open_model
    from deer.runner import run_kg

    queries, loaded, cache = build_queries(load_kg(tiny_kg_dir), "test"), open_model(str(tiny_clm_dir)), tmp_path / "cache"

    def cached_run():
        run = run_kg(["deer", "bear"], queries, loaded, show_progress=False, cache=True, cache_dir=cache)
        return {probe: run.metadata_of(probe)["cache"] for probe in ("deer", "bear")}

    monkeypatch.setattr(deer, "__version__", "0.0.1")
    cached_run()
    assert cached_run()["deer"]["entities_from_cache"] == len(queries.candidates)  # the same version: read back
    monkeypatch.setattr(deer, "__version__", "0.0.2")
    again = cached_run()
    assert again["deer"]["entities_from_cache"] == again["deer"]["queries_from_cache"] == 0
    assert again["bear"]["queries_from_cache"] == 0


def test_bear_dataset_parts_are_resumed_only_on_the_backend_store_key_they_were_made_with(shifted, tiny_clm_dir, tmp_path):
    """A3: a rerun on another caching backend into the same folder resumed the first backend's parts."""
    from bear_ref.dataset import run_bear_dataset
    from deer.backends.models import open_model
    from kg_data.bear import load_bear_dataset
    from tests.test_bear_dataset import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    loaded = open_model(str(tiny_clm_dir))

    def run(backend, out):
        return run_bear_dataset(data, loaded, out, {"relations": None}, backend=backend, show_progress=False)

    first = run("hf", tmp_path / "out")
    (tmp_path / "out" / "metadata.json").unlink()  # the hf run stopped after storing its parts (a finished one refuses
    fresh = run("shifted", tmp_path / "fresh")     # a run made otherwise: test_bear_dataset)
    again = run("shifted", tmp_path / "out")
    assert again.metadata["relations_resumed"] == []
    assert again.table["rank"].tolist() == fresh.table["rank"].tolist()
    assert again.metadata["resume_key"] != first.metadata["resume_key"]


def test_cloze_parts_are_resumed_only_on_the_backend_store_key_they_were_made_with(shifted, tiny_clm_dir, tmp_path):
    """A4: run_cloze's part key lacked the backend's store_key: another caching backend resumed the first one's rows."""
    from deer.backends.models import open_model
    from deer.runner import run_cloze
    from kg_data.bear import load_bear_dataset
    from kg_data.cloze import bear_cloze_task
    from tests.test_bear_dataset import write_dataset

    task = bear_cloze_task(load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini"))))
    loaded = open_model(str(tiny_clm_dir))

    def run(backend, out):
        return run_cloze(task, loaded, ["bear"], out, backend=backend, show_progress=False)

    run("hf", tmp_path / "out")
    fresh = run("shifted", tmp_path / "fresh")
    again = run("shifted", tmp_path / "out")
    assert again.metadata_of("bear")["resumed"] is False
    assert again.table["bear_rank"].tolist() == fresh.table["bear_rank"].tolist()


def test_run_probes_reuses_no_ranks_made_on_another_backend(shifted, tiny_kg_dir, tiny_clm_dir, tmp_path):
    """s12-b: run_probes (the hf backend) handed back a folder's ranks made on another backend whose scores differ
    (``deer probe --backend shifted --out`` the same folder), logged as reused; now the backend is compared as the
    options are, and another one is refused by name."""
    from deer.backends.models import open_model
    from deer.runner import run_kg

    queries = build_queries(load_kg(tiny_kg_dir), "test")
    loaded, folder = open_model(str(tiny_clm_dir)), tmp_path / "run"
    shifted_ranks = run_kg(["bear"], queries, loaded, backend="shifted", out=folder, show_progress=False)
    hf_ranks = run_kg(["bear"], queries, loaded, show_progress=False).ranks("filtered", "bear").tolist()
    assert shifted_ranks.ranks("filtered", "bear").tolist() != hf_ranks  # the two backends' numbers differ
    with pytest.raises(ValueError, match=r"backend: the folder 'shifted', asked 'hf'"):
        run_probes(queries, loaded, ["bear"], folder, PromptTemplates(), log=_quiet)
    hf_folder = tmp_path / "hf"
    run_probes(queries, loaded, ["bear"], hf_folder, PromptTemplates(), log=_quiet)
    again = run_probes(queries, loaded, ["bear"], hf_folder, PromptTemplates(), log=_quiet)
    assert again.experiment["reused"] == ["bear"] and again.ranks("filtered", "bear").tolist() == hf_ranks


def _metadata_of_shifted_runs_fails(monkeypatch):
    """Writing a metadata.json that records the shifted backend raises, as a full disk would: a save stopped after
    the run's table (and metrics) were written, before its metadata."""
    from pathlib import Path

    import deer.base.files as files

    real = files.atomic_write_bytes

    def write(path, data, *rest):
        if Path(path).name == "metadata.json" and b'"backend": "shifted"' in data:
            raise OSError(28, "No space left on device")
        real(path, data, *rest)

    monkeypatch.setattr(files, "atomic_write_bytes", write)


def test_a_kg_save_stopped_before_its_metadata_leaves_no_ranks_under_the_old_metadata(shifted, tiny_kg_dir, tiny_clm_dir,
                                                                                       tmp_path, monkeypatch):
    """s12-b: a probe's save wrote its ranks and metrics, then metadata.json; stopped in between, the new ranks lay
    under the old run's metadata, and run_probes reused them as that run's (another backend's ranks, logged as reused).
    Now the probe's old metadata entry goes first and its new one last, and a save that fails puts the folder back as
    it was (issue 47): the run before's ranks, under its own metadata, are reused as its."""
    from deer.backends.models import open_model
    from deer.runner import run_kg

    queries = build_queries(load_kg(tiny_kg_dir), "test")
    loaded, folder = open_model(str(tiny_clm_dir)), tmp_path / "run"
    hf_ranks = run_probes(queries, loaded, ["bear"], folder, PromptTemplates(), log=_quiet).ranks("filtered", "bear").tolist()
    with monkeypatch.context() as patched:
        _metadata_of_shifted_runs_fails(patched)
        with pytest.raises(OSError):
            run_kg(["bear"], queries, loaded, backend="shifted", out=folder, show_progress=False)
    again = run_probes(queries, loaded, ["bear"], folder, PromptTemplates(), log=_quiet)
    assert again.experiment["reused"] == ["bear"] and again.ranks("filtered", "bear").tolist() == hf_ranks


def test_a_bear_dataset_save_stopped_before_its_metadata_is_no_finished_run(shifted, tiny_clm_dir, tmp_path, monkeypatch):
    """s12-b: `deer bear-dataset` wrote its instances table, then metadata.json; a run into the folder of another that
    stopped in between left its table under the other's metadata, and --bear-run took that table as the other run's.
    Now metadata.json (what marks a finished run) is removed first and written last: --bear-run refuses the folder.
    (A run made otherwise is now refused before it starts, so the run that stops here is the folder's own run again.)
    Since issue 47 a save that fails puts the folder back as it was: the run before, whole, is what --bear-run reads."""
    import deer
    from bear_ref.dataset import run_bear_dataset
    from deer.backends import open_backend
    from deer.backends.models import open_model
    from experiments.cloze_bear import bear_scoring, stored_bear_table
    from kg_data.bear import load_bear_dataset
    from tests.test_bear_dataset import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    loaded, out = open_model(str(tiny_clm_dir)), tmp_path / "out"
    shifted = run_bear_dataset(data, loaded, out, {"relations": None}, backend="shifted", show_progress=False)
    scoring = bear_scoring(open_backend("shifted", loaded))
    assert stored_bear_table(out, data, loaded, scoring)["rank"].tolist() == shifted.table["rank"].tolist()
    with monkeypatch.context() as patched:
        _metadata_of_shifted_runs_fails(patched)
        with pytest.raises(OSError):
            run_bear_dataset(data, loaded, out, {"relations": None}, backend="shifted", show_progress=False)
    assert (out / "metadata.json").exists() and deer.load_result(out).metadata["backend"] == "shifted"
    assert stored_bear_table(out, data, loaded, scoring)["rank"].tolist() == shifted.table["rank"].tolist()


def test_a_cloze_save_stopped_before_its_metadata_reads_back_no_other_runs_metadata(shifted, tiny_clm_dir, tmp_path,
                                                                                      monkeypatch):
    """s12-b: a cloze run's save wrote its table and metrics, then metadata.json; stopped in between, deer.load_result gave
    the new run's numbers under the old run's metadata (its model, backend).  Now the old metadata.json goes first, and
    since issue 47 a save that fails puts the folder back as it was: the run before, whole, its rows under its metadata."""
    import deer
    from deer.backends.models import open_model
    from deer.runner import run_cloze
    from kg_data.bear import load_bear_dataset
    from kg_data.cloze import bear_cloze_task
    from tests.test_bear_dataset import write_dataset

    task = bear_cloze_task(load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini"))))
    loaded, out = open_model(str(tiny_clm_dir)), tmp_path / "cloze"
    before = run_cloze(task, loaded, ["bear"], out, show_progress=False)
    assert deer.load_result(out).metadata_of("bear")["backend"] == "hf"
    with monkeypatch.context() as patched:
        _metadata_of_shifted_runs_fails(patched)
        with pytest.raises(OSError):
            run_cloze(task, loaded, ["bear"], out, backend="shifted", show_progress=False)
    back = deer.load_result(out)
    assert back.metadata_of("bear")["backend"] == "hf" and back.table["bear_rank"].tolist() == before.table["bear_rank"].tolist()


def test_run_probes_reuses_no_deer_ranks_made_from_query_vectors_given_from_outside(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """s12-b: deer.probe(..., query_embeddings=V, out=F) recorded the same options as DEER's own run ({}), so run_probes
    reused ranks made from V (any vectors of the right shape) as DEER's own.  Now they are recorded as given, and refused."""
    import numpy as np

    import deer
    from deer.backends.models import open_model

    queries = build_queries(load_kg(tiny_kg_dir), "test")
    loaded, folder = open_model(str(tiny_clm_dir)), tmp_path / "run"
    other = np.random.default_rng(0).standard_normal((len(queries), 32)).astype(np.float32)
    given = deer.probe(queries, loaded, query_embeddings=other, out=folder, show_progress=False)
    own = deer.probe(queries, loaded, show_progress=False)
    assert given.ranks("filtered").tolist() != own.ranks("filtered").tolist()  # other vectors, other ranks
    with pytest.raises(ValueError, match=r"query_embeddings: the folder 'given', asked None"):
        run_probes(queries, loaded, ["deer"], folder, PromptTemplates(), log=_quiet)
    together = run_probes(queries, loaded, ["lama", "deer"], tmp_path / "together", PromptTemplates(), log=_quiet)
    assert together.metadata_of("deer")["options"] == {}  # handed on by LAMA's pass in the run: DEER's own
    again = run_probes(queries, loaded, ["deer"], tmp_path / "together", PromptTemplates(), log=_quiet)
    assert again.experiment["reused"] == ["deer"]
    assert again.ranks("filtered", "deer").tolist() == together.ranks("filtered", "deer").tolist()


def test_cloze_and_bear_dataset_parts_of_another_toolkit_version_are_scored_again(tiny_clm_dir, tmp_path, monkeypatch):
    """s12-b: a cloze run's and the BEAR data set's parts were keyed by model, task, rules and backend but by nothing of
    the code that scored them: after an upgrade that scores a probe otherwise, a rerun into the same --out resumed the
    old version's numbers as its own.  The toolkit's version is part of both keys now."""
    import deer
    from bear_ref.dataset import run_bear_dataset
    from deer.backends.models import open_model
    from deer.runner import run_cloze
    from kg_data.bear import load_bear_dataset
    from kg_data.cloze import bear_cloze_task
    from tests.test_bear_dataset import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    loaded = open_model(str(tiny_clm_dir))

    def runs():
        cloze = run_cloze(bear_cloze_task(data), loaded, ["bear"], tmp_path / "cloze", show_progress=False)
        dataset = run_bear_dataset(data, loaded, tmp_path / "dataset", {"relations": None}, show_progress=False)
        return cloze.metadata_of("bear")["resumed"], dataset.metadata["relations_resumed"]

    runs()
    assert runs() == (True, ["P36", "P37"])  # the same version: resumed
    monkeypatch.setattr(deer, "__version__", "9.9.9")  # another version, which may score otherwise
    assert runs() == (False, [])


def test_run_probes_reuses_no_ranks_made_by_another_toolkit_version(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """s12-b: run_probes handed back a folder's ranks whatever version of the toolkit made them, so after an upgrade that
    scores a probe otherwise the experiments went on with the old numbers.  Another version's ranks are made again now."""
    import json

    import deer
    from deer.backends.models import open_model
    from deer.base.files import package_versions

    queries = build_queries(load_kg(tiny_kg_dir), "test")
    loaded, folder = open_model(str(tiny_clm_dir)), tmp_path / "run"
    first = run_probes(queries, loaded, ["lama"], folder, PromptTemplates(), log=_quiet)
    assert run_probes(queries, loaded, ["lama"], folder, PromptTemplates(), log=_quiet).experiment["reused"] == ["lama"]
    monkeypatch.setattr(deer, "__version__", "9.9.9")  # another version, which may score otherwise
    again = run_probes(queries, loaded, ["lama"], folder, PromptTemplates(), log=_quiet)
    assert again.experiment["reused"] == []
    assert again.ranks("filtered", "lama").tolist() == first.ranks("filtered", "lama").tolist()
    assert json.loads((folder / "metadata.json").read_text())["lama"]["versions"]["deer-probe-toolkit"] == package_versions()[
        "deer-probe-toolkit"]  # recorded by the run, as every run's metadata records it


def test_a_model_whose_fingerprint_hashes_no_weights_stores_and_resumes_no_cloze_parts(tiny_clm_dir, tmp_path):
    """A5: run_cloze and run_bear_dataset stored and resumed parts under a given (not hashed) identity, so a rerun after
    the weights changed resumed the old weights' rows; now they keep no parts for such a model, and a store root is
    refused as run_kg refuses cache=True."""
    import torch

    from bear_ref.dataset import run_bear_dataset
    from deer.backends.models import LoadedModel, load_model
    from deer.platform.validate import OptionError
    from deer.runner import run_cloze
    from kg_data.bear import load_bear_dataset
    from kg_data.cloze import bear_cloze_task
    from tests.test_bear_dataset import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    task = bear_cloze_task(data)
    model, tokenizer, _ = load_model(str(tiny_clm_dir))  # its own copy: the weights change below
    identity = "in-training:tiny:step-None"
    first = run_cloze(task, LoadedModel.from_objects(model, tokenizer, fingerprint=identity), ["bear"], tmp_path / "out",
                      show_progress=False)
    with torch.no_grad():  # training moved the weights
        torch.manual_seed(1)
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    changed = LoadedModel.from_objects(model, tokenizer, fingerprint=identity)
    fresh = run_cloze(task, changed, ["bear"], None, show_progress=False)
    again = run_cloze(task, changed, ["bear"], tmp_path / "out", show_progress=False)
    assert not (tmp_path / "out" / "parts").exists()
    assert again.metadata_of("bear")["resumed"] is False
    assert again.table["bear_rank"].tolist() == fresh.table["bear_rank"].tolist() != first.table["bear_rank"].tolist()
    with pytest.raises(OptionError, match="does not hash its weights"):
        run_cloze(task, changed, ["deer"], None, show_progress=False, store_root=tmp_path / "stores")
    assert not (tmp_path / "stores").exists()
    run_bear_dataset(data, changed, tmp_path / "dataset", {"relations": None}, show_progress=False)
    assert not (tmp_path / "dataset" / "parts").exists()


def test_row_checksums_see_a_changed_word_but_not_words_moved_within_a_row():
    """A7: row_checksums' docstring said "any changed word changes it"; a plain sum misses words swapped within a row.
    The stored format stays; what the sum sees and misses is pinned here as its docstring now says."""
    import numpy as np

    from deer.platform.stores import row_checksums

    rows = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], np.float32)
    one_word = rows.copy()
    one_word[0, 1] = 2.5
    assert (row_checksums(one_word) != row_checksums(rows)).tolist() == [True, False]
    moved = rows.copy()
    moved[0, [0, 3]] = moved[0, [3, 0]]
    moved[1] = moved[1, ::-1]
    assert (row_checksums(moved) == row_checksums(rows)).all()  # not seen: the same words, the same sum
    assert "does not see words moved within a row" in row_checksums.__doc__



def test_a_bear_dataset_folder_whose_metrics_disagree_with_its_instances_table_is_refused(tiny_clm_dir, tmp_path):
    """load_result returned a BEAR data-set folder's metrics.json unchecked against its instances table (KG and cloze
    folders are checked): a table cut to one relation read back with both relations' metrics; an edited score too."""
    import json

    import pandas as pd

    from bear_ref.dataset import run_bear_dataset
    from deer.backends.models import open_model
    from deer.platform.read_back import StoredFileError
    from deer.platform.result import load_result
    from kg_data.bear import load_bear_dataset
    from tests.test_bear_dataset import write_dataset

    data = load_bear_dataset(str(write_dataset(tmp_path / "data" / "BEARmini")))
    out = tmp_path / "run"
    made = run_bear_dataset(data, open_model(str(tiny_clm_dir)), out, {"relations": None}, backend="plain", show_progress=False)
    read = load_result(out)  # as written: read back, its metrics those of its table
    assert read.metrics["overall"] == json.loads(json.dumps(made.metrics["overall"])) and len(read.table) == len(made.table)
    metrics = json.loads((out / "metrics.json").read_text())
    edited = json.loads(json.dumps(metrics))
    edited["bear"]["per_relation"]["P37"]["accuracy_mean"] += 0.25
    (out / "metrics.json").write_text(json.dumps(edited))
    with pytest.raises(StoredFileError, match=r"metrics\.json.*relation P37 accuracy_mean disagrees with instances\.parquet"):
        load_result(out)
    (out / "metrics.json").write_text(json.dumps(metrics))
    table = pd.read_parquet(out / "instances.parquet")
    table[table["relation"] == "P36"].to_parquet(out / "instances.parquet")  # the table rewritten: one relation's rows
    with pytest.raises(StoredFileError, match=r"metrics\.json.*per-relation blocks \(P36, P37\) are not the relations of"):
        load_result(out)
