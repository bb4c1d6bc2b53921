"""DEER: probing what language models know about a knowledge graph (PromptEOL embeddings), and
the reference likelihood probes (``bear_ref``) it is judged against.

    import deer
    result = deer.probe("wn18rr", "smollm2-135m", subset=500)   # nothing written
    result.metrics["hit@10"], result.table, result.save("runs/mine")

The README's "Python API" section shows DEER, BEAR and LAMA on one model object.

The public names below are imported on first use, so ``import deer`` (and the CLI) stays fast.
"""

from importlib import metadata as _metadata

from deer.lazy_exports import lazy_exports

try:
    __version__ = _metadata.version("deer-probe-toolkit")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# public name -> module that defines it
_PUBLIC = {
    "probe": "deer.api",
    "load_result": "deer.api",
    "load_queries": "deer.api",
    "ProbeResult": "deer.platform.result",
    "Metrics": "deer.platform.result",
    "join_results": "deer.platform.result",
    "load_results": "deer.platform.result",
    "LoadedModel": "deer.platform.models",
    "open_model": "deer.platform.models",
    "ModelSpec": "deer.platform.model_spec",
    "PromptEOLEncoder": "deer.backends.encoder",
    "PromptTemplates": "deer.platform.templates",
    "RunSpec": "deer.platform.run_spec",
    "DeerCallback": "deer.integrations.training",
    "probe_during_training": "deer.integrations.training",
}

__all__ = ["__version__", *_PUBLIC]


__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
