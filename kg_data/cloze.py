"""Cloze benchmarks (the BEAR data set, LAMA) as the one task type (``kg_data.task``), and the statement a query
makes with an answer in its slot; what a probe makes of a query is ``deer.platform.cloze_texts``'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from kg_data.bear import ANSWER, METADATA_FILE, BearDataset, fill_statement
from kg_data.errors import KGFormatError
from kg_data.lama import MASK, LamaDataset, first_usable_sentence, relation_file
from kg_data.task import CandidateSet, ClozeQuery, Task, shorten

__all__ = ["CANDIDATE_KINDS", "LARGE_SET", "MODES", "CandidateSet", "ClozeQuery", "Task", "answer_context",
           "bear_cloze_task", "check_lama_queries", "check_modes", "lama_cloze_task", "shorten", "statement",
           "text_before_answer"]

MODES = ("template", "template-free")
CANDIDATE_KINDS = ("common-vocab", "relation")
LARGE_SET = "common-vocab"  # LAMA's common vocabulary: one set of |vocabulary| answers for every fact


BEAR_SOURCE = "bear"  # the source of a BEAR-format data set's queries
STATEMENT_RULE = ("[X] and [Y] filled; a BEAR-format data set's statement with its first character capitalised "
                  "(lm-pub-quiz), LAMA's as written (LAMA's parse_template: 'iCarly', not 'ICarly')")


def statement(query: ClozeQuery, answer: str) -> str:
    """The query's text with ``answer`` in its slot, by ``STATEMENT_RULE``."""
    return fill_statement(query.template, query.subject, answer, capitalise=query.source == BEAR_SOURCE)


def text_before_answer(query: ClozeQuery) -> str:
    """The statement up to the answer slot, as ``statement`` writes it ("" when the answer comes first)."""
    before = query.template.split(ANSWER)[0] + ANSWER
    return fill_statement(before, query.subject, "", capitalise=query.source == BEAR_SOURCE)


def answer_context(query: ClozeQuery) -> str:
    """The statement up to the answer slot, right-stripped ("" when the answer comes first)."""
    return text_before_answer(query).rstrip()


def bear_cloze_task(dataset: BearDataset) -> Task:
    """Every (relation, template, instance) of a BEAR-format data set over its relation's answer space."""
    queries, sets = [], {}
    for code, relation in dataset.relations.items():
        sets[code] = CandidateSet(tuple(relation.answer_labels), ids=tuple(relation.answer_ids),
                                  source=f"{Path(dataset.path) / METADATA_FILE}: relation {code}")
        for t, template in enumerate(relation.templates):
            for i, (sub_id, subject) in enumerate(zip(relation.subject_ids, relation.subject_labels, strict=True)):
                gold = int(relation.gold[i])
                queries.append(ClozeQuery(BEAR_SOURCE, code, sub_id, int(relation.rows[i]), "template", t, template, subject,
                                          relation.answer_labels[gold], code, gold))
    instance = {(code, int(row)): i for code, r in dataset.relations.items() for i, row in enumerate(r.rows)}
    return Task(dataset.name, queries, sets, {"dataset": dataset.summary()},
                     lambda q: dataset.relations[q.relation].location(instance[q.relation, q.row]))


def check_modes(modes: Sequence[str], candidate_kinds: Sequence[str]) -> None:
    """Refuse unknown, empty or repeated modes and candidate kinds (one given twice would query every fact twice)."""
    bad = [m for m in modes if m not in MODES] + [k for k in candidate_kinds if k not in CANDIDATE_KINDS]
    twice = [x for given in (list(modes), list(candidate_kinds)) for x in dict.fromkeys(given) if given.count(x) > 1]
    if bad or twice or not modes or not candidate_kinds:
        raise ValueError(f"modes must be among {MODES} and candidate kinds among {CANDIDATE_KINDS}, each once"
                         f"{f' ({twice[0]!r} is given twice)' if twice else ''}; got {list(modes)}, {list(candidate_kinds)}")


def check_lama_queries(dataset: LamaDataset, modes: Sequence[str] = MODES) -> None:
    """Refuse data that gives no query at all in ``modes`` (a fact without a usable sentence is only counted, as LAMA)."""
    check_modes(modes, CANDIDATE_KINDS)
    relations = list(dataset.relations.values())
    if "template" in modes and any(r.template is not None for r in relations):
        return
    if "template-free" in modes and any(first_usable_sentence(f.masked_sentences, need_prefix=False) is not None
                                        for r in relations for f in r.facts):
        return
    reasons = [f"no masked sentence of any fact holds {MASK} exactly once"] if "template-free" in modes else []
    reasons += ["none of the relations has a template (SQuAD has none)"] if "template" in modes else []
    where = relations[0].path if len(relations) == 1 else dataset.path
    raise KGFormatError(where, None, f"no query to score in mode(s) {', '.join(modes)}: {'; '.join(reasons)}")


def lama_cloze_task(dataset: LamaDataset, vocabulary: Sequence[str] | Mapping[str, str], modes: Sequence[str] = MODES,
                    candidate_kinds: Sequence[str] = CANDIDATE_KINDS, causal: bool = True) -> Task:
    """LAMA's protocol: facts whose object is in ``vocabulary`` (words, or {word: the word whose candidate it is}) are
    kept, the others counted.  Candidates: "common-vocab" ranks ``vocabulary``, "relation" the relation's objects in it.
    Modes: "template" (once per distinct subject and object, as LAMA) and "template-free" (``first_usable_sentence``)."""
    check_modes(modes, candidate_kinds)
    label_of = vocabulary if isinstance(vocabulary, Mapping) else {word: word for word in vocabulary}
    vocab = tuple(dict.fromkeys(label_of.values()))
    index = {word: i for i, word in enumerate(vocab)}
    position = {word: index[label_of[word]] for word in label_of}
    sets = {"common-vocab": CandidateSet(vocab)} if "common-vocab" in candidate_kinds else {}
    queries: list[ClozeQuery] = []
    counts: dict[str, dict] = {}
    for key, relation in dataset.relations.items():
        objects = tuple(dict.fromkeys(label_of[o] for o in relation.objects if o in position))
        if "relation" in candidate_kinds:
            sets[key] = CandidateSet(objects)
        local = {label: i for i, label in enumerate(objects)}
        kept = [f for f in relation.facts if f.answer in position]
        count = {"facts": len(relation.facts), "object_not_in_vocabulary": len(relation.facts) - len(kept),
                 "relation_candidates": len(objects), "template": 0, "template-free": 0, "no_usable_sentence": 0,
                 "template_repeats": 0}
        templated = set()  # LAMA asks a template once per distinct (sub_label, obj_label): a repeat is one query, not two
        for fact in kept:
            texts = []
            if "template" in modes and relation.template is not None:
                if (fact.subject, fact.answer) in templated:
                    count["template_repeats"] += 1
                else:
                    templated.add((fact.subject, fact.answer))
                    texts.append(("template", 0, relation.template))
            if "template-free" in modes:
                sentence = first_usable_sentence(fact.masked_sentences, need_prefix=causal)
                if sentence is None:
                    count["no_usable_sentence"] += 1
                else:
                    texts.append(("template-free", -1, sentence.replace(MASK, ANSWER)))
            for mode, t, template in texts:
                count[mode] += 1
                for kind in candidate_kinds:
                    name, gold = (("common-vocab", position[fact.answer]) if kind == "common-vocab"
                                  else (key, local[label_of[fact.answer]]))
                    queries.append(ClozeQuery(relation.source, relation.code, fact.fact_id, fact.line, mode, t, template,
                                              fact.subject, fact.answer, name, gold))
        counts[key] = count
    return Task("lama", queries, sets, {"dataset": dataset.summary(), "counts": counts, "vocabulary": len(vocab),
                                             "modes": list(modes), "candidate_kinds": list(candidate_kinds)},
                     lambda q: f"{relation_file(dataset.path, q.source, q.relation)}:{q.row}")
