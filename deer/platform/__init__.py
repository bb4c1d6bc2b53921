"""The platform every probe and every task shares (``deer.core`` before 0.2): models, templates, the rank
kernel, metrics, run specs, results, stores, files, input checks and the length guard."""
