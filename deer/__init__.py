"""DEER: probing what language models know about a knowledge graph (PromptEOL embeddings), and
the reference likelihood probes (``bear_ref``) it is judged against.

    import deer
    result = deer.probe("wn18rr", "smollm2-135m", subset=500)   # nothing written
    result.metrics["hit@10"], result.table, result.save("runs/mine")

The public names below are imported on first use, so ``import deer`` (and the CLI) stays fast.
"""

from deer.lazy_exports import lazy_exports

# public name -> module that defines it
_PUBLIC = {
    "__version__": "deer.base.version",
    **dict.fromkeys(("probe", "load_result", "load_queries"), "deer.api"),
    **dict.fromkeys(("RunResult", "Metrics", "join_results", "load_results"), "deer.platform.result"),
    **dict.fromkeys(("LoadedModel", "open_model"), "deer.backends.models"),
    "ModelSpec": "deer.base.model_spec",
    "PromptEOLEncoder": "deer.backends.encoder",
    "PromptTemplates": "deer.platform.templates",
    **dict.fromkeys(("QuerySelection", "ModelLoading", "Budget"), "deer.platform.run_options"),
    "RunSpec": "deer.platform.run_spec",
    **dict.fromkeys(("DeerCallback", "probe_during_training"), "deer.integrations.training"),
}

__all__ = list(_PUBLIC)


__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
