"""Issue 'Trust nothing read back', probe options: a probe option's value is checked against what the
probe declares (``option_values``: a type, and allowed values or a range) and a value that does not
fit is refused by name before any work, in the Python API and the CLI alike; what is refused only
after the model loaded today (a bad $DEER_STORE_FLUSH_SECONDS, LAMA on the authors' template style,
`deer bear-dataset --out` a probe run, DEER's query_embeddings of the wrong row count) is refused
before it.  --model-arg reads True/False/None and numbers typed, as --probe-option does."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import deer
from deer import probes
from deer.platform.validate import OptionError
from deer.runner import probe_options, run_probe
from experiments.cli import main
from experiments.cli.options import parse_key_values
from tests.benchmark_folders import write_dataset
from tests.refusals import assert_refused_before_loading

# A value of the wrong type for each kind an option may declare: a new kind must be added here.
WRONG_TYPE = {bool: 3, int: "text", float: "text", str: 3, "vectors": "text"}


@pytest.fixture()
def every_probe(monkeypatch):
    """The registered probes, the toy third probe (tests/shortest_name_probe.py) among them."""
    from tests.shortest_name_probe import ShortestNameProbe

    monkeypatch.setattr(probes, "_REGISTERED", dict(probes._REGISTERED))  # forget it again after the test
    probes.register_probe("shortest", ShortestNameProbe, replace=True)
    return [probes.get_probe(name) for name in probes.probe_names()]


def test_every_declared_option_is_typed_and_checked(every_probe):
    """Each option of each registered probe declares a type; a value of another type is refused by name,
    every allowed value (each choice; True/False, numpy's too, for a boolean; no text) is taken."""
    assert {"deer", "bear", "lama", "shortest"} <= {probe.name for probe in every_probe}
    for probe in every_probe:
        declared = probe.option_values
        assert set(declared) == set(probe.options), f"{probe.name}: every option declares its values"
        for name, values in declared.items():
            assert values.kind in WRONG_TYPE, f"{probe.name}.{name}: kind {values.kind!r} has no wrong-type case here"
            with pytest.raises(OptionError, match=name) as refused:
                probe_options(probe, {name: WRONG_TYPE[values.kind]})
            assert refused.value.option == name
            assert probe_options(probe, {})[name] == probe.options[name]  # the default fits
            probe_options(probe, {name: probe.options[name]})
            allowed = values.choices or {bool: (True, False, np.True_, np.False_)}.get(values.kind, ())
            for value in allowed:
                assert probe_options(probe, {name: value})[name] == value
            if values.kind is bool:  # a text is no boolean in the API (the command line reads --probe-option's as one)
                for text in ("true", "FALSE", "False"):
                    with pytest.raises(OptionError, match=f"{name}='{text}': must be True or False"):
                        probe_options(probe, {name: text})


@pytest.mark.parametrize("probe, option, value, expected", [
    ("lama", "single_token", "yes", "True or False"),
    ("lama", "single_token", 3, "True or False"),
    ("lama", "single_token", 1, "True or False"),
    ("bear", "pll_variant", "nonsense", "one of original, within_word_l2r"),
    ("deer", "query_embeddings", [1.0, 2.0], "2-D"),
])
def test_the_python_api_refuses_a_bad_value_before_reading_the_data(probe, option, value, expected, tmp_path):
    """The KG named does not exist: the option is refused before the data is read (and the model loaded)."""
    with pytest.raises(OptionError, match=expected) as refused:
        run_probe(probe, str(tmp_path / "no-such-kg"), str(tmp_path / "no-such-model"), **{option: value})
    assert refused.value.option == option


@pytest.mark.parametrize("api", ["deer.probe", "bear_ref.bear", "bear_ref.lama"])
def test_a_probe_keyword_to_a_one_probe_call_is_refused_as_an_option(api, tmp_path):
    """``deer.probe(kg, model, probe="bear")`` failed with Python's "run_probe() got multiple values for argument
    'probe'": the call runs one probe, and ``probe=`` is refused by name as any option it does not have."""
    import bear_ref
    import deer

    call = {"deer.probe": deer.probe, "bear_ref.bear": bear_ref.bear, "bear_ref.lama": bear_ref.lama}[api]
    with pytest.raises(OptionError, match=r"probe='bear': the \w+ probe has no such option") as refused:
        call(str(tmp_path / "no-such-kg"), str(tmp_path / "no-such-model"), probe="bear")
    assert refused.value.option == "probe"


def test_the_bear_data_set_checks_its_pll_variant_as_bear_does(tmp_path):
    """bear_ref.bear_dataset(pll_variant='nonsense') ran on a causal LM (which reads no PLL variant) unnoticed."""
    import bear_ref

    with pytest.raises(OptionError, match="pll_variant='nonsense': must be one of original, within_word_l2r"):
        bear_ref.bear_dataset(str(tmp_path / "no-such-data"), str(tmp_path / "no-such-model"), pll_variant="nonsense")


@pytest.mark.parametrize("text, typed", [("False", False), ("false", False), ("FALSE", False), ("True", True), ("true", True)])
def test_a_boolean_in_any_spelling_is_read_as_the_boolean(text, typed):
    """The command line reads --probe-option's text as the boolean; the Python API takes no text for one (as exclude_head)."""
    given = parse_key_values((f"single_token={text}",), "--probe-option")
    assert probe_options(probes.get_probe("lama"), given)["single_token"] is typed
    with pytest.raises(OptionError, match=f"single_token='{text}': must be True or False"):
        probe_options(probes.get_probe("lama"), {"single_token": text})


def test_key_values_read_python_and_json_literals_typed():
    """--model-arg low_cpu_mem_usage=False reached from_pretrained as the text 'False' (truthy)."""
    parsed = parse_key_values(("a=False", "b=True", "c=None", "d=null", "e=3", "f=1.5", "g=true", "h=step1000", "i=yes",
                               "j=none", "k="), "--model-arg")
    assert parsed == {"a": False, "b": True, "c": None, "d": None, "e": 3, "f": 1.5, "g": True, "h": "step1000", "i": "yes",
                      "j": "none", "k": ""}
    assert parsed["a"] is False and parsed["e"] == 3 and isinstance(parsed["e"], int)


def test_the_model_arg_reaches_loading_typed(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    from deer.backends import models
    from deer.base.model_spec import loading_options

    seen = []

    def record(name, *args, **kwargs):
        seen.append(loading_options(name)[0])
        raise RuntimeError("stop here")

    monkeypatch.setattr(models, "load_model", record)
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--model-arg",
                              "low_cpu_mem_usage=False", "--out", str(tmp_path / "out")])
    assert seen == [{"low_cpu_mem_usage": False}]


def test_lama_single_token_false_keeps_every_query(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    """single_token=False, Python's spelling, was kept as the truthy text 'False' and the single-token
    restriction dropped queries (here: all of them, an error)."""
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["probe", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot", "2",
                                       "--probe", "lama", "--probe-option", "single_token=False", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "metadata.json").read_text())["lama"]["single_token"] is False
    assert len(deer.load_result(out, "lama").table) == 4  # the tiny KG's 4 test queries, none dropped


def _probe_run_folder(tmp) -> str:
    run = tmp / "a-probe-run"
    run.mkdir()
    (run / "ranks.csv").write_text("query\n")
    return str(run)


# Each case: (name, build(tmp, kg, model) -> command line, what the one error line must contain); build may set the
# environment through the monkeypatch it is given.
CLI_CASES = [
    ("probe option boolean 'yes'", lambda t, kg, m, mp: ["probe", "--kg", kg, "--model", m, "--probe", "lama",
                                                          "--probe-option", "single_token=yes"],
     ["--probe-option single_token=yes", "True or False"]),
    ("probe option boolean 3", lambda t, kg, m, mp: ["probe", "--kg", kg, "--model", m, "--probe", "lama",
                                                      "--probe-option", "single_token=3"],
     ["--probe-option single_token=3", "True or False"]),
    ("probe option not a choice", lambda t, kg, m, mp: ["probe", "--kg", kg, "--model", m, "--probe", "bear",
                                                         "--probe-option", "pll_variant=nonsense"],
     ["--probe-option pll_variant=nonsense", "one of original, within_word_l2r"]),
    ("probe option unknown", lambda t, kg, m, mp: ["probe", "--kg", kg, "--model", m, "--probe-option", "colour=red"],
     ["--probe-option colour=red", "no such option"]),
    ("store flush seconds not a number", lambda t, kg, m, mp: mp.setenv("DEER_STORE_FLUSH_SECONDS", "soon")
     or ["probe", "--kg", kg, "--model", m], ["DEER_STORE_FLUSH_SECONDS='soon'", "not a number of seconds"]),
    ("lama on the authors' template style", lambda t, kg, m, mp: ["probe", "--probe", "lama", "--kg", kg, "--model", m, "--template-style", "authors"],
     ["LAMA needs the query to end at the comma"]),
    ("lama with a trailing space", lambda t, kg, m, mp: ["probe", "--kg", kg, "--model", m, "--probe", "lama",
                                                          "--query-trailing-space"], ["LAMA needs the query to end at the comma"]),
    ("bear-dataset --out a probe run", lambda t, kg, m, mp: ["bear-dataset", "--dataset", str(write_dataset(t / "BEARmini")),
                                                              "--model", m, "--out", _probe_run_folder(t)],
     ["a-probe-run already holds a KG probe run"]),
]


@pytest.mark.parametrize("name, build, expected", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_the_cli_refuses_before_loading(name, build, expected, tmp_path, tiny_kg_dir, tiny_clm_dir, monkeypatch):
    args = build(tmp_path, str(tiny_kg_dir), str(tiny_clm_dir), monkeypatch)
    assert_refused_before_loading(args, expected, tmp_path, monkeypatch, name)


def test_query_embeddings_of_the_wrong_row_count_are_refused_before_loading(tiny_kg_dir, tiny_clm_dir, monkeypatch):
    from deer.backends import models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(OptionError, match="3 rows for 4 queries") as refused:
        deer.probe(str(tiny_kg_dir), str(tiny_clm_dir), k_shot=2, query_embeddings=np.zeros((3, 32), np.float32))
    assert refused.value.option == "query_embeddings"


def test_lama_on_the_authors_style_is_refused_before_loading_in_python(tiny_kg_dir, tiny_clm_dir, monkeypatch):
    import bear_ref
    from deer.backends import models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(ValueError, match="LAMA needs the query to end at the comma"):
        bear_ref.lama(str(tiny_kg_dir), str(tiny_clm_dir), k_shot=2, template_style="authors")


def test_query_embeddings_of_the_wrong_width_are_refused_before_encoding(tiny_kg_dir, tiny_clm, monkeypatch):
    import deer.backends.encoder as encoder

    monkeypatch.setattr(encoder.PromptEOLEncoder, "encode_ids", lambda *a, **k: pytest.fail("a prompt was encoded"))
    with pytest.raises(OptionError, match="7 columns; this model's vectors have 32") as refused:
        deer.probe(str(tiny_kg_dir), tiny_clm, k_shot=2, query_embeddings=np.zeros((4, 7), np.float32), show_progress=False)
    assert refused.value.option == "query_embeddings"
