"""Small benchmark folders in their published layouts, written by the tests that read them: a BEAR data set
(``write_dataset``, and the edits a rerun must notice), a LAMA folder (``write_lama``), and a BEAR data set built in
memory (``hand_built_bear``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kg_data.bear import BearDataset, BearRelation

CAPITALS = [("Q142", "France", "Q90", "Paris"), ("Q183", "Germany", "Q64", "Berlin"), ("Q38", "Italy", "Q220", "Rome")]
LANGUAGES = [("Q90", "Paris", "Q150", "French"), ("Q64", "Berlin", "Q188", "German"), ("Q220", "Rome", "Q652", "Italian"),
             ("Q456", "Lyon", "Q150", "French")]


def write_dataset(folder: Path, with_answer_space: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {
        "P36": {"templates": ["The capital of [X] is [Y].", "[Y] is the capital of [X].", "[X]'s capital, [Y], is large."]},
        "P37": {"templates": ["The language of [X] is [Y].", "People in [X] speak [Y].", "[Y] is spoken in [X]."]},
        "P999": {"templates": ["[X] and [Y]."]},  # no file: skipped, as BEAR-big's P414
    }
    if with_answer_space:
        metadata["P36"]["answer_space_ids"] = [c[2] for c in CAPITALS]
        metadata["P36"]["answer_space_labels"] = [c[3] for c in CAPITALS]
    (folder / "metadata_relations.json").write_text(json.dumps(metadata))
    (folder / "P36.jsonl").write_text("".join(
        json.dumps({"sub_id": s, "sub_label": sl, "obj_id": o, "obj_label": ol, **({"answer_idx": i} if with_answer_space else {})}) + "\n"
        for i, (s, sl, o, ol) in enumerate(CAPITALS)))
    (folder / "P37.jsonl").write_text("".join(
        json.dumps({"sub_id": s, "sub_label": sl, "obj_id": o, "obj_label": ol}) + "\n" for s, sl, o, ol in LANGUAGES))
    (folder.parent / "relation_info.json").write_text(json.dumps({"P36": {"domains": ["Geographic"]}, "P37": {"domains": ["Geographic", "Cultural"]}}))
    return folder


SENTENCE = "Allan Peiper (born 26 April 1960 in [MASK], Australia) is a former Professional cyclist."


def trex_record(uuid, subject, answer, sentences):
    return {"uuid": uuid, "obj_uri": "Q1", "obj_label": answer, "sub_uri": "Q2", "sub_label": subject, "predicate_id": "P19",
            "evidences": [{"sub_surface": subject, "obj_surface": answer, "masked_sentence": s} for s in sentences]}


def write_lama(folder: Path) -> Path:
    """A small LAMA folder in the shipped layout: two T-REx relations (one file missing), Google-RE, SQuAD."""
    (folder / "TREx").mkdir(parents=True)
    (folder / "Google_RE").mkdir()
    (folder / "Squad").mkdir()
    relations = [{"relation": "P19", "template": "[X] was born in [Y] .", "label": "place of birth"},
                 {"relation": "P106", "template": "[X] is a [Y] by profession .", "label": "occupation"},
                 {"relation": "P17", "template": "[X] is located in [Y] .", "label": "country"}]
    (folder / "relations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in relations))
    (folder / "common_vocab_cased.txt").write_text("Paris\nLondon\nactor\nFrance\nlawyer\ngold\n")
    p19 = [trex_record("a", "Allan Peiper", "Paris", ["[MASK] is where he lives.", SENTENCE.replace("Australia", "France")]),
           trex_record("b", "Bob", "London", ["Bob was born in [MASK] ."]),
           trex_record("c", "Carl", "Zanzibar", ["Carl was born in [MASK] ."])]
    p106 = [trex_record("d", "Dora", "actor", ["Dora , an [MASK] , played .", "no mask here"]),
            trex_record("e", "Eve", "lawyer", ["[MASK] [MASK] Eve"])]
    (folder / "TREx" / "P19.jsonl").write_text("".join(json.dumps(r) + "\n" for r in p19))
    (folder / "TREx" / "P106.jsonl").write_text("".join(json.dumps(r) + "\n" for r in p106))
    google = [{"sub_label": "Fay", "obj_label": "Paris", "uuid": "g1", "masked_sentences": ["Fay was born in [MASK] ."]}]
    (folder / "Google_RE" / "place_of_birth_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in google))
    squad = [{"masked_sentences": ["The [MASK] color was used."], "obj_label": "gold", "id": "s1", "sub_label": "Squad"}]
    (folder / "Squad" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in squad))
    return folder


def edit_template(folder):
    """P37's first template reworded."""
    metadata = json.loads((folder / "metadata_relations.json").read_text())
    metadata["P37"]["templates"][0] = "In [X] one speaks [Y]."
    (folder / "metadata_relations.json").write_text(json.dumps(metadata))
    return "P37"


def edit_answer_label(folder):
    """P36's first answer renamed (an answer-space label: every statement with that answer changes)."""
    metadata = json.loads((folder / "metadata_relations.json").read_text())
    metadata["P36"]["answer_space_labels"][0] = "Lutetia"
    (folder / "metadata_relations.json").write_text(json.dumps(metadata))
    return "P36"


def hand_built_bear() -> BearDataset:
    relation = BearRelation(
        code="P6", templates=["The head of government of [X] is [Y].", "[Y] served as the head of government for [X].",
                              "[X] was already governed by [Y] today."],
        answer_ids=["Q1", "Q2", "Q3"], answer_labels=["Khalifa bin Zayed", "Kyriakos Mitsotakis", "Josip Broz Tito"],
        subject_ids=["Q41", "Q27"], subject_labels=["Greece", "ireland"], gold=np.array([1, 2]), rows=np.array([0, 4]),
        domains=["Political"], cardinality="1:1", total_instances=5)
    return BearDataset("hand", "/nowhere", {"P6": relation}, [])
