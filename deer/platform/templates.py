"""The DEER prompt templates: the paper's (examples resampled per query) or, byte for byte, the DEER authors'
``deer-probe`` 0.1.1's (one shared few-shot block); the tail prompt (PromptEOL) is the same in both.

A query's examples never include a train triple with its head and relation's names (two WN18RR synsets are named
"tyrannize": one's train triple is the other's test answer); they are drawn by ids' text, never by file position.
``query_context`` ends at the comma, since a statement "(h, r, t)" tokenises the space with the tail.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json

import numpy as np
import pyarrow.compute as pc

from deer.base.errors import check_count, check_flag, check_text
from kg_data.kg import TextualKG
from kg_data.text_column import as_arrow

EXAMPLE_LINE = "({head}, {relation}, {tail})"
QUERY_LINE = "({head}, {relation},"
# deer-probe 0.1.1, deer/prompt_templates.py, query2prompts (entity_id2definition given):
#   text = f'''{head_entity} - {definition}\n({head_entity}, {relation}, '''
#   if fewshot_prompt: text = f'''{fewshot_prompt}\n{text}'''
AUTHORS_QUERY_LINES = "{head} - {head_description}\n({head}, {relation}, "
CONTINUATION = " {tail})"
# The PromptEOL text for a candidate without a description (the BEAR and LAMA data sets).
NAME_TAIL_TEMPLATE = 'This sentence: "{{word}}" means in one word: "{{one word}}"\nThis sentence: "{name}" means in one word: "'
TAIL_TEMPLATE = "{name} - {description}\n" + NAME_TAIL_TEMPLATE
SHOT_MODES = ("per-query", "shared")
STYLES = ("paper", "authors")
# Recorded in the metadata (and so in every cache key): change it whenever the examples a query
# gets change, so embeddings stored under the old rule are never reused.
SHOT_SAMPLING = ("v4: train triples with the query's (head, relation) excluded, compared by name (head name, relation name), "
                 "in order of their (head id, relation id, tail id) text (v3: of their lines); "
                 "per-query: k drawn by default_rng([seed, head, relation]), head and relation as blake2b-64 codes of their ids "
                 "(v3: their file positions); "
                 "shared: first k of default_rng([seed]).permutation(n_train)")
# What each style implies when shots / query_trailing_space are not given.
STYLE_DEFAULTS = {"paper": ("per-query", False), "authors": ("shared", True)}


@functools.lru_cache(maxsize=8)
def candidate_prompt(label: str, description: str | None = None) -> str:
    """DEER's prompt for a benchmark's answer, with its description where it has one."""
    return TAIL_TEMPLATE.format(name=label, description=description) if description else NAME_TAIL_TEMPLATE.format(name=label)


def candidate_prompts(candidates, rows=None) -> list[str]:
    """DEER's prompt for every answer of a benchmark's candidate set (for those at ``rows`` only, where given)."""
    descriptions = candidates.descriptions or (None,) * len(candidates)
    if len(descriptions) != len(candidates.labels):  # one description per label, or none
        raise ValueError(f"{len(descriptions)} descriptions for {len(candidates.labels)} answer labels")
    rows = range(len(candidates)) if rows is None else rows
    return [candidate_prompt(candidates.labels[i], descriptions[i]) for i in rows]


@dataclasses.dataclass(frozen=True)
class PromptTemplates:
    """How query and tail prompts are built; recorded in every run's metadata.  ``shots`` ("per-query" or
    "shared") and ``query_trailing_space`` default to the ``style``'s (``STYLE_DEFAULTS``)."""

    k_shot: int = 8
    shots: str | None = None
    seed: int = 0
    query_trailing_space: bool | None = None
    style: str = "paper"

    def __post_init__(self):
        check_text("style", self.style, STYLES)
        check_text("shots", self.shots, SHOT_MODES, allow_none=True)
        space = check_flag("query_trailing_space", self.query_trailing_space, allow_none=True)  # "false" would be read as true
        default_shots, default_space = STYLE_DEFAULTS[self.style]
        object.__setattr__(self, "shots", default_shots if self.shots is None else self.shots)
        object.__setattr__(self, "query_trailing_space", default_space if space is None else space)
        # as the keywords are: seed=1.5 would run as 1; numpy's integers kept as Python's (the metadata is JSON)
        object.__setattr__(self, "k_shot", check_count("k_shot", self.k_shot, 0))
        object.__setattr__(self, "seed", check_count("seed", self.seed, 0))
        if self.style == "authors" and self.shots != "shared":
            raise ValueError("the authors' template style uses one few-shot set for all queries (shots='shared'), "
                             "as deer-probe 0.1.1 does; per-query examples are the paper style")
        if self.style == "authors" and not self.query_trailing_space:
            raise ValueError("the authors' template style ends the query with ', ' (deer-probe 0.1.1); "
                             "a query ending at the comma is the paper style")

    @staticmethod
    def example_line(kg: TextualKG, head: int, relation: int, tail: int) -> str:
        return EXAMPLE_LINE.format(head=kg.entity_names[head], relation=kg.relation_names[relation], tail=kg.entity_names[tail])

    def example_rows(self, kg: TextualKG, triple: tuple[int, int, int]) -> np.ndarray:
        """Rows of the train split used as examples for this query."""
        train = kg.splits.get("train")
        if train is None or len(train) == 0 or self.k_shot == 0:
            return np.zeros(0, dtype=np.int64)
        keys, order, content = _train_pair_index(kg)
        key = int(_pair_keys(kg, np.asarray([triple[0]]), np.asarray([triple[1]]))[0])
        # the places (in content order) of the train rows showing the query's own (h, r) names, ascending
        excluded = order[np.searchsorted(keys, key, "left"):np.searchsorted(keys, key, "right")]
        k = min(self.k_shot, len(train) - len(excluded))
        if self.shots == "shared":
            candidates = _shared_order(int(self.seed), len(train))[: k + len(excluded)]
            places = candidates[~np.isin(candidates, excluded)][:k]
        else:
            head, relation = _id_code(kg.entity_ids[triple[0]]), _id_code(kg.relation_ids[triple[1]])
            rng = np.random.default_rng([int(self.seed), head, relation])
            positions = rng.choice(len(train) - len(excluded), size=k, replace=False)
            # the positions-th eligible place: skip every excluded place at or before it
            places = positions + np.searchsorted(excluded - np.arange(len(excluded)), positions, side="right")
        return np.asarray(content[places], dtype=np.int64)

    def examples_used(self, kg: TextualKG, triples: np.ndarray) -> np.ndarray:
        """int64 (n,): how many examples each query's prompt holds, without drawing them."""
        triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        train = kg.splits.get("train")
        if train is None or len(train) == 0 or self.k_shot == 0:
            return np.zeros(len(triples), dtype=np.int64)
        keys = _train_pair_index(kg)[0]
        query_keys = _pair_keys(kg, triples[:, 0], triples[:, 1])
        same_pair = np.searchsorted(keys, query_keys, "right") - np.searchsorted(keys, query_keys, "left")
        return np.minimum(self.k_shot, len(train) - same_pair).astype(np.int64)

    def examples_text(self, kg: TextualKG, triple: tuple[int, int, int]) -> str:
        """The few-shot block: one example line per row, joined by newlines ("" for none)."""
        train = kg.splits.get("train")
        return "\n".join(self.example_line(kg, *train[row].tolist()) for row in self.example_rows(kg, triple))

    def query_prompt(self, kg: TextualKG, triple: tuple[int, int, int]) -> str:
        """Text whose last-token state is the DEER query embedding (the style's exact text)."""
        head, relation, _ = triple
        examples = self.examples_text(kg, triple)
        line = self._query_line().format(head=kg.entity_names[head], head_description=kg.entity_descriptions[head],
                                         relation=kg.relation_names[relation])
        return f"{examples}\n{line}" if examples else line

    def _query_line(self) -> str:
        return AUTHORS_QUERY_LINES if self.style == "authors" else QUERY_LINE + (" " if self.query_trailing_space else "")

    def query_context(self, kg: TextualKG, triple: tuple[int, int, int]) -> str:
        """What BEAR and LAMA condition on: the query prompt ending at the comma (+ ``continuation(t)``: the statement)."""
        prompt = self.query_prompt(kg, triple)
        return prompt[:-1] if self.query_trailing_space else prompt

    @property
    def prompt_special_tokens(self) -> str:
        """The authors' package calls ``tokenizer(text)`` (its own special tokens); the paper style, the BOS policy."""
        return "tokenizer" if self.style == "authors" else "bos"

    @staticmethod
    def continuation(kg: TextualKG, tail: int) -> str:
        """What BEAR scores after the query context: " t_name)"."""
        return CONTINUATION.format(tail=kg.entity_names[tail])

    @staticmethod
    def tail_prompt(kg: TextualKG, entity: int) -> str:
        """The described-tail prompt; the same text in both styles."""
        return TAIL_TEMPLATE.format(name=kg.entity_names[entity], description=kg.entity_descriptions[entity])

    def to_metadata(self) -> dict:
        return {**dataclasses.asdict(self), "example_line": EXAMPLE_LINE, "query_line": self._query_line(),
                "query_layout": "example lines joined by '\\n', then '\\n' + query_line (no examples: query_line alone)",
                "shot_sampling": SHOT_SAMPLING, "continuation": CONTINUATION, "tail_template": TAIL_TEMPLATE,
                "prompt_special_tokens": self.prompt_special_tokens}

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_metadata(), sort_keys=True).encode()).hexdigest()[:12]


def _id_code(item_id: str) -> int:
    """A 64-bit code of an id's text (a reordered entities.tsv must change no prompt)."""
    return int.from_bytes(hashlib.blake2b(item_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


@functools.lru_cache(maxsize=2)
def _shared_order(seed: int, n_train: int) -> np.ndarray:
    return np.random.default_rng([seed]).permutation(n_train)


def _name_codes(kg: TextualKG) -> tuple[np.ndarray, np.ndarray]:
    """int64 codes of each entity's and each relation's name (equal names, equal codes), made once per KG's names."""
    cached = kg.__dict__.get("_name_codes")
    if cached is None or cached[0] is not kg.entity_names or cached[1] is not kg.relation_names:
        entity_codes = pc.dictionary_encode(as_arrow(kg.entity_names)).indices.to_numpy(zero_copy_only=False)
        relation_code = {name: i for i, name in enumerate(dict.fromkeys(kg.relation_names))}
        cached = kg.__dict__["_name_codes"] = (kg.entity_names, kg.relation_names, entity_codes.astype(np.int64),
                                               np.asarray([relation_code[name] for name in kg.relation_names], np.int64))
    return cached[2], cached[3]


def _pair_keys(kg: TextualKG, heads: np.ndarray, relations: np.ndarray) -> np.ndarray:
    """One int64 key per (head, relation), equal where the prompt shows the same "(head name, relation name," text."""
    entity_codes, relation_codes = _name_codes(kg)
    return entity_codes[heads] * max(kg.n_relations, 1) + relation_codes[relations]


def _train_pair_index(kg: TextualKG) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sorted (head, relation) name keys of the train rows, their places, the content order by ids' text), per KG."""
    train, entity_codes = kg.splits["train"], _name_codes(kg)[0]
    cached = kg.__dict__.get("_train_pair_index")
    if cached is None or cached[0] is not train or cached[1] is not entity_codes:
        entity_rank, relation_rank = _text_ranks(kg.entity_ids), _text_ranks(kg.relation_ids)
        content = np.lexsort((entity_rank[train[:, 2]], relation_rank[train[:, 1]], entity_rank[train[:, 0]]))
        keys = _pair_keys(kg, train[content, 0], train[content, 1])
        order = np.argsort(keys, kind="stable")
        cached = kg.__dict__["_train_pair_index"] = (train, entity_codes, keys[order], order, content)
    return cached[2], cached[3], cached[4]


def _text_ranks(texts) -> np.ndarray:
    ranks = np.empty(len(texts), np.int64)
    ranks[pc.sort_indices(as_arrow(texts)).to_numpy()] = np.arange(len(texts))
    return ranks


def query_prompts(queries, templates: PromptTemplates) -> list[str]:
    """DEER query texts, one per query of a QuerySet (few-shot examples + open query line)."""
    return [templates.query_prompt(queries.kg, tuple(triple)) for triple in queries.triples.tolist()]
