"""The Wikidata5M reader on small files in its published layout, and the synthetic KG generator."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from kg_data.errors import KGFormatError, KGNotFoundError
from kg_data.wikidata5m import load_wikidata5m
from tests.kg_folders import WIKIDATA5M_FILES, write_wikidata5m


def test_reads_names_descriptions_and_counts_what_it_leaves_out(tmp_path):
    kg = load_wikidata5m(write_wikidata5m(tmp_path / "w5m"))
    assert kg.entity_ids == ["Q1", "Q2", "Q3"]  # alias-file order; Q9 is in no triple; Q4 and Q5 have no name
    assert kg.entity_names == ["Berlin", "Germany", "Paris"]
    assert kg.entity_descriptions == ["Berlin is the capital of Germany.", "-", "-"]
    assert kg.relation_names == ["capital of", "shares border with"]
    assert kg.splits["train"].tolist() == [[0, 0, 1], [1, 1, 2]]
    assert kg.splits["test"].tolist() == [[0, 1, 2]]
    assert kg.notes == {"alias_file_entities_not_in_a_triple": 1, "entities_without_description": 2,
                        "entities_with_more_aliases": 1, "entities_without_alias": 2,
                        "triples_dropped_without_alias": {"train": 1, "valid": 0, "test": 2}}
    assert kg.summary()["notes"] == kg.notes


def test_a_bad_line_is_named_with_file_and_line(tmp_path):
    folder = write_wikidata5m(tmp_path / "w5m", **{"wikidata5m_transductive_test.txt": "Q1\tP2\tQ3\nQ1\tP2\n"})
    with pytest.raises(KGFormatError, match=r"wikidata5m_transductive_test.txt:2"):
        load_wikidata5m(folder)
    write_wikidata5m(folder)
    (folder / "wikidata5m_text.txt").unlink()
    with pytest.raises(KGFormatError, match="wikidata5m_text.txt"):
        load_wikidata5m(folder)


def test_the_synthetic_generator_writes_both_layouts(tmp_path):
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from synthetic_kg import shape, write_synthetic_kg

    from kg_data.textual import load_textual_kg

    counts = write_synthetic_kg(tmp_path / "tsv", 3_000, seed=1)
    assert counts == shape(3_000) and counts["relations"] == 300 and counts["test"] == 300
    kg = load_textual_kg(tmp_path / "tsv")
    assert kg.n_entities == 3_000 and len(kg.splits["train"]) == counts["train"]
    write_synthetic_kg(tmp_path / "w5m", 3_000, seed=1, layout="wikidata5m")
    w5m = load_wikidata5m(tmp_path / "w5m")
    assert w5m.n_relations <= 300 and len(w5m.splits["test"]) == counts["test"]
    assert np.all(w5m.splits["train"] >= 0) and w5m.notes["entities_without_alias"] == 0
    again = write_synthetic_kg(tmp_path / "again", 3_000, seed=1)
    assert again == counts and (tmp_path / "again" / "train.tsv").read_bytes() == (tmp_path / "tsv" / "train.tsv").read_bytes()


def test_a_large_tsv_kg_is_read_in_bulk_as_line_by_line(tmp_path, monkeypatch):
    """Split files over ``BULK_BYTES`` are read by pyarrow: the same triples and fingerprint as line by line,
    and a bad line still named by file and line."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from synthetic_kg import write_synthetic_kg

    import kg_data.kg as kg_module
    from kg_data.textual import load_textual_kg

    write_synthetic_kg(tmp_path / "kg", 30_000, seed=3)
    assert (tmp_path / "kg" / "train.tsv").stat().st_size > kg_module.BULK_BYTES
    bulk = load_textual_kg(tmp_path / "kg")
    monkeypatch.setattr(kg_module, "BULK_BYTES", 1 << 40)
    lines = load_textual_kg(tmp_path / "kg")
    assert bulk.fingerprint() == lines.fingerprint()
    assert all(np.array_equal(bulk.splits[s], lines.splits[s]) for s in ("train", "valid", "test"))
    monkeypatch.undo()
    assert type(bulk.entity_names).__name__ == "TextColumn" and bulk.entity_names[5] == lines.entity_names[5]
    entities = (tmp_path / "kg" / "entities.tsv").read_text()
    (tmp_path / "kg" / "entities.tsv").write_text(entities + "Q7\tagain\n")
    with pytest.raises(KGFormatError, match=rf"entities.tsv:{len(entities.splitlines()) + 1}: duplicate entity id 'Q7'"):
        load_textual_kg(tmp_path / "kg")
    (tmp_path / "kg" / "entities.tsv").write_text(entities)
    with open(tmp_path / "kg" / "train.tsv", "a") as handle:
        handle.write("Q1\tP1\tQ999999999\n")
    n_lines = len((tmp_path / "kg" / "train.tsv").read_text().splitlines())
    with pytest.raises(KGFormatError, match=rf"train.tsv:{n_lines}: unknown tail entity id 'Q999999999'"):
        load_textual_kg(tmp_path / "kg")


def test_wikidata5m_by_name_from_a_data_dir_and_where_to_get_it(tmp_path):
    from click.testing import CliRunner

    from experiments.cli import main
    from kg_data.load import load_kg

    write_wikidata5m(tmp_path / "data" / "wikidata5m")
    assert load_kg("wikidata5m", tmp_path / "data").entity_names == ["Berlin", "Germany", "Paris"]
    assert load_kg(tmp_path / "data" / "wikidata5m").name == "wikidata5m"  # a folder in its layout
    fetched = CliRunner().invoke(main, ["data", "fetch", "wikidata5m", "--data-dir", str(tmp_path / "empty")])
    assert fetched.exit_code == 1 and "deepgraphlearning.github.io/project/wikidata5m" in fetched.output
    assert str(tmp_path / "empty" / "wikidata5m") in fetched.output
    with pytest.raises(KGNotFoundError, match="wikidata5m_transductive.tar.gz"):
        load_kg("wikidata5m", tmp_path / "empty")


@pytest.mark.parametrize(("file_name", "text", "repeated"), [
    ("wikidata5m_entity.txt", "Q1\tBerlin\nQ2\tGermany\nQ3\tParis\nQ1\tBerlin again\n", "Q1"),
    ("wikidata5m_relation.txt", "P1\tcapital of\nP2\tshares border with\nP2\tborders\n", "P2"),
])
def test_an_id_listed_twice_in_an_alias_file_is_refused(tmp_path, file_name, text, repeated):
    """Audit E4: a repeated id was kept twice (an extra candidate that can never be gold or filtered, and a negative
    'entities_without_alias' count)."""
    folder = write_wikidata5m(tmp_path / "w5m", **{file_name: text})
    with pytest.raises(KGFormatError) as error:
        load_wikidata5m(folder)
    assert str(error.value).startswith(f"{folder / file_name}: ") and f"'{repeated}'" in str(error.value)
    assert "more than once" in str(error.value)


@pytest.mark.parametrize(("file_name", "text", "padded"), [
    ("wikidata5m_transductive_train.txt", "Q1\tP1\tQ2 \nQ2\tP2\tQ3\n", "'Q2 '"),
    ("wikidata5m_transductive_test.txt", "Q1\t P2\tQ3\n", "' P2'"),
    ("wikidata5m_entity.txt", "Q1\tBerlin\nQ2 \tGermany\nQ3\tParis\n", "'Q2 '"),
    ("wikidata5m_relation.txt", "P1\tcapital of\n P2\tshares border with\n", "' P2'"),
    ("wikidata5m_text.txt", "Q1 \tBerlin is the capital of Germany.\n", "'Q1 '"),
])
def test_an_id_with_whitespace_around_it_is_refused(tmp_path, file_name, text, padded):
    """Audit E8: 'Q2 ' matched no id, so its triple was dropped and counted under 'triples_dropped_without_alias' (a wrong
    reason), or its entity lost its alias or description; such an id is now refused, naming the file."""
    folder = write_wikidata5m(tmp_path / "w5m", **{file_name: text})
    with pytest.raises(KGFormatError) as error:
        load_wikidata5m(folder)
    assert str(error.value).startswith(f"{folder / file_name}: ") and padded in str(error.value)
    assert "whitespace" in str(error.value)


@pytest.mark.parametrize(("file_name", "text", "bad_line"), [
    ("wikidata5m_entity.txt", b"Q1\tBerlin\tberlin city\nQ2\tGermany\nQ3\tPar\ris\n", 3),
    ("wikidata5m_text.txt", b"Q1\tBerlin\tthe capital.\nQ3\tA city \xff in France.\n", 2),
])
def test_a_bad_line_of_an_alias_or_text_file_is_named_not_a_line_with_more_tabs(tmp_path, file_name, text, bad_line):
    """Audit s11-C: a file pyarrow could not read (a lone CR, a byte that is not UTF-8) was read again allowing two columns,
    so the error named its first line with several aliases (or a tab in its text), a good line, instead of the bad one."""
    folder = write_wikidata5m(tmp_path / "w5m")
    (folder / file_name).write_bytes(text)
    with pytest.raises(KGFormatError) as error:
        load_wikidata5m(folder)
    assert str(error.value).startswith(f"{folder / file_name}:{bad_line}: "), str(error.value)


def test_the_names_of_a_kg_read_in_bulk_slice_as_a_list_does():
    """Audit s11-C: a TextColumn (a Wikidata5M or bulk-read KG's names and descriptions) gave [] for a slice with a
    negative step, where the list of the same texts gives them reversed."""
    import pyarrow as pa

    from kg_data.text_column import TextColumn

    texts = ["a", "b", "c", "d", "e"]
    column = TextColumn(pa.array(texts))
    for index in (slice(None, None, -1), slice(3, 0, -1), slice(-1, None, -2), slice(None, None, 2), slice(1, 4),
                  slice(4, 1), slice(None, None, -9)):
        assert column[index] == texts[index], index


def test_a_text_file_listing_an_id_twice_uses_its_first_text_and_counts_it(tmp_path):
    """An id given two texts was read without a word (its second text dropped): the first is used and the notes say so."""
    text = "Q1\tBerlin is the capital of Germany.\nQ3\tParis is in France.\nQ1\tA second text.\n"
    kg = load_wikidata5m(write_wikidata5m(tmp_path / "w5m", **{"wikidata5m_text.txt": text}))
    assert kg.entity_descriptions[:1] == ["Berlin is the capital of Germany."]
    assert kg.notes["text_lines_repeating_an_id"] == 1 and kg.summary()["notes"]["text_lines_repeating_an_id"] == 1
    assert "text_lines_repeating_an_id" not in load_wikidata5m(write_wikidata5m(tmp_path / "plain")).notes  # none: no note


def _lines(text: str) -> int:
    return len(text.splitlines())


def test_dropped_triples_are_said_on_the_terminal_and_kept_in_the_result(tmp_path, tiny_clm_dir):
    """Issue 47, item 5: triples dropped for want of an alias were counted in metadata.json only; the terminal said
    '1 test queries x 3 candidates' and nothing else.  A DeerWarning now says how many of each split were dropped, how many
    kept, why, and which ids; the CLI shows it, and the returned result and metadata.json hold the counts."""
    import json

    from click.testing import CliRunner

    import deer
    from deer.platform.validate import DeerWarning
    from experiments.cli import main

    folder = write_wikidata5m(tmp_path / "w5m")
    with pytest.warns(DeerWarning) as caught:
        kg = load_wikidata5m(folder)
    dropped = kg.notes["triples_dropped_without_alias"]
    said = " ".join(str(w.message) for w in caught)
    for split in ("train", "test"):
        read = _lines(WIKIDATA5M_FILES[f"wikidata5m_transductive_{split}.txt"])
        assert f"{split}: {dropped[split]} of {read} triples dropped, {read - dropped[split]} kept" in said, said
    assert "valid:" not in said and "Q5" in said and "P7" in said and "Q4" in said and "alias" in said
    run = CliRunner().invoke(main, ["probe", "--kg", str(folder), "--model", str(tiny_clm_dir), "--k-shot", "0",
                                    "--out", str(tmp_path / "out")], env={"DEER_CACHE_DIR": str(tmp_path / "cache")})
    assert run.exit_code == 0, run.output
    test_read = _lines(WIKIDATA5M_FILES["wikidata5m_transductive_test.txt"])
    assert f"Warning: Wikidata5M {folder}: " in run.output
    assert f"test: {dropped['test']} of {test_read} triples dropped, {test_read - dropped['test']} kept" in run.output
    metadata = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert metadata["deer"]["kg"]["notes"]["triples_dropped_without_alias"] == dropped
    with pytest.warns(DeerWarning, match=r"test: \d+ of \d+ triples dropped"):
        result = deer.probe(str(folder), str(tiny_clm_dir), k_shot=0, show_progress=False)
    assert result.metadata_of("deer")["kg"]["notes"]["triples_dropped_without_alias"] == dropped
    assert len(result.table) == test_read - dropped["test"]


DROP_RULES = {  # a triple left out, and the id the warning names for it
    "head without an alias line": ("Q77\tP1\tQ2\n", "Q77"),
    "tail without an alias line": ("Q1\tP1\tQ77\n", "Q77"),
    "relation without an alias line": ("Q1\tP77\tQ2\n", "P77"),
    "head with a blank first alias": ("Q4\tP1\tQ2\n", "Q4"),
}


@pytest.mark.parametrize("split", ["train", "valid", "test"])
@pytest.mark.parametrize("rule", list(DROP_RULES))
def test_every_drop_rule_in_every_split_is_said_with_its_count(tmp_path, rule, split):
    """The class of item 5: each way a Wikidata5M row is left out (a triple for each reason, in each split; a second
    text of an id) is said in a DeerWarning with the count read, the count dropped and the id."""
    from deer.platform.validate import DeerWarning

    name = f"wikidata5m_transductive_{split}.txt"
    line, named = DROP_RULES[rule]
    folder = write_wikidata5m(tmp_path / "w5m", **{name: WIKIDATA5M_FILES[name] + line})
    with pytest.warns(DeerWarning) as caught:
        kg = load_wikidata5m(folder)
    dropped = kg.notes["triples_dropped_without_alias"][split]
    read = _lines(WIKIDATA5M_FILES[name]) + 1
    said = [str(w.message) for w in caught if f"{split}: " in str(w.message)]
    assert len(said) == 1 and f"{split}: {dropped} of {read} triples dropped, {read - dropped} kept" in said[0]
    assert named in said[0] and len(kg.splits[split]) == read - dropped


def test_a_second_text_of_an_id_is_said(tmp_path):
    from deer.platform.validate import DeerWarning

    text = WIKIDATA5M_FILES["wikidata5m_text.txt"] + "Q1\tA second text.\nQ1\tA third text.\n"
    with pytest.warns(DeerWarning, match=r"wikidata5m_text.txt: 2 lines give an id a second text"):
        load_wikidata5m(write_wikidata5m(tmp_path / "w5m", **{"wikidata5m_text.txt": text}))


def test_a_folder_that_drops_nothing_says_nothing(tmp_path):
    import warnings

    plain = {"wikidata5m_entity.txt": "Q1\tBerlin\nQ2\tGermany\nQ3\tParis\n", "wikidata5m_text.txt": "Q1\tA city.\n",
             "wikidata5m_transductive_train.txt": "Q1\tP1\tQ2\n", "wikidata5m_transductive_test.txt": "Q1\tP2\tQ3\n"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kg = load_wikidata5m(write_wikidata5m(tmp_path / "w5m", **plain))
    assert kg.notes["triples_dropped_without_alias"] == {"train": 0, "valid": 0, "test": 0}


@pytest.mark.parametrize("file_name", list(WIKIDATA5M_FILES))
def test_a_missing_wikidata5m_file_is_named_not_read_as_a_tsv_kg(tmp_path, file_name):
    """Issue 47, item 6: a Wikidata5M folder without its test file was read as a TSV KG ('entities.tsv: missing file');
    any one missing file is now named, with the published archive it comes from."""
    from kg_data.load import load_kg
    from kg_data.wikidata5m import ARCHIVES

    folder = write_wikidata5m(tmp_path / "w5m")
    (folder / file_name).unlink()
    with pytest.raises(KGFormatError) as error:
        load_kg(folder)
    assert str(error.value).startswith(f"{folder / file_name}: missing Wikidata5M file")
    assert ARCHIVES[file_name] in str(error.value) and "entities.tsv" not in str(error.value)


@pytest.mark.parametrize("file_name", list(WIKIDATA5M_FILES))
@pytest.mark.parametrize("fault, problem", [("empty", "empty file (0 bytes)"), ("blank", "holds only blank lines"),
                                            ("gzip", "is gzip-compressed, not text: decompress it")])
def test_an_empty_or_compressed_wikidata5m_file_is_named_for_what_it_is(tmp_path, file_name, fault, problem):
    """Issue 47, item 6: an empty file read 'not a plain tab-separated UTF-8 file', gzip bytes 'looks like UTF-16 (NUL
    bytes)'."""
    import gzip

    folder = write_wikidata5m(tmp_path / "w5m")
    content = {"empty": b"", "blank": b"\n\n", "gzip": gzip.compress(WIKIDATA5M_FILES[file_name].encode())}[fault]
    (folder / file_name).write_bytes(content)
    with pytest.raises(KGFormatError) as error:
        load_wikidata5m(folder)
    assert str(error.value).startswith(f"{folder / file_name}: {problem}"), str(error.value)


@pytest.mark.parametrize("other", ["entities.tsv", "relations.jsonl", "entity2text.txt"])
def test_a_folder_with_wikidata5m_and_another_kg_is_ambiguous(tmp_path, other):
    """Issue 47, item 12: a folder with Wikidata5M's files and a TSV KG's was read as Wikidata5M, the TSV files ignored
    without a word; it is refused, naming both KGs' files (WN18RR's too)."""
    from kg_data.load import load_kg

    folder = write_wikidata5m(tmp_path / "w5m")
    (folder / other).write_text("e0\tdog\n")
    with pytest.raises(KGFormatError) as error:
        load_kg(folder)
    message = str(error.value)
    assert message.startswith(f"{folder}: ambiguous") and other in message and "wikidata5m_entity.txt" in message


def test_wikidata5m_refuses_a_carriage_return_inside_a_line(tmp_path):
    from kg_data.wikidata5m import load_wikidata5m

    folder = write_wikidata5m(tmp_path / "w5m", **{"wikidata5m_text.txt": "Q1\tBerlin is\rthe capital.\nQ9\tUnused.\n"})
    with pytest.raises(KGFormatError, match=r"wikidata5m_text.txt:1: .*carriage return"):
        load_wikidata5m(folder)
