"""The BEAR length guard (deer/platform/length_guard.py): it counts tokens, not bytes (bug 9), and each probe hands
it exactly the texts it feeds the model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from deer.backends import open_backend
from deer.backends.models import as_loaded_model
from deer.platform.cloze_texts import deer_query_text
from deer.platform.length_guard import LengthCheck, PromptTooLongError, guard_lengths
from deer.platform.task_texts import kg_benchmark_task
from deer.platform.templates import PromptTemplates
from deer.probes import get_probe
from deer.runner import run_probe
from kg_data.cloze import statement
from kg_data.load import load_kg
from kg_data.queries import build_queries, queries_for

FEW_TOKENS_MANY_BYTES = "internationalization" * 3  # 60 bytes, 6 tokens for SmolLM2
MANY_TOKENS_FEW_BYTES = "\U0001d518" * 4  # 16 bytes, 13 tokens for SmolLM2


def test_the_statement_guard_finds_the_longest_continuation_in_tokens(tiny_kg_dir, tokenizer):
    """Bug 9: the guard took the longest continuation by UTF-8 bytes, so a short name of many tokens
    passed while its statement ran past the model's positions."""
    from transformers import LlamaConfig, LlamaForCausalLM

    kg = load_kg(tiny_kg_dir)
    names = list(kg.entity_names)
    names[2], names[3] = FEW_TOKENS_MANY_BYTES, MANY_TOKENS_FEW_BYTES
    queries = build_queries(dataclasses.replace(kg, entity_names=names), "test")
    templates = PromptTemplates(k_shot=0)
    continuation = [len(tokenizer(templates.continuation(queries.kg, e), add_special_tokens=False)["input_ids"]) for e in (2, 3)]
    assert continuation[0] < continuation[1] and len(FEW_TOKENS_MANY_BYTES.encode()) > len(MANY_TOKENS_FEW_BYTES.encode())
    context = max(len(tokenizer(templates.query_context(queries.kg, tuple(t)))["input_ids"]) for t in queries.triples.tolist())
    # Room for the byte-longest name's statement, not for the token-longest one's.
    limit = context + 2 + continuation[0] + 2
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, max_position_embeddings=limit)).eval()
    backend = open_backend("hf", (model, tokenizer))
    with pytest.raises(PromptTooLongError, match="longest statement"):
        guard_lengths(kg_benchmark_task(queries, templates), [get_probe("bear")], backend, templates)
    guard_lengths(kg_benchmark_task(queries, templates), [get_probe("lama")], backend, templates)  # the query texts alone fit


def test_the_statement_guard_takes_no_candidates(tiny_kg_dir, tiny_clm):
    """Tokenising the continuations in one batch must not trip on an empty one (a fast tokenizer refuses it)."""
    kg = load_kg(tiny_kg_dir)
    empty = queries_for(kg, "test", np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64))
    templates = PromptTemplates(k_shot=0)
    checked, report = guard_lengths(kg_benchmark_task(empty, templates), [get_probe("bear")], open_backend("hf", tiny_clm), templates)
    assert checked.texts.queries is empty and report.max_positions == tiny_clm[0].config.max_position_embeddings


class FewerPositions:
    """A backend with ``limit`` positions, answering everything else as ``backend`` does."""

    def __init__(self, backend, limit: int):
        self._backend, self.max_positions = backend, limit

    def __getattr__(self, name):
        return getattr(self._backend, name)


def _refusal(task, probe: str, backend, limit: int, templates=None) -> str | None:
    """The guard's message for ``probe`` on ``task`` with ``limit`` positions (None: everything fits)."""
    try:
        guard_lengths(task, [get_probe(probe)], FewerPositions(backend, limit), templates)
    except PromptTooLongError as error:
        return str(error)
    return None


def test_each_probe_hands_the_guard_exactly_the_texts_it_feeds_on_a_kg(tiny_kg_dir, tiny_clm):
    """On a KG: DEER its tail prompts (one made longest by a description no other probe reads) and query
    prompts, LAMA its query texts, BEAR its statements (the query text with the longest continuation): each fits at its own longest text's length and is refused one below it,
    naming that many tokens, whatever the other probes feed."""
    kg = load_kg(tiny_kg_dir)
    descriptions = [*kg.entity_descriptions[:2], "a living organism " * 20, *kg.entity_descriptions[3:]]  # DEER's alone
    queries = build_queries(dataclasses.replace(kg, entity_descriptions=descriptions), "test")
    templates = PromptTemplates(k_shot=4)
    kg, special = queries.kg, templates.prompt_special_tokens
    backend = open_backend("hf", tiny_clm)
    triples = [tuple(t) for t in queries.triples.tolist()]
    contexts = backend.token_counts([templates.query_context(kg, t) for t in triples], "bos")
    continuations = backend.tokenizer([templates.continuation(kg, e) for e in queries.candidates], add_special_tokens=False)["input_ids"]
    longest = {
        "deer": max(backend.token_counts([templates.tail_prompt(kg, e) for e in queries.candidates.tolist()]
                                         + [templates.query_prompt(kg, t) for t in triples], special)),
        "lama": max(backend.token_counts([templates.query_context(kg, t) for t in triples], special)),
        "bear": max(contexts) + max(len(ids) for ids in continuations),
    }
    assert len(set(longest.values())) == 3  # three different limits: a probe checking another's texts would show
    task = kg_benchmark_task(queries, templates)
    for probe, n in longest.items():
        assert _refusal(task, probe, backend, n, templates) is None
        assert f"is {n} tokens, more than the model's {n - 1} positions" in _refusal(task, probe, backend, n - 1, templates), probe


def test_lama_hands_the_guard_its_masked_sentences_and_whole_statements_on_a_benchmark(tmp_path, tiny_clm):
    """On LAMA: a masked LM's masked sentences (with its [CLS] and [SEP]); on a causal LM the query texts and,
    for a template whose answer is not the last word ("[X] is a [Y] by profession ."), the whole statements."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    from deer.platform.cloze_texts import lama_rules, mask_sentence
    from kg_data.cloze import lama_cloze_task, statement
    from kg_data.lama import load_lama
    from tests.benchmark_folders import write_lama

    data = load_lama(write_lama(tmp_path / "lama"))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris", "london", "actor", "lawyer", "was", "born", "in", "."]
    bert_tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    bert = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32)).eval()
    masked_backend = open_backend("hf", (bert, bert_tokenizer))
    masked_task = lama_cloze_task(data, ["Paris", "London", "actor", "lawyer"], causal=False)
    n = max(masked_backend.token_counts([mask_sentence(bert_tokenizer, q) for q in masked_task.queries], "tokenizer"))
    assert _refusal(masked_task, "lama", masked_backend, n) is None
    assert f"its masked sentence is {n} tokens" in _refusal(masked_task, "lama", masked_backend, n - 1)

    backend = open_backend("hf", tiny_clm)
    task = lama_cloze_task(data, ["Paris", "London", "actor", "lawyer"], modes=["template"], candidate_kinds=["relation"])
    rows = [i for i, rule in enumerate(lama_rules(task, False)) if rule == "statement"]
    assert rows and {task.queries[i].relation for i in rows} == {"P106"}
    labels = task.candidate_sets[task.queries[rows[0]].candidates].labels
    whole = max(backend.token_counts([statement(task.queries[i], label) for i in rows for label in labels], "bos"))
    assert whole > max(backend.token_counts([deer_query_text(q) for q in task.queries], "bos"))
    assert _refusal(task, "lama", backend, whole) is None
    assert f"its longest statement is {whole} tokens" in _refusal(task, "lama", backend, whole - 1)


def test_a_masked_sentence_an_nfkc_normaliser_lengthens_is_counted_as_fed(tmp_path):
    """The guard tokenised only texts whose UTF-8 bytes + SLACK exceed the model's positions; an NFKC normaliser (XLM-R's,
    ALBERT's) feeds a ligature's compatibility form (U+FDFA, 3 bytes, is 18 letters), so a masked sentence of several
    times the positions in tokens passed the guard and failed in the forward pass.  It is refused now, as many tokens as fed."""
    from tokenizers import normalizers
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    from deer.platform.cloze_texts import mask_sentence
    from deer.platform.length_guard import SLACK
    from kg_data.cloze import lama_cloze_task
    from kg_data.lama import load_lama
    from tests.benchmark_folders import write_lama

    arabic = [piece for c in range(0x621, 0x64b) for piece in (chr(c), "##" + chr(c))]  # a letter a token
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris", "london", "was", "born", "in", ".", *arabic]
    tok = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    tok.backend_tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), tok.backend_tokenizer.normalizer])
    task = lama_cloze_task(load_lama(write_lama(tmp_path / "lama")), ["Paris", "London"], modes=["template"],
                           candidate_kinds=["relation"], causal=False)
    task.queries[0] = dataclasses.replace(task.queries[0], subject="\ufdfa " * 12)
    sentences = [mask_sentence(tok, q) for q in task.queries]
    fed = [len(ids) for ids in tok(sentences)["input_ids"]]  # what the mask filler feeds
    fits_in_bytes = max(len(s.encode("utf-8")) for s in sentences) + SLACK
    assert fed[0] > fits_in_bytes >= max(fed[1:])
    for limit in (fits_in_bytes, fed[0] - 1, fed[0]):
        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=32, max_position_embeddings=limit)).eval()
        backend = open_backend("hf", (model, tok))
        if limit < fed[0]:
            with pytest.raises(PromptTooLongError, match=f"its masked sentence is {fed[0]} tokens, more than the model's {limit}"):
                guard_lengths(task, [get_probe("lama")], backend)
        else:
            guard_lengths(task, [get_probe("lama")], backend)
            assert np.isfinite(backend.mask_filler().logprobs(sentences, np.arange(5, 7))).all()

def test_a_statement_is_counted_with_its_answer_in_place(tmp_path, tokenizer):
    """The guard counted a statement as its stem (the answer slot empty) plus the longest answer's tokens alone; SmolLM2's
    BPE has "Validator" as one token but " Validator" as three, so "Dora is a Validator by profession ." passed a model one
    position short and was scored past its positions.  Each statement that may not fit is counted whole now."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from deer.platform.cloze_texts import lama_rules
    from kg_data.cloze import lama_cloze_task, statement
    from kg_data.lama import load_lama
    from kg_data.task import CandidateSet
    from tests.benchmark_folders import write_lama

    task = lama_cloze_task(load_lama(write_lama(tmp_path / "lama")), ["Paris", "London", "actor", "lawyer"], modes=["template"],
                           candidate_kinds=["relation"])
    task = dataclasses.replace(task, queries=[q for q, rule in zip(task.queries, lama_rules(task, False), strict=True)
                                              if rule == "statement"])
    labels = ("actor", "Validator")
    task.candidate_sets["TREx/P106"] = CandidateSet(labels)
    assert {q.candidates for q in task.queries} == {"TREx/P106"}
    bos = 1  # the scorer's BOS policy: SmolLM2's tokenizer adds none itself
    fed = max(len(ids) + bos for ids in tokenizer([statement(q, label) for q in task.queries for label in labels])["input_ids"])
    alone = max(len(ids) for ids in tokenizer(list(labels))["input_ids"])
    assert max(len(ids) + bos for ids in tokenizer([statement(q, "") for q in task.queries])["input_ids"]) + alone < fed
    for limit in (fed - 1, fed):
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, max_position_embeddings=limit)).eval()
        backend = open_backend("hf", (model, tokenizer))
        if limit < fed:
            with pytest.raises(PromptTooLongError, match=f"its longest statement is {fed} tokens, more than the model's {limit}"):
                guard_lengths(task, [get_probe("lama")], backend)
        else:
            guard_lengths(task, [get_probe("lama")], backend)

def test_a_masked_lm_statement_is_counted_with_both_its_special_tokens(tiny_kg_dir, smollm2_dir):
    """PLL feeds a masked LM each statement with the tokenizer's own special tokens (<s> ... </s>); the guard counted
    a tokenizer that defines a BOS token as adding one, so a statement one token too long passed and then failed."""
    from transformers import BertConfig, BertForMaskedLM

    from tests.toy_tokenizers import roberta_style_tokenizer

    tok = roberta_style_tokenizer(smollm2_dir)
    queries, templates = build_queries(load_kg(tiny_kg_dir), "test"), PromptTemplates(k_shot=2)
    statements = [templates.query_context(queries.kg, tuple(t)) + templates.continuation(queries.kg, e)
                  for t in queries.triples.tolist() for e in queries.candidates]
    fed = max(len(ids) for ids in tok(statements)["input_ids"])
    for limit in (fed - 1, fed):
        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=32, pad_token_id=tok.pad_token_id, max_position_embeddings=limit)).eval()
        backend = open_backend("hf", (model, tok))
        task = kg_benchmark_task(queries, templates)
        if limit < fed:
            with pytest.raises(PromptTooLongError, match=f"longest statement is {fed} tokens, more than the model's {limit}"):
                guard_lengths(task, [get_probe("bear")], backend, templates)
        else:
            guard_lengths(task, [get_probe("bear")], backend, templates)
            assert np.isfinite(backend.statement_scorer("original").score_statements(statements)).all()


def test_a_roberta_model_holds_two_positions_fewer_than_its_config_states(tiny_kg_dir, smollm2_dir):
    """RoBERTa numbers positions from its padding id + 1 (roberta-base: 514 position embeddings, 512 tokens); the guard
    took max_position_embeddings as the limit, so a statement up to two tokens too long passed and then failed."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    from tests.toy_tokenizers import roberta_style_tokenizer

    tok = roberta_style_tokenizer(smollm2_dir)
    queries, templates = build_queries(load_kg(tiny_kg_dir), "test"), PromptTemplates(k_shot=2)
    statements = [templates.query_context(queries.kg, tuple(t)) + templates.continuation(queries.kg, e)
                  for t in queries.triples.tolist() for e in queries.candidates]
    fed = max(len(ids) for ids in tok(statements)["input_ids"])
    for embeddings in (fed, fed + 2):
        torch.manual_seed(0)
        model = RobertaForMaskedLM(RobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=32, pad_token_id=1, max_position_embeddings=embeddings)).eval()
        backend = open_backend("hf", (model, tok))
        assert backend.max_positions == embeddings - 2
        task = kg_benchmark_task(queries, templates)
        if embeddings == fed:
            with pytest.raises(PromptTooLongError, match=f"longest statement is {fed} tokens, more than the model's {fed - 2}"):
                guard_lengths(task, [get_probe("bear")], backend, templates)
        else:
            guard_lengths(task, [get_probe("bear")], backend, templates)
            assert np.isfinite(backend.statement_scorer("original").score_statements(statements)).all()


# -- the one guard on the texts a probe hands it ---------------------------------------------------


class LongWinded:
    """A probe feeding texts of its own kind: each query's statement said 400 times (more than the tiny
    model's 2048 positions).  It never scores: the run's one guard refuses it first."""

    name, summary, options = "longwinded", "repeats itself", {}

    def length_checks(self, task, templates, backend):
        texts = [" ".join([statement(q, q.answer)] * 400) for q in task.queries]
        yield LengthCheck.of("repeated statement", texts, lambda i: f"query {i} of {task.name}", "say it once")

    def score(self, request):
        raise AssertionError("scored although its texts do not fit")


def test_the_one_guard_checks_the_texts_a_probe_hands_it(monkeypatch, tiny_kg_dir, tiny_clm_dir, tiny_clm, tmp_path):
    """The guard knows no kind of text: a probe's own (``length_checks``) are counted through the backend and
    refused, named as the probe names them, on a KG run (API and CLI) and on a cloze run, before any scoring
    and before anything is written."""
    from click.testing import CliRunner

    import deer.probes
    from deer.runner import run_cloze
    from experiments.cli import main

    monkeypatch.setitem(deer.probes._REGISTERED, "longwinded", LongWinded)
    message = r"query 0 of tiny_kg: its repeated statement is \d+ tokens, more than the model's 2048 positions \(\d+ more too long\); say it once"
    with pytest.raises(PromptTooLongError, match=message):
        run_probe("longwinded", str(tiny_kg_dir), str(tiny_clm_dir), k_shot=0, show_progress=False, out=tmp_path / "api")
    result = CliRunner().invoke(main, ["probe", "--probe", "longwinded", "--kg", str(tiny_kg_dir), "--model", str(tiny_clm_dir),
                                       "--k-shot", "0", "--out", str(tmp_path / "cli")])
    assert result.exit_code == 1 and "its repeated statement is" in result.output, result.output
    task = dataclasses.replace(kg_benchmark_task(build_queries(load_kg(tiny_kg_dir), "test"), PromptTemplates(k_shot=0)),
                               known=None, texts=None)  # as a benchmark's task
    with pytest.raises(PromptTooLongError, match=message):
        run_cloze(task, as_loaded_model(tiny_clm), ["longwinded"], out=tmp_path / "cloze", show_progress=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tiny_kg"]  # no run folder was made
