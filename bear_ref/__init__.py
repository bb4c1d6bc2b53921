"""Reference likelihood probes: BEAR (summed statement log-likelihood, PLL for masked LMs), LAMA
(first-token log-probability) and the BEAR data-set score; each returns a ``deer.ProbeResult``.

    import bear_ref
    result = bear_ref.bear("wn18rr", "smollm2-135m", subset=50)
"""

from importlib import import_module as _import_module

from deer import __version__  # one version for the whole distribution (in __all__)

_PUBLIC = {"bear": "bear_ref.api", "lama": "bear_ref.api", "bear_dataset": "bear_ref.api"}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(_import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bear_ref' has no attribute '{name}'")


def __dir__():
    return sorted(list(globals()) + list(_PUBLIC))
