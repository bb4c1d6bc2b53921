"""Run plumbing every probe shares: models and fingerprints, templates, the one rank kernel, metrics,
the run spec, result types, the cloze benchmarks' per-query rows, stores, files, input checks and the length guard.  The model-facing
kernels are in ``deer.backends``; the probe seam and the runner are ``deer.probes`` and ``deer.runner``."""
