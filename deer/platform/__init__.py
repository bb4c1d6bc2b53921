"""The platform every probe and every task shares (``deer.core`` before 0.2): models and their
fingerprints, model specs, templates, the one rank kernel, metrics, the run spec, the result types,
the benchmarks' per-query rows, stores, files, input checks and the length guard.  The model-facing
kernels are in ``deer.backends``; the probe seam and the runner are ``deer.probes`` and ``deer.runner``."""
