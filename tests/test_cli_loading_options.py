"""Issue 'Trust nothing read back', loading options: every option a `deer` command accepts is honoured on
every path it can take, or refused by name before anything loads.

The class test walks the commands of ``experiments.cli.main`` by their declared params: for each command
that takes a loading option (--model-arg, --adapter, --dtype, --device), each way of pointing it at a model
(the default model, --model, --checkpoints, --base-model, --single-token, --run, --resummarise: those whose
options the command declares) and each data set (a KG, LAMA, a BEAR data set) its data option takes.  A
path the command refuses without the loading option is not one it takes.  On the others the option must
reach the loader (``load_model`` is a stand-in that records its arguments and stops the command) or be
refused by name in one error line; a new command or path is covered without editing this file.
The tests after it are the reported defects, each through the CLI.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import deer
from deer.backends import models
from deer.base.errors import OptionError
from experiments.cli import main
from tests.benchmark_folders import write_dataset, write_lama
from tests.conftest import write_tiny_kg
from tests.refusals import assert_refused_before_loading


class Loaded(BaseException):
    """Raised by the stand-in loader: the options reached it, nothing more runs (not an Exception, so no
    command turns it into an error line)."""


# option name -> (flag, value, whether the loader's call (name, dtype, device) carries it)
LOADING = {
    "model_args": ("--model-arg", "attn_implementation=eager",
                   lambda call, where: getattr(call[0], "model_kwargs", {}) == {"attn_implementation": "eager"}),
    "adapter": ("--adapter", "{adapter}", lambda call, where: getattr(call[0], "adapter", None) == where["adapter"]),
    "dtype": ("--dtype", "bfloat16", lambda call, where: call[1] == "bfloat16"),
    "device": ("--device", "cpu", lambda call, where: call[2] == "cpu"),
}
# How a command is pointed at its model(s): (label, arguments, whether the data option applies with them).
SOURCES = (
    ("default model", [], True),
    ("--model", ["--model", "{model}"], True),
    ("--checkpoints", ["--checkpoints", "{checkpoints}"], True),
    ("--base-model", ["--base-model", "{model}"], True),
    ("--single-token", ["--single-token", "--model", "{model}"], True),
    ("--resummarise", ["--resummarise", "--out", "{bear_run}"], True),
    ("--run", ["--run", "{run}"], False),  # finished runs: no data set is read
)
DATA = ("kg", "lama", "bear")  # values of a command's data option (--kg, --dataset)
DATA_PARAMS = ("kg", "dataset")


@pytest.fixture(scope="module")
def where(tmp_path_factory, tiny_clm_dir) -> dict[str, str]:
    """The folders the paths need: data sets, a tiny model, a checkpoint series, an adapter, finished runs."""
    root = tmp_path_factory.mktemp("paths")
    checkpoints = root / "trainer"
    for step in (10, 20):
        (checkpoints / f"checkpoint-{step}").mkdir(parents=True)
        for file in Path(tiny_clm_dir).iterdir():
            (checkpoints / f"checkpoint-{step}" / file.name).symlink_to(file)
    adapter = root / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))  # never loaded: the loader is a stand-in
    found = {"kg": write_tiny_kg(root / "kg"), "lama": write_lama(root / "lama"), "bear": write_dataset(root / "bear"),
             "model": tiny_clm_dir, "checkpoints": checkpoints, "adapter": adapter, "run": root / "run", "bear_run": root / "bear_run"}
    runner = CliRunner(env={"DEER_CACHE_DIR": str(root / "cache")})
    for probe in ("deer", "bear", "lama"):  # one run folder with DEER's, BEAR's and LAMA's ranks, for --run
        made = runner.invoke(main, ["probe", "--probe", probe, "--kg", str(found["kg"]), "--model", str(tiny_clm_dir), "--k-shot", "2",
                                    "--out", str(found["run"])])
        assert made.exit_code == 0, made.output
    made = runner.invoke(main, ["bear-dataset", "--dataset", str(found["bear"]), "--model", str(tiny_clm_dir),
                                "--out", str(found["bear_run"])])
    assert made.exit_code == 0, made.output
    return {key: str(value) for key, value in found.items()}


def invoke(args: list[str], root: Path, monkeypatch):
    """``deer *args`` in a fresh folder under ``root`` with the stand-in loader: (result or None when the loader
    was reached, the loader's calls)."""
    calls = []

    def load_model(name, dtype="auto", device="auto"):
        calls.append((name, dtype, device))
        raise Loaded

    work = root / f"work{sum(1 for _ in root.glob('work*'))}"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)  # default output folders land here
    monkeypatch.setenv("DEER_CACHE_DIR", str(root / "cache"))
    monkeypatch.setattr(models, "load_model", load_model)
    try:
        return CliRunner().invoke(main, args), calls
    except Loaded:
        return None, calls


def commands(group: click.Group, prefix: tuple[str, ...] = ()):
    """(words that name it, command) for every command under ``group``, groups walked."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def paths(command: click.Command, where: dict[str, str]):
    """(label, arguments) of each path ``command`` declares the options of."""
    declared = {opt for param in command.params for opt in param.opts}
    data = next((param.opts[0] for param in command.params if param.name in DATA_PARAMS), None)
    for label, args, reads_data in SOURCES:
        args = [arg.format(**where) for arg in args]
        if not all(arg in declared for arg in args if arg.startswith("--")):
            continue
        if data is None or not reads_data:
            yield label, args
            continue
        for kind in DATA:
            yield f"{label}, {data} {kind}", [*args, data, where[kind]]


def outcome(result, calls) -> str:
    if calls:
        return f"reached the loader as {calls[0]!r}"
    return "exit 0: dropped" if result.exit_code == 0 else (result.output.strip().splitlines() or ["no output"])[-1]


def refused_by_name(result, flag: str) -> bool:
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    return result.exit_code != 0 and len(errors) == 1 and flag in errors[0] and "unexpected" not in errors[0]


def test_every_loading_option_is_honoured_on_every_path_or_refused_by_name(where, tmp_path, monkeypatch, capsys):
    checked, not_taken, failures, reaching, sources_taken = 0, [], [], {}, set()
    for words, command in commands(main):
        options = [param.name for param in command.params if param.name in LOADING]
        for label, args in paths(command, where) if options else ():
            plain, calls = invoke([*words, *args], tmp_path, monkeypatch)
            if plain is not None and plain.exit_code != 0:
                not_taken.append(f"{' '.join(words)} [{label}]")  # refused for its own reasons: not a path it takes
                continue
            reaching[words] = reaching.get(words, 0) + bool(calls)
            sources_taken.add(label.partition(",")[0])
            for name in options:
                flag, value, carried = LOADING[name]
                result, calls = invoke([*words, *args, flag, value.format(**where)], tmp_path, monkeypatch)
                checked += 1
                honoured = bool(calls) and carried(calls[0], where)
                if not honoured and not (result is not None and not calls and refused_by_name(result, flag)):
                    failures.append(f"deer {' '.join(words)} [{label}] {flag}: {outcome(result, calls)}")
    with capsys.disabled():
        print(f"\n{checked} (command, loading option, path) combinations checked; {len(not_taken)} paths not taken")
    assert not failures, "\n".join(failures)
    # not vacuous: each command with loading options reached the loader on some path, and each source was taken somewhere
    assert reaching and all(reaching.values()), reaching
    assert {("cloze",), ("experiment", "screen"), ("bear-dataset",)} <= set(reaching)
    assert sources_taken == {label for label, _, _ in SOURCES}, sources_taken


# -- the reported defects, each through the CLI ---------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["cloze", "--dataset", "{lama}"],
    ["experiment", "agreement", "--kg", "{kg}"],
    ["experiment", "screen", "--kg", "{kg}"],
    ["experiment", "screen", "--kg", "{kg}", "--checkpoints", "{checkpoints}"],
    ["experiment", "screen", "--kg", "{lama}", "--checkpoints", "{checkpoints}"],
], ids=["cloze", "agreement", "screen", "screen-checkpoints", "screen-checkpoints-lama"])
def test_the_default_model_and_checkpoints_take_model_arg_and_adapter(args, where, tmp_path, monkeypatch):
    """Defect 1: without --model (and for --checkpoints) --model-arg and --adapter were dropped."""
    result, calls = invoke([arg.format(**where) for arg in args] + ["--model-arg", "attn_implementation=eager",
                                                                     "--adapter", where["adapter"]], tmp_path, monkeypatch)
    assert calls, result.output
    assert (calls[0][0].model_kwargs, calls[0][0].adapter) == ({"attn_implementation": "eager"}, where["adapter"])


def test_an_adapter_without_its_config_is_refused_without_model_too(where, tmp_path, monkeypatch):
    """Defect 1: refused with --model, accepted (and dropped) without it."""
    (tmp_path / "not_an_adapter").mkdir()
    (tmp_path / "r").mkdir()
    assert_refused_before_loading(["cloze", "--dataset", where["lama"], "--adapter", str(tmp_path / "not_an_adapter")],
                                  ["--adapter", "no adapter_config.json"], tmp_path / "r", monkeypatch, "no adapter config")


@pytest.mark.parametrize("backend", ["nonsense", ""])
@pytest.mark.parametrize("args", [["probe", "--kg", "{kg}"], ["cloze", "--dataset", "{lama}"], ["bear-dataset", "--dataset", "{bear}"]],
                         ids=["probe", "cloze", "bear-dataset"])
def test_an_unknown_backend_is_refused_with_the_known_names_before_loading(args, backend, where, tmp_path, monkeypatch):
    """Defect 2: 'unexpected KeyError' after the model had loaded."""
    (tmp_path / "r").mkdir()
    assert_refused_before_loading([arg.format(**where) for arg in args] + ["--model", where["model"], "--backend", backend],
                                  ["--backend", f"'{backend}'", "hf, plain"], tmp_path / "r", monkeypatch, "backend")


def test_the_python_api_refuses_an_unknown_backend_before_loading(where, monkeypatch):
    from experiments.benchmarks import probe_benchmark

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(OptionError, match="backend='nonsense': unknown backend; known: hf, plain"):
        deer.probe(where["kg"], where["model"], backend="nonsense")
    with pytest.raises(OptionError, match="backend='nonsense': unknown backend"):
        probe_benchmark(where["lama"], where["model"], backend="nonsense")


@pytest.fixture()
def bad_checkpoints(where, tmp_path) -> Path:
    """A series whose checkpoint-20 has a config.json transformers refuses (hidden size 32, 5 attention heads)."""
    series = tmp_path / "series"
    for step in (10, 20):
        folder = series / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        for file in Path(where["model"]).iterdir():
            if file.name != "config.json" or step == 10:
                (folder / file.name).symlink_to(file)
    config = json.loads((Path(where["model"]) / "config.json").read_text())
    (series / "checkpoint-20" / "config.json").write_text(json.dumps({**config, "num_attention_heads": 5}))
    return series


@pytest.mark.parametrize("args, expected", [
    (["probe", "--kg", "{kg}", "--model", "{model}", "--model-arg", "num_hidden_layers=abc"],
     ["--model-arg num_hidden_layers='abc'", "expected int"]),
    (["experiment", "screen", "--kg", "{kg}", "--checkpoints", "{bad}"], ["checkpoint-20", "config.json", "attention heads"]),
    (["cloze", "--dataset", "{lama}", "--model", "{bad}/checkpoint-10", "--model", "{bad}/checkpoint-20"],
     ["checkpoint-20", "attention heads"]),
], ids=["model-arg", "screen-checkpoints", "cloze-models"])
def test_every_config_is_validated_before_the_first_model_loads(args, expected, where, bad_checkpoints, tmp_path, monkeypatch):
    """Defect 3: transformers' validation errors came as 'unexpected StrictDataclass...' after the earlier
    checkpoints were probed, without naming the checkpoint."""
    (tmp_path / "r").mkdir()
    assert_refused_before_loading([arg.format(**where, bad=bad_checkpoints) for arg in args], expected, tmp_path / "r",
                                  monkeypatch, "config")


def test_the_loader_names_a_config_transformers_refuses(bad_checkpoints):
    """Defect 3, Python API: open_model raised huggingface_hub's StrictDataclassClassValidationError."""
    with pytest.raises(models.ModelUnavailableError, match="checkpoint-20: its config.json does not validate: .*attention heads"):
        models.open_model(str(bad_checkpoints / "checkpoint-20"))


@pytest.mark.parametrize("adapter, without_peft, expected", [
    ("{adapter}", True, ["--adapter", "needs peft, which is not installed"]),
    ("adapters/lora", False, ["--adapter adapters/lora", "no such adapter folder"]),
    ("my/adapters/lora", False, ["--adapter my/adapters/lora", "no such adapter folder"]),
    ("./missing", True, ["--adapter ./missing", "no such adapter folder"]),
    ("{kg}", True, ["--adapter", "not a PEFT adapter folder (no adapter_config.json in it)"]),
], ids=["no-peft", "missing-relative-folder", "missing-nested-folder", "no-peft-missing-folder", "no-peft-not-an-adapter"])
def test_adapter_problems_are_found_before_loading(adapter, without_peft, expected, where, tmp_path, monkeypatch):
    """Defect 4: found only after the model had loaded (a relative path was taken for a hub id).  Without peft, a
    missing folder or one without adapter_config.json said "needs peft" (round 5): the folder's problem comes first."""
    if without_peft:
        monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` fails as when it is not installed
    (tmp_path / "r").mkdir()
    assert_refused_before_loading(["probe", "--kg", where["kg"], "--model", where["model"], "--adapter", adapter.format(**where)],
                                  expected, tmp_path / "r", monkeypatch, "adapter")


@pytest.mark.parametrize("args, expected", [
    (["experiment", "screen", "--kg", "{lama}", "--metric", "mrr", "--rank-type", "raw", "--k-shot", "2", "--runs-dir", "x"],
     ["--k-shot", "--runs-dir", "--rank-type", "--metric", "not for --kg"]),
    (["experiment", "agreement", "--kg", "{lama}", "--hit-k", "5"], ["--hit-k", "not for --kg"]),
    (["experiment", "screen", "--checkpoints", "{checkpoints}", "--run", "{run}"], ["--checkpoints", "--run"]),
], ids=["screen-lama", "agreement-lama", "screen-checkpoints-run"])
def test_options_a_path_ignores_are_refused_by_name(args, expected, where, tmp_path, monkeypatch):
    """Defect 5: `screen --kg lama` dropped them with exit 0; `screen --checkpoints X --run Y` said '--model names'."""
    (tmp_path / "r").mkdir()
    assert_refused_before_loading([arg.format(**where) for arg in args], expected, tmp_path / "r", monkeypatch, "ignored")


def one_value_options(group: click.Group, prefix: tuple[str, ...] = ()):
    """(words that reach it, option) for each one-value option of ``group``, its groups and commands."""
    for param in group.params:
        if isinstance(param, click.Option) and param.expose_value and not (param.multiple or param.count):
            yield prefix, param
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from one_value_options(command, (*prefix, name))
        else:
            yield from (((*prefix, name), param) for param in command.params
                        if isinstance(param, click.Option) and param.expose_value and not (param.multiple or param.count))


def test_every_one_value_option_given_twice_is_refused_by_name():
    """click keeps the last of a one-value option given twice and drops the others without a word: `deer probe
    --probe lama --probe deer` ran DEER alone, `--subset 10 --subset 500` probed 500.  Every one-value option of every
    command (a new one too) is now refused when given twice, before anything runs; repeatable ones are unaffected."""
    walked = list(one_value_options(main))
    assert len({words for words, _ in walked}) >= 10 and len(walked) > 100  # the walk reaches the commands
    for words, option in walked:
        once = [option.opts[0]] if option.is_flag else [option.opts[0], "x"]
        result = CliRunner().invoke(main, [*words, *once, *once])
        assert result.exit_code == 2 and f"{option.opts[0]}" in result.output and "given 2 times" in result.output, \
            (words, option.opts, result.output)
    repeated = CliRunner().invoke(main, ["probe", "--probe-option", "lama:single_token=true", "--probe-option", "x", "--kg", "-"])
    assert "given 2 times" not in repeated.output  # a repeatable option given twice is read as both
