"""`--template-style authors` against the DEER authors' own package, deer-probe 0.1.1.

The package is installed by scripts/install.sh into .peers/deer-probe (pip --target, with its
one dependency missing here, beartype).  Its top-level module is also named ``deer``, so it is
only ever run in a subprocess with PYTHONPATH=.peers/deer-probe (tests/deer_authors_peer.py).

Checked on 20 real WN18RR test queries: the query prompts (few-shot block, head definition line,
trailing space) and the tail prompts are byte-identical to the package's ``query2prompts`` /
``tail_entities2prompts``, and this project's PromptEOLEncoder gives the package's
``PromptEOL_Encoder`` vectors (last layer, last token) on a tiny random Llama.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from deer.platform.templates import PromptTemplates
from experiments.cli.options import kg_options, run_options_of, template_options
from experiments.cli.probes import prepare_queries

ROOT = Path(__file__).resolve().parents[1]
PEER_DIR = ROOT / ".peers" / "deer-probe"
PEER_HELPER = Path(__file__).with_name("deer_authors_peer.py")
N_QUERIES = 20

pytestmark = pytest.mark.skipif(
    not (PEER_DIR / "deer" / "prompt_templates.py").is_file(),
    reason="the DEER authors' package is not installed in .peers/deer-probe (scripts/install.sh: "
           "pip install --no-deps --target .peers/deer-probe deer-probe==0.1.1 beartype==0.23.1)",
)


def run_peer(job: dict, folder: Path) -> dict:
    """Run the authors' package on ``job`` in a subprocess (see tests/deer_authors_peer.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    job_path, out_path = folder / "peer_job.json", folder / "peer_out.json"
    job_path.write_text(json.dumps({"peer_dir": str(PEER_DIR), **job}), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(PEER_DIR), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(PEER_HELPER), str(job_path), str(out_path)],
                            cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"deer-probe failed:\n{result.stderr[-4000:]}"
    out = json.loads(out_path.read_text(encoding="utf-8"))
    assert Path(out["deer_file"]).resolve().is_relative_to(PEER_DIR.resolve())
    return out


def cli_setup(*args: str):
    """(kg, queries, templates) exactly as `deer probe ... ARGS` builds them (template options included)."""
    built = {}

    @click.command()
    @kg_options()
    @template_options
    def build(kg, **given):
        built["queries"], built["templates"] = prepare_queries(kg, run_options_of(given))
        built["kg"] = built["queries"].kg

    result = CliRunner().invoke(build, ["--kg", "wn18rr", "--split", "test", "--subset", str(N_QUERIES), *args])
    if result.exception is not None:
        from kg_data.errors import KGNotFoundError

        if isinstance(result.exception, KGNotFoundError):
            pytest.skip(f"WN18RR data not found: {result.exception}")
        raise result.exception
    return built["kg"], built["queries"], built["templates"]


def peer_query_job(kg, queries, fewshot_prompt: str) -> dict:
    """The package's inputs for these queries: id triplets, id -> name/definition maps, one few-shot string."""
    entities = sorted({e for h, _, t in queries.triples.tolist() for e in (h, t)})
    return {
        "triplets": [[kg.entity_ids[h], kg.relation_ids[r], kg.entity_ids[t]] for h, r, t in queries.triples.tolist()],
        "entity_id2text": {kg.entity_ids[e]: kg.entity_names[e] for e in entities},
        "relation_id2text": {kg.relation_ids[r]: kg.relation_names[r] for r in range(kg.n_relations)},
        "entity_id2definition": {kg.entity_ids[e]: kg.entity_descriptions[e] for e in entities},
        "fewshot_prompt": fewshot_prompt,
    }


def the_shared_examples(kg, queries, templates: PromptTemplates) -> str:
    """The one few-shot block every query shows (as the package takes it: one string)."""
    blocks = {templates.examples_text(kg, tuple(t)) for t in queries.triples.tolist()}
    assert len(blocks) == 1, "the authors' style shows one few-shot set to every query"
    return blocks.pop()


def test_authors_style_prompts_are_the_packages_byte_for_byte(tmp_path):
    settings = {"k8": ["--template-style", "authors"], "k0": ["--template-style", "authors", "--k-shot", "0"],
                "k3-seed1": ["--template-style", "authors", "--k-shot", "3", "--seed", "1"]}
    setups = {name: cli_setup(*args) for name, args in settings.items()}  # (kg, queries, templates)
    ours, query_jobs = {}, []
    for name, (kg, queries, templates) in setups.items():
        assert (templates.style, templates.shots, templates.query_trailing_space) == ("authors", "shared", True)
        fewshot = the_shared_examples(kg, queries, templates)
        assert (fewshot == "") == (templates.k_shot == 0)
        ours[name] = [templates.query_prompt(kg, tuple(t)) for t in queries.triples.tolist()]
        query_jobs.append(peer_query_job(kg, queries, fewshot))
    kg, queries, templates = setups["k8"]
    candidates = queries.candidates.tolist()
    tail_job = {"entities": [kg.entity_names[e] for e in candidates], "definitions": [kg.entity_descriptions[e] for e in candidates]}
    peer = run_peer({"query_jobs": query_jobs, "tail_jobs": [tail_job], "encode": None}, tmp_path)
    for name, peer_prompts in zip(settings, peer["query_prompts"], strict=True):
        assert ours[name] == peer_prompts, name
        assert all(p.endswith(", ") and "\n\n" not in p for p in peer_prompts)
    assert [PromptTemplates.tail_prompt(kg, e) for e in candidates] == peer["tail_prompts"][0]
    # The likelihood probes' context (BEAR, LAMA) is the same text up to the comma.
    assert [templates.query_context(kg, tuple(t)) + " " for t in queries.triples.tolist()] == peer["query_prompts"][0]


def tiny_model(folder: Path, texts: list[str], tokenizer_adds_bos: bool) -> Path:
    """A 2-layer random Llama with a byte-level BPE tokenizer trained on ``texts``, saved to ``folder``.

    ``tokenizer_adds_bos``: whether ``tokenizer(text)`` (add_special_tokens=True, what the package
    calls) prepends BOS, as Llama/OPT tokenizers do, or not, as GPT-2/SmolLM2 tokenizers do.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    if tokenizer_adds_bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                        model_input_names=["input_ids", "attention_mask"])
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def relative_errors(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    return np.linalg.norm(ours - theirs, axis=1) / np.linalg.norm(theirs, axis=1)


@pytest.mark.parametrize("tokenizer_adds_bos", [True, False], ids=["tokenizer-adds-bos", "tokenizer-adds-no-bos"])
def test_embeddings_match_the_packages_encoder(tmp_path, tokenizer_adds_bos):
    from deer.backends.encoder import PromptEOLEncoder
    from deer.backends.models import load_model
    from deer.backends.tokenization import token_ids

    kg, queries, templates = cli_setup("--template-style", "authors")
    prompts = [templates.query_prompt(kg, tuple(t)) for t in queries.triples.tolist()]
    prompts += [PromptTemplates.tail_prompt(kg, e) for e in queries.candidates.tolist()[:N_QUERIES]]
    folder = tiny_model(tmp_path / "tiny", prompts, tokenizer_adds_bos)
    peer = np.asarray(run_peer({"query_jobs": [], "tail_jobs": [], "encode": {"model": str(folder), "prompts": prompts}},
                               tmp_path / "peer")["embeddings"])

    model, tokenizer, _ = load_model(str(folder))
    # A small token budget: several right-padded batches, as in a real run; prompts tokenised as
    # the authors' style says (the tokenizer's own special tokens, as the package's tokenizer(text)).
    encoder = PromptEOLEncoder(model, tokenizer, token_budget=2048, show_progress=False,
                               special_tokens=templates.prompt_special_tokens)
    package_ids = [tokenizer(p)["input_ids"] for p in prompts]  # what the package feeds, one prompt at a time
    ours = encoder.encode(prompts).embeddings
    assert peer.shape == ours.shape == (len(prompts), 32)
    assert encoder.tokenize(prompts) == package_ids
    assert relative_errors(ours, peer).max() <= 1e-5
    if not tokenizer_adds_bos:
        # The paper style's BOS policy prepends BOS where this tokenizer adds none: other vectors.
        assert [token_ids(tokenizer, p) for p in prompts] == [[tokenizer.bos_token_id, *ids] for ids in package_ids]
        bos_policy_vectors = PromptEOLEncoder(model, tokenizer, token_budget=2048, show_progress=False).encode(prompts).embeddings
        assert relative_errors(bos_policy_vectors, peer).min() > 1e-3
