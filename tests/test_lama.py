"""LAMA first-token ranks equal a plain computation; each query's first token is split at its own context's boundary
(bug 12); DEER shares the query pass."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

import bear_ref
import deer
from bear_ref.lama_probe import LamaProbe, restrict_to_single_token, slot_first_tokens
from deer.backends import open_backend
from deer.backends.boundary import move_trailing_whitespace, split_statements
from deer.backends.models import open_model
from deer.backends.plain import plain_logprobs, statement_ids_and_start
from deer.backends.tokenization import token_ids
from deer.platform.result import find_ranks_table
from deer.platform.task_texts import kg_benchmark_task
from deer.platform.templates import PromptTemplates
from deer.probes import ProbeRequest
from experiments.cli import main
from kg_data import build_queries, load_kg
from kg_data.task import CandidateSet, ClozeQuery, Task
from tests.ranking_oracle import rank_of


def first_token_ids(tokenizer, task: Task) -> np.ndarray:
    """int64 (n_queries, n_candidates): each candidate's first token after each query's text (``slot_first_tokens``)."""
    keys, ids, _ = slot_first_tokens(tokenizer, task, range(len(task.queries)))
    return np.stack([ids[keys[i]] for i in range(len(task.queries))])

def _table(out):
    path = find_ranks_table(out)
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


@torch.inference_mode()
def plain_lama_ranks(model, tokenizer, queries, templates):
    """One full forward pass per query; the first continuation token located by character offsets."""
    kg = queries.kg
    ranks = []
    for q, triple in enumerate(queries.triples.tolist()):
        context = templates.query_context(kg, tuple(triple))
        logits = model(input_ids=torch.tensor([token_ids(tokenizer, context)])).logits[0, -1]
        logprobs = torch.log_softmax(logits, -1)
        scores = []
        for t in queries.candidates:
            ids, start = statement_ids_and_start(tokenizer, context, templates.continuation(kg, t))
            scores.append(float(logprobs[ids[start]]))
        ranks.append(rank_of(np.asarray(scores), queries.gold[q], queries.filter_tails[q]))
    return np.asarray(ranks)


@pytest.fixture()
def tiny_setup(tiny_kg_dir, tiny_clm_dir):
    kg = load_kg(str(tiny_kg_dir))
    return build_queries(kg, "test"), open_model(str(tiny_clm_dir)), PromptTemplates(k_shot=2)


def test_lama_ranks_equal_plain(tiny_setup, tmp_path):
    queries, loaded, templates = tiny_setup
    result = bear_ref.lama(queries, loaded, templates=templates, out=tmp_path / "out", show_progress=False)
    table = _table(tmp_path / "out")
    np.testing.assert_allclose(table["lama_rank_filtered"], plain_lama_ranks(loaded.model, loaded.tokenizer, queries, templates))
    np.testing.assert_array_equal(result.ranks("filtered"), table["lama_rank_filtered"])
    assert result.metrics["n"] == result.metrics["filtered/n"] == len(queries)


def test_first_token_is_the_whole_statement_token(tiny_setup):
    queries, loaded, templates = tiny_setup
    ids = first_token_ids(loaded.tokenizer, kg_benchmark_task(queries, templates))
    assert ids.shape == (len(queries), len(queries.candidates))
    for row in ids:  # every query's
        for t, first in zip(queries.candidates, row, strict=True):
            assert first == loaded.tokenizer(" " + queries.kg.entity_names[t], add_special_tokens=False)["input_ids"][0]


def test_single_token_restriction(tiny_setup):
    queries, loaded, _ = tiny_setup
    restricted = restrict_to_single_token(queries, loaded.tokenizer)
    tok = loaded.tokenizer
    names = [queries.kg.entity_names[e] for e in restricted.candidates]
    assert all(len(tok(" " + n, add_special_tokens=False)["input_ids"]) == 1 for n in names)
    assert (restricted.candidates[restricted.gold] == restricted.triples[:, 2]).all()
    for f in restricted.filter_tails:
        assert (f >= 0).all() and (f < len(restricted.candidates)).all()


def test_kg_tail_tokens_are_counted_where_the_tail_stands_on_a_legacy_sentencepiece_tokenizer(tiny_kg_dir):
    """Llama-2's legacy SentencePiece: " Rome" alone is ['▁', '▁Rome']; after the query's comma the statement has
    '▁Rome', one token.  The ranks table's tail_tokens counted one token more for every tail, and LAMA's single_token
    on a KG kept no candidate at all."""

    from deer.backends.boundary import split_statements
    from deer.platform.kg_result import query_frame
    from tests.toy_tokenizers import sentencepiece_tokenizer

    tok = sentencepiece_tokenizer()
    kg = load_kg(str(tiny_kg_dir))
    names = list(kg.entity_names)
    names[2], names[3], names[7], names[9] = "Rome", "France", "capital", "Paris"
    queries = build_queries(dataclasses.replace(kg, entity_names=names), "test")
    templates = PromptTemplates(k_shot=0)
    in_statement = [len(split_statements(tok, templates.query_context(queries.kg, tuple(t)),
                                         [templates.continuation(queries.kg, t[2])[:-1]]).continuation_ids[0])
                    for t in queries.triples.tolist()]
    assert query_frame(queries, tok)["tail_tokens"].tolist() == in_statement == [1, 2, 1, 2]
    restricted = restrict_to_single_token(queries, tok)
    assert sorted(names[e] for e in restricted.candidates) == ["France", "Rome", "capital"]
    assert [names[t] for t in restricted.triples[:, 2]] == ["capital", "France"]


def test_kg_tail_tokens_on_byte_level_bpe_are_as_before(tiny_setup):
    """SmolLM2's byte-level BPE (the tiny causal model's): every name's count is the tokens of " name", as before."""
    from deer.platform.kg_result import tail_token_lengths

    tok = tiny_setup[1].tokenizer
    pieces = tok.convert_ids_to_tokens(list(range(0, len(tok), 7)))
    names = [tok.convert_tokens_to_string([p]) for p in pieces] + ["united states", "New York", "1999", "'s", "", "a-b"]
    before = [len(ids) for ids in tok([" " + n for n in names], add_special_tokens=False)["input_ids"]]
    assert tail_token_lengths(tok, names).tolist() == before


def test_lama_with_deer_shares_the_query_pass(tiny_setup, tmp_path):
    queries, loaded, templates = tiny_setup
    out = tmp_path / "out"
    lama = bear_ref.lama(queries, loaded, templates=templates, out=out, show_progress=False)
    shared = deer.probe(lama.queries, loaded, templates=templates, out=out, show_progress=False,
                        query_embeddings=lama.arrays["query_embeddings"])
    # The vectors LAMA's pass hands over are DEER's own query embeddings.
    own = deer.probe(queries, loaded, templates=templates, show_progress=False)
    np.testing.assert_allclose(shared.arrays["query_embeddings"], own.arrays["query_embeddings"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(shared.ranks(), own.ranks())
    metadata = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert metadata["deer"]["cache"]["queries_encoded_now"] == 0  # taken from LAMA's pass
    assert metadata["lama"]["work"]["prompts"] == len(queries)
    assert {"lama_rank_raw", "deer_rank_raw"} <= set(_table(tmp_path / "out").columns)


def test_cli_lama(tiny_kg_dir, tiny_clm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(main, ["probe", "--probe", "lama,deer", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir), "--k-shot",
                                       "2", "--no-cache", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "lama" in result.output and "deer" in result.output


# -- LAMA splits each query's first token at its own context's boundary (bug 12) -------------------


CONTEXTS = ["(paris, capital of, Fran", "(oak, hypernym,", "(berlin, capital of,\nFran", "(x, y, z", "Fran"]
CONTINUATIONS = ["ce)", "kfurt)", " x)", "cis)", "s)"]


def contexts_task(contexts, continuations) -> Task:
    """Query i is context i, its answers the continuations (``context + continuation`` its statements): contexts that
    end mid-word, where a token can straddle the boundary; contexts 0 and 2 end in the same word after a different
    whitespace character."""
    queries = [ClozeQuery("test", "r", f"f{i}", i, "template", 0, context + "[Y]", "", continuations[0], "set", 0)
               for i, context in enumerate(contexts)]
    return Task("contexts", queries, {"set": CandidateSet(tuple(continuations))}, {})


def slot_split(tokenizer, context: str, continuations):
    """The split LAMA reads a query's first tokens by: its text right-stripped, the whitespace before each answer."""
    stripped = context.rstrip()
    return split_statements(tokenizer, stripped, [context[len(stripped):] + c for c in continuations])


def test_lama_splits_each_query_at_its_own_context(tokenizer):
    """Bug 12: the first token was split against the first query's context only (and then once per last
    word, which misses the whitespace before it)."""
    ids = first_token_ids(tokenizer, contexts_task(CONTEXTS, CONTINUATIONS))
    for q, context in enumerate(CONTEXTS):
        expected = [first[0] for first in split_statements(tokenizer, context, CONTINUATIONS).continuation_ids]
        assert ids[q].tolist() == expected, context
    assert ids[0].tolist() != ids[1].tolist()  # the straddling context really differs
    assert ids[0].tolist() != ids[2].tolist()  # and so does the whitespace before the same last word


def test_first_tokens_equal_a_split_per_context(tokenizer):
    """Grouping queries by ``boundary_region`` gives every query the split of its own context (seeded
    random contexts of words, digits, punctuation and whitespace of every kind)."""
    rng = random.Random(0)
    words = ["Fran", "x", "(paris,", "of,", "12", "!!", "\x1f", "é", "ce", "'s"]
    spaces = ["", " ", "  ", "\n", "\t", "\xa0", " \n", "\r\n"]
    contexts = sorted({"".join(rng.choice(spaces) + rng.choice(words) for _ in range(rng.randint(1, 3))) + rng.choice(["", "", " "])
                       for _ in range(300)})
    contexts = [context for context in contexts if context.strip()]  # a blank text is a fill-in-the-blank query's
    continuations = ["ce)", "s)", " x)", "45)", "'s)", "\nfoo)", "\x1fz)"]
    task = contexts_task(contexts, continuations)
    keys, ids, drops = slot_first_tokens(tokenizer, task, range(len(contexts)))
    assert len(ids) < len(contexts)  # queries do share splits
    for q, context in enumerate(contexts):
        split = slot_split(tokenizer, context, continuations)
        assert ids[keys[q]].tolist() == [first[0] for first in split.continuation_ids], repr(context)
        assert drops[keys[q]].tolist() == [len(split.context_ids) - n for n in split.shared_lengths], repr(context)


@torch.inference_mode()
def whole_statement_first_token_logprob(model, tokenizer, context: str, continuation: str) -> float:
    """One forward pass over the whole statement: log p of its first token touching the continuation,
    as split for this context alone, after the statement's tokens before it."""
    split = split_statements(tokenizer, context, [continuation])
    shared = split.shared_lengths[0]
    ids = split.context_ids[:shared] + split.continuation_ids[0]
    stripped, moved = move_trailing_whitespace(context, continuation)
    assert ids == token_ids(tokenizer, stripped + moved)
    return float(plain_logprobs(model, ids)[shared - 1, ids[shared]])


@pytest.mark.parametrize("backend", ["hf", "plain"])
def test_lama_scores_equal_the_whole_statement_first_token(tiny_clm_dir, backend):
    """Bug 12: every query's scores are its own statements' first-token log-probabilities, also where
    that token straddles the query's end (it then follows the statement's tokens, not the context's)."""
    loaded = open_model(str(tiny_clm_dir))
    request = ProbeRequest(contexts_task(CONTEXTS, CONTINUATIONS), loaded, open_backend(backend, loaded, show_progress=False),
                           None, show_progress=False, options={"single_token": False})
    result = LamaProbe().score(request)
    expected = [[whole_statement_first_token_logprob(loaded.model, loaded.tokenizer, context, continuation)
                 for continuation in CONTINUATIONS] for context in CONTEXTS]
    np.testing.assert_allclose(np.stack([result.scores[q] for q in range(len(CONTEXTS))]), expected, rtol=0, atol=1e-4)
    assert result.metadata["straddling_prefixes"] > 0  # the second pass did run


def test_lama_reads_a_kg_query_prompt_ending_in_a_space_after_its_context_and_hands_deer_nothing(tiny_kg_dir, tiny_clm_dir):
    """LAMA's probe, called on a KG task whose DEER prompts end in ', ' (the authors' style, which a run refuses
    before loading), still reads each first token after the text it split the statement at, so its scores equal the
    paper style's (whose prompt is that text); the vectors of those texts are not DEER's prompts' and are not handed on."""
    loaded = open_model(str(tiny_clm_dir))
    queries = build_queries(load_kg(tiny_kg_dir), "test")
    backend = open_backend("hf", loaded, show_progress=False)
    answers = {}
    for space in (False, True):
        task = kg_benchmark_task(queries, PromptTemplates(k_shot=1, query_trailing_space=space))
        answers[space] = LamaProbe().score(ProbeRequest(task, loaded, backend, None, show_progress=False,
                                                        options={"single_token": False}))
    for q in range(len(queries)):
        np.testing.assert_array_equal(answers[True].scores[q], answers[False].scores[q])
    assert "query_embeddings" in answers[False].arrays and "query_embeddings" not in answers[True].arrays
