"""Reference likelihood probes: BEAR (summed statement log-likelihood, PLL for masked LMs), LAMA
(first-token log-probability) and the BEAR data-set score; each returns a ``deer.RunResult``.

    import bear_ref
    result = bear_ref.bear("wn18rr", "smollm2-135m", subset=50)
"""

from deer import __version__  # one version for the whole distribution (in __all__)
from deer.lazy_exports import lazy_exports

_PUBLIC = {"bear": "bear_ref.api", "lama": "bear_ref.api", "bear_dataset": "bear_ref.api"}

__all__ = ["__version__", *_PUBLIC]


__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
