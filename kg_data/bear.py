"""Reader for BEAR / BEAR-big in the lm-pub-quiz format: ``metadata_relations.json`` ({relation: {"templates",
optionally "answer_space_ids"/"answer_space_labels"}}), one ``<relation>.jsonl`` per relation and ``relation_info.json``
(domains).  Without an answer space (BEAR-big) it is the relation's objects in order of first appearance, as lm-pub-quiz
builds it; subsets keep the full answer space.  Errors name the file and line (or the relation in the metadata).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kg_data.errors import KGFormatError, check_integer, refuse_lone_surrogates, some_of
from kg_data.lines import JSON_TYPE_NAMES, nonempty, read_jsonl, read_text

SUBJECT, ANSWER = "[X]", "[Y]"
METADATA_FILE = "metadata_relations.json"
RELATION_INFO_FILE = "relation_info.json"


def fill_statement(template: str, subject: str, answer: str, capitalise: bool = True) -> str:
    """[X] and [Y] filled, first character capitalised as lm-pub-quiz (not LAMA: ``capitalise=False``).  [X] is
    filled around [Y], so an answer label containing "[X]" is not rewritten."""
    before, after = template.split(ANSWER)
    statement = before.replace(SUBJECT, subject) + answer + after.replace(SUBJECT, subject)
    return statement[:1].upper() + statement[1:] if capitalise else statement


@dataclasses.dataclass
class BearRelation:
    """One relation; per instance, int64: ``gold`` (position in ``answer_ids``), ``rows`` (0-based row in the
    relation file), ``lines`` (1-based line in ``path``)."""

    code: str
    templates: list[str]
    answer_ids: list[str]
    answer_labels: list[str]
    subject_ids: list[str]
    subject_labels: list[str]
    gold: np.ndarray
    rows: np.ndarray
    domains: list[str]
    cardinality: str
    total_instances: int
    path: str = ""
    lines: np.ndarray | None = None

    def location(self, instance: int) -> str:
        """'FILE:LINE' of an instance, or its row where the file is not known."""
        if self.lines is None or not self.path:
            return f"relation {self.code}, row {int(self.rows[instance])}"
        return f"{self.path}:{int(self.lines[instance])}"

    def __len__(self) -> int:
        return len(self.subject_ids)

    def digest(self) -> str:
        """What this relation's scores depend on, hashed."""
        content = [self.code, self.templates, self.answer_ids, self.answer_labels, self.subject_ids, self.subject_labels,
                   self.gold.tolist(), self.rows.tolist()]
        return hashlib.sha256(json.dumps(content, ensure_ascii=False).encode()).hexdigest()[:16]

    def statements(self, template: str) -> list[str]:
        """``template`` filled with every (subject, answer) pair, subject-major: n_instances x n_answers."""
        return [fill_statement(template, subject, answer) for subject in self.subject_labels for answer in self.answer_labels]


@dataclasses.dataclass
class BearDataset:
    name: str
    path: str
    relations: dict[str, BearRelation]
    relations_without_file: list[str]
    selection: dict = dataclasses.field(default_factory=dict)  # load_bear_dataset's relations, max_instances, seed

    @property
    def n_instances(self) -> int:
        return sum(len(r) for r in self.relations.values())

    @property
    def n_statements(self) -> int:
        """Statements a full evaluation scores: instances x answers x templates."""
        return sum(len(r) * len(r.answer_ids) * len(r.templates) for r in self.relations.values())

    def summary(self) -> dict:
        return {"name": self.name, "path": self.path, "relations": len(self.relations), "instances": self.n_instances,
                "statements": self.n_statements, "relations_without_file": self.relations_without_file,
                "selection": self.selection}


def _read_object(path: Path, shape: str) -> dict:
    try:
        value = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise KGFormatError(path, error.lineno, f"invalid JSON ({error.msg})") from None
    if not isinstance(value, dict):
        raise KGFormatError(path, None, f"expected a JSON object {shape}")
    return value


def _text(path: Path, line: int | None, value, what: str, *, empty: bool = False) -> str:
    """A label or id from JSON as text; only a subject label may be empty (BEAR-big's P291 has one)."""
    if type(value) is int:
        value = str(value)
    if not isinstance(value, str) or not (empty or value.strip()):
        got = "an empty string" if isinstance(value, str) else JSON_TYPE_NAMES.get(type(value), type(value).__name__)
        raise KGFormatError(path, line, f"{what} must be a {'' if empty else 'non-empty '}string or an integer, got {got}")
    return refuse_lone_surrogates(path, line, value, what)


def _check_templates(path: Path, code: str, templates) -> list[str]:
    if not isinstance(templates, list) or not templates or not all(isinstance(t, str) for t in templates):
        raise KGFormatError(path, None, f"relation {code}: 'templates' must be a non-empty list of strings")
    for template in templates:
        if template.count(ANSWER) != 1 or SUBJECT not in template:
            raise KGFormatError(path, None, f"relation {code}: template {template!r} must hold {ANSWER} exactly once and {SUBJECT} at least once")
        refuse_lone_surrogates(path, None, template, f"relation {code}: template {template!r}")
    return templates


def _answer_space(path: Path, code: str, meta: dict) -> tuple[list[str], list[str]]:
    """The answer space the metadata gives: (ids, labels), checked."""
    ids, labels = meta.get("answer_space_ids"), meta.get("answer_space_labels")
    if not isinstance(ids, list) or not isinstance(labels, list) or len(ids) != len(labels) or not ids:
        raise KGFormatError(path, None, f"relation {code}: answer_space_ids and answer_space_labels must be non-empty lists "
                                        "of equal length")
    ids = [_text(path, None, value, f"relation {code}: answer_space_ids[{i}]") for i, value in enumerate(ids)]
    labels = [_text(path, None, value, f"relation {code}: answer_space_labels[{i}]") for i, value in enumerate(labels)]
    first: dict[str, int] = {}
    for i, answer in enumerate(ids):
        if first.setdefault(answer, i) != i:
            raise KGFormatError(path, None, f"relation {code}: answer id {answer} is in answer_space_ids twice "
                                            f"(positions {first[answer]} and {i})")
    return ids, labels


def _relation_domains(folder: Path) -> dict[str, list[str]]:
    for candidate in (folder / RELATION_INFO_FILE, folder.parent / RELATION_INFO_FILE):
        if candidate.is_file():
            info = _read_object(candidate, "{relation: {\"domains\": [...]}}")
            domains = {code: entry.get("domains", []) if isinstance(entry, dict) else None for code, entry in info.items()}
            for code, listed in domains.items():
                if not isinstance(listed, list) or not all(isinstance(d, str) for d in listed):
                    raise KGFormatError(candidate, None, f"relation {code}: expected an object whose 'domains' is a list of "
                                                         "strings, {\"domains\": [...]}")
            return domains
    return {}


def sample_rows(code: str, n_rows: int, max_instances: int | None, seed: int) -> np.ndarray:
    """Sorted rows kept for a relation: all, or ``max_instances`` drawn with (seed, relation)."""
    if max_instances is None or max_instances >= n_rows:
        return np.arange(n_rows, dtype=np.int64)
    rng = np.random.default_rng([seed, zlib.crc32(code.encode())])
    return np.sort(rng.choice(n_rows, size=max_instances, replace=False)).astype(np.int64)


def load_relation(folder: Path, code: str, meta: dict, domains: dict, max_instances: int | None = None,
                  seed: int = 0) -> BearRelation:
    metadata_path = folder / METADATA_FILE
    if not isinstance(meta, dict):
        raise KGFormatError(metadata_path, None, f"relation {code}: expected an object with 'templates'")
    templates = _check_templates(metadata_path, code, meta.get("templates"))
    path = folder / f"{code}.jsonl"
    records = []
    for line, record in nonempty(read_jsonl(path, ("sub_id", "sub_label", "obj_id", "obj_label")), path, "instances"):
        texts = {key: _text(path, line, record[key], f"key '{key}'", empty=key == "sub_label")
                 for key in ("sub_id", "sub_label", "obj_id", "obj_label")}
        records.append((line, {**record, **texts}))
    if "answer_space_ids" in meta or "answer_space_labels" in meta:
        answer_ids, answer_labels = _answer_space(metadata_path, code, meta)
    else:
        first_label: dict[str, str] = {}
        for _, record in records:
            first_label.setdefault(record["obj_id"], record["obj_label"])
        answer_ids, answer_labels = list(first_label), list(first_label.values())
    position = {answer: i for i, answer in enumerate(answer_ids)}
    gold, seen_subjects = [], set()
    for line, record in records:
        if record["obj_id"] not in position:
            raise KGFormatError(path, line, f"obj_id {record['obj_id']} is not in the answer space of {code}")
        answer = position[record["obj_id"]]
        if "answer_idx" in record and (type(record["answer_idx"]) is not int or record["answer_idx"] != answer):
            raise KGFormatError(path, line, f"answer_idx {record['answer_idx']!r} does not point at obj_id {record['obj_id']} (position {answer})")
        if record["sub_id"] in seen_subjects:
            raise KGFormatError(path, line, f"subject {record['sub_id']} appears twice in {code}")
        seen_subjects.add(record["sub_id"])
        gold.append(answer)
    gold = np.asarray(gold, dtype=np.int64)
    cardinality = "N:1" if len(np.unique(gold)) < len(gold) else "1:1"
    rows = sample_rows(code, len(records), max_instances, seed)
    return BearRelation(code=code, templates=templates, answer_ids=list(answer_ids), answer_labels=list(answer_labels),
                        subject_ids=[records[r][1]["sub_id"] for r in rows],
                        subject_labels=[records[r][1]["sub_label"] for r in rows], gold=gold[rows], rows=rows,
                        domains=list(domains.get(code, [])), cardinality=cardinality, total_instances=len(records),
                        path=str(path), lines=np.asarray([records[r][0] for r in rows], dtype=np.int64))


def load_bear_dataset(name_or_path: str | Path, data_dir: str | Path | None = None, relations: Sequence[str] | None = None,
                      max_instances: int | None = None, seed: int = 0) -> BearDataset:
    """Load 'bear', 'bear-big' or a folder in the lm-pub-quiz format.  ``relations``: codes to keep (default:
    every relation with a file; a file the metadata lacks is refused, as lm-pub-quiz fails on it)."""
    from kg_data.fetch import named_or_folder

    if max_instances is not None:
        check_integer("max_instances", max_instances, 1, " (None: every instance)")
    name, folder = named_or_folder(name_or_path, ("bear", "bear-big"), data_dir, METADATA_FILE, "BEAR-format data set")
    metadata = _read_object(folder / METADATA_FILE, "{relation: {...}}")
    if relations:
        unknown = [r for r in relations if r not in metadata]
        if unknown:
            raise ValueError(f"relation(s) {', '.join(unknown)} not in {folder / METADATA_FILE}; it has {some_of(metadata)}")
    wanted = list(relations) if relations else list(metadata)
    without_file = [code for code in wanted if not (folder / f"{code}.jsonl").is_file()]
    if relations and without_file:
        raise ValueError(f"relation(s) {', '.join(without_file)} have no .jsonl file in {folder}; relations with one: "
                         f"{some_of(code for code in metadata if (folder / f'{code}.jsonl').is_file())}")
    if not wanted or len(without_file) == len(wanted):
        raise KGFormatError(folder / METADATA_FILE, None, "lists no relations" if not wanted else
                            f"none of its {len(wanted)} relations has a data file (CODE.jsonl in {folder})")
    domains = _relation_domains(folder)
    loaded = {code: load_relation(folder, code, metadata[code], domains, max_instances, seed)
              for code in wanted if code not in without_file}
    unlisted = [] if relations else [path.stem for path in folder.glob("*.jsonl") if path.stem not in metadata]
    if unlisted:  # lm-pub-quiz reads every CODE.jsonl (and fails on these): a smaller data set would be scored unsaid
        raise KGFormatError(folder / METADATA_FILE, None, f"lists no relation {some_of(unlisted)}, whose data file is in {folder}: "
                                                          "add it here (lm-pub-quiz reads it too) or choose the relations")
    selection = {"relations": list(relations) if relations else None, "max_instances": max_instances, "seed": seed}
    return BearDataset(name, str(folder), loaded, without_file, selection)


def save_lm_pub_quiz_folder(dataset: BearDataset, folder: str | Path) -> Path:
    """Write ``dataset`` (a subset: its kept instances, each whole answer space) in the lm-pub-quiz format, so
    lm-pub-quiz can evaluate exactly these statements (cardinality is then derived from the written instances)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=False)
    metadata = {code: {"templates": r.templates, "answer_space_ids": r.answer_ids, "answer_space_labels": r.answer_labels}
                for code, r in dataset.relations.items()}
    for code, r in dataset.relations.items():
        lines = [json.dumps({"sub_id": sub_id, "sub_label": label, "obj_id": r.answer_ids[gold],
                             "obj_label": r.answer_labels[gold], "answer_idx": int(gold)}, ensure_ascii=False)
                 for sub_id, label, gold in zip(r.subject_ids, r.subject_labels, r.gold.tolist(), strict=True)]
        (folder / f"{code}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    info = {code: {"domains": r.domains} for code, r in dataset.relations.items()}
    (folder / RELATION_INFO_FILE).write_text(json.dumps(info, ensure_ascii=False), encoding="utf-8")
    # the file that makes the folder a BEAR-format data set, last: a save stopped before it leaves no smaller data set
    (folder / METADATA_FILE).write_text(json.dumps(metadata, ensure_ascii=False), encoding="utf-8")
    return folder
