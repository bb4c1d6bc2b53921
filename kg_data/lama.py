"""Reader for the LAMA probe data as shipped (facebookresearch/LAMA ``data/``): ``relations.jsonl`` (T-REx templates),
``common_vocab_cased.txt``, ``TREx/<relation>.jsonl``, ``Google_RE/<relation>_test.jsonl`` and ``Squad/test.jsonl``, each
fact with masked sentences where ``[MASK]`` stands for the object.  Errors name the file and line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from kg_data.bear import sample_rows
from kg_data.errors import KGFormatError, check_integer, refuse_lone_surrogates, some_of
from kg_data.lines import check_text_file, json_text, nonempty, read_jsonl, read_lines

RELATIONS_FILE = "relations.jsonl"
COMMON_VOCAB_FILE = "common_vocab_cased.txt"
MASK = "[MASK]"
SOURCES = ("TREx", "Google_RE", "Squad")
# LAMA scripts/run_experiments.py (get_GoogleRE_parameters).
GOOGLE_RE_TEMPLATES = {"date_of_birth": "[X] (born [Y]).", "place_of_birth": "[X] was born in [Y] .",
                       "place_of_death": "[X] died in [Y] ."}


@dataclasses.dataclass(frozen=True)
class LamaFact:
    """One fact: ``line`` is its 1-based line in ``path`` (for messages and stable ids)."""

    fact_id: str
    subject: str
    answer: str
    masked_sentences: tuple[str, ...]
    line: int


@dataclasses.dataclass
class LamaRelation:
    """One relation of one source (``template`` None for SQuAD); ``objects``: the whole file's distinct objects."""

    source: str
    code: str
    template: str | None
    label: str
    path: str
    facts: list[LamaFact]
    objects: list[str]
    total_facts: int

    @property
    def key(self) -> str:
        return f"{self.source}/{self.code}"


@dataclasses.dataclass
class LamaDataset:
    path: str
    relations: dict[str, LamaRelation]
    common_vocab: list[str]
    relations_without_file: list[str]
    selection: dict

    def summary(self) -> dict:
        return {"name": "lama", "path": self.path,
                "relations": {key: {"facts": len(r.facts), "total_facts": r.total_facts, "objects": len(r.objects)}
                              for key, r in self.relations.items()},
                "facts": sum(len(r.facts) for r in self.relations.values()), "common_vocab": len(self.common_vocab),
                "relations_without_file": self.relations_without_file, "selection": self.selection}


def _text(path: Path, line: int, record: dict, key: str) -> str:
    """``record[key]`` as ``json_text`` reads it (an integer as its decimal string), refused when blank."""
    value = json_text(path, line, record, key, integer=True)
    if not value.strip():
        raise KGFormatError(path, line, f"key '{key}' must be a non-empty string")
    return value


def _masked_sentences(path: Path, line: int, record: dict) -> tuple[str, ...]:
    if "evidences" in record and "masked_sentences" not in record:  # T-REx
        evidences = record["evidences"]
        if not isinstance(evidences, list) or not all(isinstance(e, dict) and isinstance(e.get("masked_sentence"), str) for e in evidences):
            raise KGFormatError(path, line, "'evidences' must be a list of objects with a 'masked_sentence' string")
        sentences = [e["masked_sentence"] for e in evidences]
    else:
        sentences = record.get("masked_sentences")
        if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            raise KGFormatError(path, line, "'masked_sentences' must be a list of strings")
    return tuple(refuse_lone_surrogates(path, line, s, f"masked sentence {i}") for i, s in enumerate(sentences))


def read_facts(path: Path, source: str) -> list[LamaFact]:
    """Every fact of one LAMA file, checked (errors name file and line)."""
    id_key = {"TREx": "uuid", "Google_RE": "uuid", "Squad": "id"}[source]
    facts = []
    for line, record in nonempty(read_jsonl(path, (id_key, "obj_label")), path, "facts"):
        if source == "Squad":  # its questions hold their subject: sub_label is optional, only shown in tables
            subject = record.get("sub_label") if isinstance(record.get("sub_label"), str) else ""
            subject = refuse_lone_surrogates(path, line, subject, "key 'sub_label'")
        else:
            subject = _text(path, line, record, "sub_label")
        facts.append(LamaFact(fact_id=json_text(path, line, record, id_key, integer=True), subject=subject,
                              answer=_text(path, line, record, "obj_label"),
                              masked_sentences=_masked_sentences(path, line, record), line=line))
    return facts


def read_relation_templates(path: Path) -> dict[str, dict]:
    """``relations.jsonl``: {code: {"template", "label"}}, checked; an empty one is refused (the folder's marker: an empty
    one is a copy that failed, and its T-REx files would go unread without a word)."""
    check_text_file(path, empty_ok=False)
    templates, lines = {}, {}
    for line, record in read_jsonl(path, ("relation", "template")):
        code = _text(path, line, record, "relation")
        if code in lines:
            raise KGFormatError(path, line, f"relation {code} is listed twice (first at line {lines[code]})")
        template = _text(path, line, record, "template")
        if template.count("[Y]") != 1 or template.count("[X]") != 1:
            raise KGFormatError(path, line, f"template {template!r} must hold [X] and [Y] once each")
        label = _text(path, line, record, "label") if record.get("label") is not None else code
        templates[code], lines[code] = {"template": template, "label": label}, line
    return templates


def relation_file(folder: str | Path, source: str, code: str) -> Path:
    """The data file of one relation of ``source`` in a LAMA folder."""
    return Path(folder) / source / ({"TREx": f"{code}.jsonl", "Google_RE": f"{code}_test.jsonl", "Squad": "test.jsonl"}[source])


def _relation(folder: Path, source: str, code: str, template: str | None, label: str, max_facts, seed) -> LamaRelation:
    path = relation_file(folder, source, code)
    facts = read_facts(path, source)
    kept = [facts[i] for i in sample_rows(f"{source}/{code}", len(facts), max_facts, seed)]  # drawn with (seed, key)
    return LamaRelation(source, code, template, label, str(path), kept, list(dict.fromkeys(f.answer for f in facts)), len(facts))


def load_lama(name_or_path: str | Path = "lama", data_dir: str | Path | None = None, sources: Sequence[str] | None = None,
              relations: Sequence[str] | None = None, max_facts: int | None = None, seed: int = 0) -> LamaDataset:
    """Load LAMA ('lama' or a folder in its layout).  ``sources``: some of ``SOURCES`` (default: those present);
    ``relations``: codes (P19, place_of_birth, squad); ``max_facts``: at most N per relation, sampled with ``seed``."""
    from kg_data.fetch import named_or_folder

    _, folder = named_or_folder(name_or_path, ("lama",), data_dir, RELATIONS_FILE, "LAMA data folder")
    wanted_sources = list(dict.fromkeys(sources)) if sources else [s for s in SOURCES if (folder / s).is_dir()]  # each once
    unknown = [s for s in wanted_sources if s not in SOURCES]
    if unknown:
        raise ValueError(f"unknown LAMA source(s) {', '.join(unknown)}; choose from {', '.join(SOURCES)}")
    if max_facts is not None:
        check_integer("max_facts", max_facts, 1, " (None: every fact)")
    trex = read_relation_templates(folder / RELATIONS_FILE)
    entries = {  # (code, template, label) per source
        "TREx": [(code, meta["template"], meta["label"]) for code, meta in trex.items()],
        "Google_RE": [(code, template, code.replace("_", " ")) for code, template in GOOGLE_RE_TEMPLATES.items()],
        "Squad": [("squad", None, "SQuAD cloze questions")],
    }
    listed = [(source, *entry) for source in wanted_sources for entry in entries[source]]  # (source, code, template, label)
    plan = [entry for entry in listed if relation_file(folder, *entry[:2]).is_file()]
    without_file = ["/".join(entry[:2]) for entry in listed if entry not in plan]
    if not plan:  # an empty relations.jsonl, or no relation with its data file
        raise KGFormatError(folder / RELATIONS_FILE, None,
                            f"no relation of sources {', '.join(wanted_sources) or 'none'} has a data file "
                            "(TREx/CODE.jsonl for each relation listed here, Google_RE/NAME_test.jsonl, Squad/test.jsonl)")
    if relations:
        known = {code for _, code, _, _ in plan}
        missing = [r for r in relations if r not in known]
        if missing:
            raise ValueError(f"relation(s) {', '.join(missing)} have no data file in {folder} (sources {', '.join(wanted_sources)}); "
                             f"relations with one: {some_of(known)}")
        plan = [p for p in plan if p[1] in set(relations)]
    loaded = {relation.key: relation for relation in (_relation(folder, *entry, max_facts, seed) for entry in plan)}
    vocab_path = folder / COMMON_VOCAB_FILE
    common_vocab = [text.strip() for _, text in read_lines(vocab_path)] if vocab_path.is_file() else []
    selection = {"sources": wanted_sources, "relations": list(relations) if relations else None, "max_facts": max_facts, "seed": seed}
    return LamaDataset(str(folder), loaded, common_vocab, without_file, selection)


def first_usable_sentence(sentences: Sequence[str], need_prefix: bool) -> str | None:
    """The first masked sentence with exactly one [MASK] (and, with ``need_prefix``, text before it), or None."""
    return next((sentence for sentence in sentences
                 if sentence.count(MASK) == 1 and (not need_prefix or sentence.split(MASK)[0].strip())), None)

