"""Textual knowledge graphs: WN18RR, BEAR, LAMA and user KGs, with queries and filters."""

from kg_data.errors import KGFormatError, KGNotFoundError, KGSplitError
from kg_data.kg import TextualKG
from kg_data.load import load_kg
from kg_data.locate import describe_datasets, find_dataset
from kg_data.queries import QuerySet, build_queries, known_tails

__all__ = ["KGFormatError", "KGNotFoundError", "KGSplitError", "QuerySet", "TextualKG", "build_queries", "describe_datasets",
           "find_dataset", "known_tails", "load_kg"]
