"""The toolkit's version, written here only (pyproject.toml reads it).  Every store key and run records it, so it
comes from the code that runs, never from installed metadata (absent under PYTHONPATH, stale after a checkout)."""

__version__ = "0.2.0.dev0"
