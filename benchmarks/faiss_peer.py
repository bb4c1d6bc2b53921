"""FAISS, the peer the ranking benchmarks compare against: an extra, since no package code uses it."""

from __future__ import annotations

import click


def import_faiss():
    """The faiss module, or a clear error saying how to install it."""
    try:
        import faiss
    except ImportError:
        raise click.ClickException("this benchmark compares against FAISS, an extra: pip install -e '.[faiss]'") from None
    return faiss
