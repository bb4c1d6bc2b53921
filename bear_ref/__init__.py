"""Reference likelihood probes: BEAR (summed statement log-likelihood, PLL for masked LMs) and LAMA."""

from deer import __version__  # noqa: F401  (one version for the whole distribution)
