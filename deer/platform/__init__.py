"""The platform every probe and every task shares: templates, the rank kernel
and its streamed cosine form, metrics, run specs, results, stores, input checks and the length guard.
It stands on ``deer.backends`` (the model) and ``deer.base``; nothing below imports it."""
