"""DEER: probing what language models know about a knowledge graph (PromptEOL embeddings), and
the reference likelihood probes (``bear_ref``) it is judged against."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("deer-probe-toolkit")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
