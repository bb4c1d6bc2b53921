"""The house rules of the import graph, read from the source (every import statement, also the
ones inside functions): no cycles; click only in the CLI layer; each layer imports only below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("deer", "bear_ref", "kg_data", "experiments")

# Layer of a module (by longest matching prefix) and the layers it may import.  Top to bottom:
# cli -> experiments -> api -> probes -> registry (deer.probes) -> platform -> backends -> base -> kg_data.
LAYERS = {
    "experiments.cli": "cli",
    "experiments": "experiments",
    "deer.api": "api",
    "deer.integrations": "api",  # the training callback: a thin shell over deer.api, beside it
    "bear_ref.api": "api",
    "bear_ref.dataset": "api",  # the BEAR data-set run: the one cloze loop (deer.runner) seen as lm-pub-quiz's accuracy
    "bear_ref.benchmark": "api",  # a cloze benchmark's run (deer.runner.run_cloze); its reports are experiments'
    "deer.embedding_probe": "probes",
    "bear_ref": "probes",
    "deer.runner": "api",  # task + probes + model -> result, for every probe and both task shapes (KG, benchmark)
    "deer.probes": "registry",  # the probe protocol and registry (names only; probes register through entry points)
    "deer.platform": "platform",  # what every probe and task shares: ranking, stores, results, run specs, input checks
    "deer.backends": "backends",  # the model: loading it, and the kernels and backends that run it
    "deer.base": "base",  # errors, work counters, atomic files, extras, model specs, unit vectors
    "deer": "package",  # deer/__init__.py and deer/lazy_exports.py: names only, imported lazily
    "kg_data": "data",
}
BELOW = ("data", "base", "backends", "platform", "registry", "probes", "api", "experiments", "cli")  # bottom to top
ALLOWED = {layer: set(BELOW[:BELOW.index(layer) + 1]) | ({"package"} if layer not in ("data", "base", "backends", "platform") else set())
           for layer in BELOW}
ALLOWED["package"] = {"package"}


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def imported_names(path: Path, module: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = module.split(".")[: -node.level] if path.name != "__init__.py" else module.split(".")[: len(module.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(path, module):
            # The deepest project module the name refers to ("a.b.c" -> a.b.c, else a.b, ...).
            parts = name.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) != module:
                targets.add(".".join(parts))
        graph[module] = targets
    return graph


def layer_of(module: str) -> str:
    matches = [prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")]
    return LAYERS[max(matches, key=len)]


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_walk_sees_the_modules_and_their_imports():
    graph = import_graph()
    assert {"experiments.cli", "deer.platform.result", "bear_ref.api", "experiments.runs", "kg_data.fetch"} <= set(graph)
    assert "deer.probes" in graph["deer.embedding_probe"]
    assert "experiments.cli.options" in graph["experiments.cli.probes"]


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_click_only_in_the_cli_layer():
    offenders = [module for module, path in project_modules().items()
                 if layer_of(module) != "cli" and any(n == "click" or n.startswith("click.") for n in imported_names(path, module))]
    assert not offenders, f"click imported outside experiments/cli: {offenders}"


MODEL_LOADERS = {"open_model", "as_loaded_model", "load_model", "from_pretrained"}  # wrapping a model held in memory loads nothing
LOADS_ITS_OWN_MODEL = {"experiments.training_demo"}  # it trains the model it probes: loaded for training, then probed


def test_every_model_is_loaded_through_open_backend():
    """Models were loaded through transformers before any backend was chosen (bear_ref.api, the CLI, experiments.runs),
    so a second engine (vLLM) never got the model.  Outside deer/backends nothing names a loader but the training demo:
    every model is opened by ``open_backend`` (or ``as_backend``) on the backend the run chose."""
    offenders = {}
    for module, path in project_modules().items():
        if layer_of(module) == "backends" or module in LOADS_ITS_OWN_MODEL:
            continue
        tree = ast.parse(path.read_text(), str(path))
        named = {node.attr if isinstance(node, ast.Attribute) else node.id for node in ast.walk(tree)
                 if isinstance(node, (ast.Attribute, ast.Name)) and not isinstance(getattr(node, "ctx", None), ast.Store)}
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
        found = sorted((named | imported) & MODEL_LOADERS)
        if found:
            offenders[module] = found
    assert not offenders, f"models loaded outside deer/backends' open_backend: {offenders}"


def test_each_layer_imports_only_layers_below_it():
    wrong = [f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
             for module, targets in import_graph().items() for target in targets
             if layer_of(target) not in ALLOWED[layer_of(module)]]
    assert not wrong, "\n".join(wrong)


# The packages stack bottom to top; a package imports only those below it (so `deer` and `bear_ref`
# never depend on each other in both directions, and the CLI, in experiments.cli, sits on the roof).
PACKAGE_ORDER = ("kg_data", "deer", "bear_ref", "experiments")


def test_packages_import_only_packages_below_them():
    wrong = sorted({f"{module} imports {target}" for module, targets in import_graph().items() for target in targets
                    if PACKAGE_ORDER.index(target.split(".")[0]) > PACKAGE_ORDER.index(module.split(".")[0])})
    assert not wrong, "\n".join(wrong)


def test_nothing_imports_the_cli():
    offenders = [f"{module} imports {target}" for module, targets in import_graph().items() for target in targets
                 if layer_of(target) == "cli" and layer_of(module) != "cli"]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("old", ["deer.core", *(f"deer.core.{name}" for name in ("ranking", "models", "errors", "work", "files",
                                                                        "extras", "model_spec"))])
def test_the_platforms_0_1_name_is_gone(old):
    """0.1's ``deer.core`` (a redirect to ``deer.platform``, ``deer.backends`` and ``deer.base`` kept until 0.3) went
    before 0.2 was released: importing it fails."""
    import importlib

    with pytest.raises(ModuleNotFoundError, match="deer.core"):
        importlib.import_module(old)


@pytest.mark.parametrize(("module", "name"), [("deer", "ProbeResult"), ("deer.platform.result", "ProbeResult"),
                                              ("experiments.runs", "ProbeRun"), ("kg_data.cloze", "ClozeTask")])
def test_0_1s_names_of_the_result_and_the_task_are_gone(module, name):
    """0.1's ``ProbeResult`` and ``ProbeRun`` (now ``deer.RunResult``) and ``ClozeTask`` (now ``kg_data.task.Task``),
    kept as aliases until 0.3, went before 0.2 was released."""
    import importlib

    imported = importlib.import_module(module)
    assert not hasattr(imported, name) and name not in getattr(imported, "__all__", ())
