"""The DEER prompt templates: few-shot query text and described-tail text, in one place.

Two query styles (``style``), one tail template.

``style="paper"`` (default) -- the paper's text; examples resampled for every query
(``shots="per-query"``) unless ``shots="shared"``:

    (name, relation name, name)        x k, one per line
    (h_name, r_name,

``style="authors"`` -- byte for byte what the DEER authors' package ``deer-probe`` 0.1.1 builds
(``deer/prompt_templates.py``, ``query2prompts`` with ``entity_id2definition``): one few-shot
block shared by every query (``shots="shared"``), the head's definition, a trailing space:

    (name, relation name, name)        x k, one per line (the package's ``fewshot_prompt``)
    h_name - h_description
    (h_name, r_name,<space>

The package writes ``f"{fewshot_prompt}\\n{h} - {definition}\\n({h}, {r}, "``, and with an empty
few-shot block (k = 0) only ``f"{h} - {definition}\\n({h}, {r}, "``: no blank line anywhere.
It takes the few-shot block as a string from its caller; here it is k example lines joined by
newlines (no newline after the last), drawn once from the train split.

Tail (PromptEOL over the entity's name and description; the braces in the middle line are
literal), the same in both styles -- the package's ``tail_entities2prompts`` with definitions:

    e_name - e_desc
    This sentence: "{word}" means in one word: "{one word}"
    This sentence: "e_name" means in one word: "

Examples.  A query's examples never include a train triple with the query's head and relation
(so never the query itself, nor another answer to the same question); k examples whenever the
train split has at least k other triples.  Per-query examples are drawn by a generator seeded
with (seed, head, relation) -- never the tail, so queries that differ only in their gold tail
get the same prompt.  Shared examples are the first k of one permutation of the train split
seeded by ``seed``, the same for every query (a query whose (head, relation) occurs among them
gets the next ones instead).

Whitespace at the query/tail boundary: a whole statement "(h, r, t)" is tokenised with the
space attached to the tail's first token (" t" in BPE vocabularies).  So ``query_context`` --
what the likelihood probes (BEAR's continuation " t)", LAMA's next token) condition on -- ends at
the comma in both styles.  ``query_prompt`` -- whose last-token state is the DEER embedding --
is that context in the paper style (one forward pass then serves DEER and LAMA), or the context
plus " " with ``query_trailing_space=True`` (the paper's literal ", ") and always in the
authors' style (the package's text), where DEER and LAMA therefore read different positions.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections import Counter

import numpy as np

from kg_data.kg import TextualKG

EXAMPLE_LINE = "({head}, {relation}, {tail})"
QUERY_LINE = "({head}, {relation},"
# deer-probe 0.1.1, deer/prompt_templates.py, query2prompts (entity_id2definition given):
#   text = f'''{head_entity} - {definition}\n({head_entity}, {relation}, '''
#   if fewshot_prompt: text = f'''{fewshot_prompt}\n{text}'''
AUTHORS_QUERY_LINES = "{head} - {head_description}\n({head}, {relation}, "
CONTINUATION = " {tail})"
TAIL_TEMPLATE = (
    '{name} - {description}\nThis sentence: "{{word}}" means in one word: "{{one word}}"\n'
    'This sentence: "{name}" means in one word: "'
)
# The same PromptEOL text for a candidate without a description (the BEAR and LAMA data sets).
NAME_TAIL_TEMPLATE = 'This sentence: "{{word}}" means in one word: "{{one word}}"\nThis sentence: "{name}" means in one word: "'
SHOT_MODES = ("per-query", "shared")
STYLES = ("paper", "authors")
# Recorded in the metadata (and so in every cache key): change it whenever the examples a query
# gets change, so embeddings stored under the old rule are never reused.
SHOT_SAMPLING = (
    "v2: train triples with the query's (head, relation) excluded; per-query: k drawn by "
    "default_rng([seed, head, relation]); shared: first k of default_rng([seed]).permutation(n_train)"
)
# What each style implies when shots / query_trailing_space are not given.
STYLE_DEFAULTS = {"paper": ("per-query", False), "authors": ("shared", True)}


@functools.lru_cache(maxsize=8)
def candidate_prompt(label: str, description: str | None = None) -> str:
    """DEER's prompt for a benchmark's answer: name and description (``TAIL_TEMPLATE``), or the name alone."""
    if description:
        return TAIL_TEMPLATE.format(name=label, description=description)
    return NAME_TAIL_TEMPLATE.format(name=label)


def candidate_prompts(candidates) -> list[str]:
    """DEER's prompt for every answer of a benchmark's candidate set (``kg_data.cloze.CandidateSet``)."""
    descriptions = candidates.descriptions or (None,) * len(candidates)
    return [candidate_prompt(label, description) for label, description in zip(candidates.labels, descriptions, strict=True)]


def _shared_order(seed: int, n_train: int) -> np.ndarray:
    order = np.random.default_rng([seed]).permutation(n_train)
    order.flags.writeable = False
    return order


@dataclasses.dataclass(frozen=True)
class PromptTemplates:
    """How query and tail prompts are built; recorded in every run's metadata.

    k_shot: number of train examples before each query (paper: 8).
    shots: "per-query" resamples the examples for every query (seeded by (seed, h, r)); "shared"
        uses one set for all.  Default: per-query for the paper style, shared for the authors'.
    seed: seeds the example sampling.
    query_trailing_space: end the DEER query prompt with ", " instead of ",".  Default False for
        the paper style; the authors' style always has it.
    style: "paper" (the paper's text) or "authors" (the text of the DEER authors' package
        deer-probe 0.1.1: head definition line, one shared few-shot set, trailing space).
    """

    k_shot: int = 8
    shots: str | None = None
    seed: int = 0
    query_trailing_space: bool | None = None
    style: str = "paper"

    def __post_init__(self):
        if self.style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got '{self.style}'")
        default_shots, default_space = STYLE_DEFAULTS[self.style]
        if self.shots is None:
            object.__setattr__(self, "shots", default_shots)
        if self.query_trailing_space is None:
            object.__setattr__(self, "query_trailing_space", default_space)
        object.__setattr__(self, "query_trailing_space", bool(self.query_trailing_space))
        if self.shots not in SHOT_MODES:
            raise ValueError(f"shots must be one of {SHOT_MODES}, got '{self.shots}'")
        if self.k_shot < 0:
            raise ValueError("k_shot must be >= 0")
        if self.style == "authors" and self.shots != "shared":
            raise ValueError("the authors' template style uses one few-shot set for all queries (shots='shared'), "
                             "as deer-probe 0.1.1 does; per-query examples are the paper style")
        if self.style == "authors" and not self.query_trailing_space:
            raise ValueError("the authors' template style ends the query with ', ' (deer-probe 0.1.1); "
                             "a query ending at the comma is the paper style")

    # -- text pieces ---------------------------------------------------------------------------

    @staticmethod
    def example_line(kg: TextualKG, head: int, relation: int, tail: int) -> str:
        return EXAMPLE_LINE.format(
            head=kg.entity_names[head], relation=kg.relation_names[relation], tail=kg.entity_names[tail]
        )

    def example_rows(self, kg: TextualKG, triple: tuple[int, int, int]) -> np.ndarray:
        """Rows of the train split used as examples for this query (see the module doc).

        Depends on (seed, head, relation) only; k rows whenever the train split has at least k
        triples whose (head, relation) differs from the query's.
        """
        train = kg.splits.get("train")
        if train is None or len(train) == 0 or self.k_shot == 0:
            return np.zeros(0, dtype=np.int64)
        head, relation = int(triple[0]), int(triple[1])
        eligible = (train[:, 0] != head) | (train[:, 1] != relation)
        n_excluded = len(train) - int(eligible.sum())
        k = min(self.k_shot, len(train) - n_excluded)
        if self.shots == "shared":
            candidates = _shared_order(int(self.seed), len(train))[: k + n_excluded]
            rows = candidates[eligible[candidates]][:k]
        else:
            rng = np.random.default_rng([int(self.seed), head, relation])
            positions = rng.choice(len(train) - n_excluded, size=k, replace=False)
            rows = np.flatnonzero(eligible)[positions]
        return np.asarray(rows, dtype=np.int64)

    def examples_used(self, kg: TextualKG, triples: np.ndarray) -> np.ndarray:
        """int64 (n,): how many examples each query's prompt holds (``example_rows``' count, without
        drawing them): k, unless the train split has fewer triples outside the query's (head, relation)."""
        triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        train = kg.splits.get("train")
        if train is None or len(train) == 0 or self.k_shot == 0:
            return np.zeros(len(triples), dtype=np.int64)
        same_pair = Counter(zip(train[:, 0].tolist(), train[:, 1].tolist(), strict=True))
        return np.asarray([min(self.k_shot, len(train) - same_pair.get((h, r), 0)) for h, r, _ in triples.tolist()],
                          dtype=np.int64)

    def examples_text(self, kg: TextualKG, triple: tuple[int, int, int]) -> str:
        """The few-shot block: one example line per row, joined by newlines ("" for none)."""
        train = kg.splits.get("train")
        return "\n".join(self.example_line(kg, *train[row].tolist()) for row in self.example_rows(kg, triple))

    def query_prompt(self, kg: TextualKG, triple: tuple[int, int, int]) -> str:
        """Text whose last-token state is the DEER query embedding (the style's exact text)."""
        head, relation, _ = triple
        examples = self.examples_text(kg, triple)
        if self.style == "authors":
            text = AUTHORS_QUERY_LINES.format(
                head=kg.entity_names[head], head_description=kg.entity_descriptions[head], relation=kg.relation_names[relation]
            )
            return f"{examples}\n{text}" if examples else text
        line = QUERY_LINE.format(head=kg.entity_names[head], relation=kg.relation_names[relation])
        text = f"{examples}\n{line}" if examples else line
        return text + " " if self.query_trailing_space else text

    def query_context(self, kg: TextualKG, triple: tuple[int, int, int]) -> str:
        """What the likelihood probes (BEAR, LAMA) condition on: the query prompt ending at the comma.

        ``query_context + continuation(t)`` is the whole statement "... (h, r, t)".
        """
        prompt = self.query_prompt(kg, triple)
        return prompt[:-1] if self.query_trailing_space else prompt

    @property
    def prompt_special_tokens(self) -> str:
        """How DEER's prompts are tokenised (``deer.backends.tokenization``): the authors' package calls
        ``tokenizer(text)`` (its own special tokens; no BOS for GPT-2-style tokenizers), the
        paper style follows the project's BOS policy."""
        return "tokenizer" if self.style == "authors" else "bos"

    @property
    def query_prompt_is_context(self) -> bool:
        """True when the DEER query prompt is the likelihood probes' context (one shared pass)."""
        return not self.query_trailing_space

    @staticmethod
    def continuation(kg: TextualKG, tail: int) -> str:
        """What BEAR scores after the query context: " t_name)"."""
        return CONTINUATION.format(tail=kg.entity_names[tail])

    @staticmethod
    def tail_prompt(kg: TextualKG, entity: int) -> str:
        """The described-tail prompt; the same text in both styles."""
        return TAIL_TEMPLATE.format(name=kg.entity_names[entity], description=kg.entity_descriptions[entity])

    # -- bookkeeping ---------------------------------------------------------------------------

    def to_metadata(self) -> dict:
        if self.style == "authors":
            query_line = AUTHORS_QUERY_LINES
        else:
            query_line = QUERY_LINE + (" " if self.query_trailing_space else "")
        return {
            **dataclasses.asdict(self),
            "example_line": EXAMPLE_LINE,
            "query_line": query_line,
            "query_layout": "example lines joined by '\\n', then '\\n' + query_line (no examples: query_line alone)",
            "shot_sampling": SHOT_SAMPLING,
            "continuation": CONTINUATION,
            "tail_template": TAIL_TEMPLATE,
            "prompt_special_tokens": self.prompt_special_tokens,
        }

    def tail_template_key(self) -> str:
        """Identifies the tail prompts' text and tokenisation, for the entity-embedding cache key.

        Both styles share one tail text; they share entity embeddings where they also tokenise
        alike (a tokenizer that adds BOS by itself), never otherwise.
        """
        return hashlib.sha256(f"{TAIL_TEMPLATE}|{self.prompt_special_tokens}".encode()).hexdigest()[:12]

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_metadata(), sort_keys=True).encode()).hexdigest()[:12]


def query_prompts(queries, templates: PromptTemplates) -> list[str]:
    """DEER query texts, one per query of a QuerySet (few-shot examples + open query line)."""
    return [templates.query_prompt(queries.kg, tuple(triple)) for triple in queries.triples.tolist()]
