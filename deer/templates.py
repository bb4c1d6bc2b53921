"""The DEER prompt templates: few-shot query text and described-tail text, in one place.

Query (the state that should predict the tail), k examples sampled from the train split:

    (name, relation name, name)        x k, one per line
    (h_name, r_name,

Tail (PromptEOL over the entity's name and description; the braces in the middle line are
literal, as in the DEER authors' code):

    e_name - e_desc
    This sentence: "{word}" means in one word: "{one word}"
    This sentence: "e_name" means in one word: "

Whitespace at the query/tail boundary: a whole statement "(h, r, t)" is tokenised with the
space attached to the tail's first token (" t" in BPE vocabularies).  So the query text ends at
the comma and the continuation is " t)".  The DEER embedding, LAMA's next-token distribution
and BEAR's conditional likelihood all use that same boundary, so one forward pass over the
query serves all three.  ``query_trailing_space=True`` reproduces the paper's text literally
(ending in ", ") for the DEER embedding only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

from kg_data.kg import TextualKG

EXAMPLE_LINE = "({head}, {relation}, {tail})"
QUERY_LINE = "({head}, {relation},"
CONTINUATION = " {tail})"
TAIL_TEMPLATE = (
    '{name} - {description}\nThis sentence: "{{word}}" means in one word: "{{one word}}"\n'
    'This sentence: "{name}" means in one word: "'
)
SHOT_MODES = ("per-query", "shared")


@dataclasses.dataclass(frozen=True)
class PromptTemplates:
    """How query and tail prompts are built; recorded in every run's metadata.

    k_shot: number of train examples before each query (paper: 8).
    shots: "per-query" resamples the examples for every query (paper); "shared" uses one set.
    seed: seeds the example sampling; a query's examples depend only on (seed, h, r, t).
    """

    k_shot: int = 8
    shots: str = "per-query"
    seed: int = 0
    query_trailing_space: bool = False

    def __post_init__(self):
        if self.shots not in SHOT_MODES:
            raise ValueError(f"shots must be one of {SHOT_MODES}, got '{self.shots}'")
        if self.k_shot < 0:
            raise ValueError("k_shot must be >= 0")

    # -- text pieces ---------------------------------------------------------------------------

    @staticmethod
    def example_line(kg: TextualKG, head: int, relation: int, tail: int) -> str:
        return EXAMPLE_LINE.format(
            head=kg.entity_names[head], relation=kg.relation_names[relation], tail=kg.entity_names[tail]
        )

    def example_rows(self, kg: TextualKG, triple: tuple[int, int, int]) -> np.ndarray:
        """Rows of the train split used as examples for this query."""
        train = kg.splits.get("train")
        if train is None or len(train) == 0 or self.k_shot == 0:
            return np.zeros(0, dtype=np.int64)
        entropy = [self.seed] if self.shots == "shared" else [self.seed, *map(int, triple)]
        rng = np.random.default_rng(entropy)
        k = min(self.k_shot, len(train) - 1) if len(train) > 1 else len(train)
        rows = rng.choice(len(train), size=k + 1, replace=False) if len(train) > k else np.arange(len(train))
        # Never show the query's own triple (possible when probing the train split); k+1 drawn.
        rows = [r for r in rows.tolist() if tuple(train[r].tolist()) != tuple(map(int, triple))]
        return np.asarray(rows[:k], dtype=np.int64)

    def query_context(self, kg: TextualKG, triple: tuple[int, int, int]) -> str:
        """Few-shot examples and the open query line, ending at the comma (see module doc)."""
        head, relation, _ = triple
        train = kg.splits.get("train")
        lines = [self.example_line(kg, *train[row].tolist()) for row in self.example_rows(kg, triple)]
        lines.append(QUERY_LINE.format(head=kg.entity_names[head], relation=kg.relation_names[relation]))
        return "\n".join(lines)

    def query_prompt(self, kg: TextualKG, triple: tuple[int, int, int]) -> str:
        """Text whose last-token state is the DEER query embedding."""
        context = self.query_context(kg, triple)
        return context + " " if self.query_trailing_space else context

    @staticmethod
    def continuation(kg: TextualKG, tail: int) -> str:
        """What BEAR scores after the query context: " t_name)"."""
        return CONTINUATION.format(tail=kg.entity_names[tail])

    @staticmethod
    def tail_prompt(kg: TextualKG, entity: int) -> str:
        return TAIL_TEMPLATE.format(name=kg.entity_names[entity], description=kg.entity_descriptions[entity])

    # -- bookkeeping ---------------------------------------------------------------------------

    def to_metadata(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "example_line": EXAMPLE_LINE,
            "query_line": QUERY_LINE + (" " if self.query_trailing_space else ""),
            "continuation": CONTINUATION,
            "tail_template": TAIL_TEMPLATE,
        }

    @staticmethod
    def tail_template_key() -> str:
        """Identifies the tail template, for the entity-embedding cache key."""
        return hashlib.sha256(TAIL_TEMPLATE.encode()).hexdigest()[:12]

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_metadata(), sort_keys=True).encode()).hexdigest()[:12]
