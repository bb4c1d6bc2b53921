"""The machinery every probe shares: models and fingerprints, tokenisation, batching, forward
passes (PromptEOL states, next-token log-probs, attention masks), templates, ranking, metrics,
the run spec, the result type and the on-disk stores.  Imports only ``kg_data`` and itself."""
