"""The texts the built-in probes make of a cloze query: DEER's query text, LAMA's scoring rule and a masked LM's
sentence (the same texts the probes hand the length guard).
"""

from __future__ import annotations

from kg_data.bear import ANSWER
from kg_data.cloze import LARGE_SET, ClozeQuery, answer_context, statement
from kg_data.task import Task

BLANK = "___"
BLANK_PROMPT = "Fill in the blank: {sentence}\nAnswer:"
# What may follow the answer slot for LAMA to read the answer as the next token: spaces, final punctuation,
# and a closing bracket (a KG's query line "(h, r, [Y])"; no BEAR or LAMA template has one).
END_PUNCTUATION = " .!?)"


def deer_query_text(query: ClozeQuery) -> str:
    """The answer context, or where the answer comes first a fill-in-the-blank prompt (``BLANK_PROMPT``)."""
    return answer_context(query) or BLANK_PROMPT.format(sentence=statement(query, BLANK))


def mask_sentence(tokenizer, query: ClozeQuery) -> str:
    """The query's sentence for a masked LM: [X] filled, the answer slot as the tokenizer's mask token."""
    return statement(query, ANSWER).replace(ANSWER, tokenizer.mask_token)


def template_scoring(template: str) -> str:
    """LAMA's scoring: "next-token" when text precedes [Y] and only ``END_PUNCTUATION`` follows it, else "statement"."""
    parts = template.split(ANSWER)
    return "next-token" if parts[0].strip() and not parts[1].strip(END_PUNCTUATION) else "statement"


def lama_rule(query: ClozeQuery) -> str:
    """How LAMA scores ``query`` on a causal LM (a template-free sentence: by the next token)."""
    return "next-token" if query.mode == "template-free" else template_scoring(query.template)


def lama_rules(task: Task, masked: bool) -> list[str]:
    """How LAMA scores each query: "mask-fill" (masked LM), ``lama_rule``'s, or not at all (on ``LARGE_SET``)."""
    if masked:
        return ["mask-fill"] * len(task.queries)
    rules = [lama_rule(q) for q in task.queries]
    return [rule if rule == "next-token" or q.candidates != LARGE_SET else "statement (not scored on the common vocabulary)"
            for q, rule in zip(task.queries, rules, strict=True)]
