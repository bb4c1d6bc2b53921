"""experiments/runs.py: run_probes, and the ranks of a run folder it reuses or makes again."""

from __future__ import annotations

import json

import numpy as np
import pytest

import deer
from deer.base.errors import OptionError
from deer.platform.templates import PromptTemplates
from experiments.runs import run_probes
from kg_data import build_queries, load_kg
from tests.stored_work import _quiet


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


def test_run_probes_reuses_no_deer_ranks_made_from_query_vectors_given_from_outside(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """s12-b: deer.probe(..., query_embeddings=V, out=F) recorded the same options as DEER's own run ({}), so run_probes
    reused ranks made from V (any vectors of the right shape) as DEER's own.  Now they are recorded as given, and refused."""

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


def test_run_probes_reuses_no_ranks_made_by_another_toolkit_version(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """s12-b: run_probes handed back a folder's ranks whatever version of the toolkit made them, so after an upgrade that
    scores a probe otherwise the experiments went on with the old numbers.  Another version's ranks are made again now."""
    import json

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


def test_run_probes_opens_a_name_with_every_loading_option(tiny_kg_dir, tiny_clm_dir, tmp_path):
    """run_probes (the experiments' runs) opened a model by name with dtype and device only: model_kwargs and an adapter
    were dropped (a LoRA adapter silently not merged); beside a model already loaded they are refused."""
    from deer.backends.models import open_model
    from experiments.runs import run_probes
    from kg_data import build_queries, load_kg

    queries = build_queries(load_kg(tiny_kg_dir), "train", subset=3)
    run = run_probes(queries, str(tiny_clm_dir), ["deer"], tmp_path / "run", PromptTemplates(k_shot=1),
                     model_kwargs={"attn_implementation": "eager"}, log=lambda *_: None)
    assert run.metadata_of("deer")["model"]["attention"] == "eager"
    with pytest.raises(OptionError, match="applies to a model given by name"):
        run_probes(queries, open_model(str(tiny_clm_dir)), ["deer"], tmp_path / "other", PromptTemplates(k_shot=1),
                   model_kwargs={"attn_implementation": "eager"}, log=lambda *_: None)


def test_a_model_folder_given_as_dot_is_labelled_by_its_name(tmp_path, monkeypatch):
    """`--model .` labelled its run '' in every table of an experiment, and '.' when its folder was read back (--run)."""
    from experiments.runs import model_label, run_label

    (tmp_path / "opt-x").mkdir()
    monkeypatch.chdir(tmp_path / "opt-x")
    names = [".", "../opt-x", "facebook/opt-125m"]
    assert [model_label(name) for name in names] == ["opt-x", "opt-x", "facebook/opt-125m"]
    assert [run_label({"deer": {"model": {"name": name}}}, tmp_path / "run") for name in names] == [model_label(n) for n in names]
