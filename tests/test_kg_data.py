"""KG readers: WN18RR sizes and texts, the generic TSV/JSONL format, and file:line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kg_data.locate as locate
from kg_data import KGFormatError, KGNotFoundError, build_queries, known_tails, load_kg
from kg_data.textual import load_textual_kg
from kg_data.wn18rr import split_entity_text


@pytest.fixture(scope="module")
def wn18rr():
    return load_kg("wn18rr")


def test_wn18rr_sizes(wn18rr):
    assert wn18rr.n_entities == 40943
    assert wn18rr.n_relations == 11
    assert [len(wn18rr.triples(s)) for s in ("train", "valid", "test")] == [86835, 3034, 3134]


def test_wn18rr_texts(wn18rr):
    stool = wn18rr.entity_index["14854262"]
    assert wn18rr.entity_names[stool] == "stool"
    assert wn18rr.entity_descriptions[stool] == "solid excretory product evacuated from the bowels"
    assert "derivationally related form" in wn18rr.relation_names
    assert all(not name.startswith("_") and "_" not in name for name in wn18rr.relation_names)
    assert all(wn18rr.entity_descriptions), "empty descriptions must become '-'"


def test_split_entity_text_at_first_comma():
    assert split_entity_text("saxony, an area in Germany, near x") == ("saxony", "an area in Germany, near x")
    assert split_entity_text("lonely") == ("lonely", "")


def test_missing_data_names_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("DEER_DATA_DIR", str(tmp_path / "nowhere"))

    monkeypatch.setattr(locate, "default_data_dirs", lambda: [tmp_path / "default"])
    from kg_data.locate import find_dataset

    with pytest.raises(KGNotFoundError) as error:
        find_dataset("wn18rr", data_dir=tmp_path / "given")
    # a folder given is the only one searched: the message names it and what it lacks, no other root
    assert f"--data-dir {tmp_path / 'given'} holds no 'wn18rr' data set" in str(error.value)
    assert str(tmp_path / "given" / "wn18rr" / "entity2text.txt") in str(error.value)
    assert str(tmp_path / "default") not in str(error.value) and str(tmp_path / "nowhere") not in str(error.value)
    with pytest.raises(KGNotFoundError) as error:
        find_dataset("wn18rr")
    assert str(tmp_path / "nowhere") in str(error.value) and str(tmp_path / "default") in str(error.value)
    assert "--data-dir" in str(error.value)


def test_a_data_dir_that_is_the_other_bear_folder_is_not_taken_for_it(tmp_path, monkeypatch):
    """Audit E3: BEAR and BEAR-big share their marker file, and a --data-dir that is a data set's folder itself was taken as
    whichever of the two was asked for ('bear' loaded BEAR-big, under the name 'bear').  The folder's name now decides."""
    from kg_data.bear import load_bear_dataset
    from kg_data.locate import find_dataset
    from tests.benchmark_folders import write_dataset

    monkeypatch.delenv("DEER_DATA_DIR", raising=False)
    monkeypatch.setattr(locate, "default_data_dirs", lambda: [tmp_path / "default"])
    big, small = (write_dataset(tmp_path / "data" / "bear" / folder) for folder in ("BEAR-big", "BEAR"))
    assert find_dataset("bear-big", big) == big and find_dataset("bear", small) == small
    assert find_dataset("bear", tmp_path / "data") == small and find_dataset("bear-big", tmp_path / "data") == big
    for name, folder, other in (("bear", big, "bear-big"), ("bear-big", small, "bear")):
        with pytest.raises(ValueError) as error:
            find_dataset(name, folder)
        assert not isinstance(error.value, KGNotFoundError)  # not a data set to fetch into that folder
        message = str(error.value)
        assert f"--data-dir {folder}" in message and f"'{other}'" in message and f"'{name}'" in message
        with pytest.raises(ValueError, match=f"'{other}'"):
            load_bear_dataset(name, data_dir=folder)
    monkeypatch.setenv("DEER_DATA_DIR", str(big))  # not named on purpose: looked past, as any other root without it
    with pytest.raises(KGNotFoundError, match="BEAR-big"):
        find_dataset("bear")
    assert find_dataset("bear-big") == big


def test_generic_tsv_reader(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    assert kg.n_entities == 12 and kg.n_relations == 3
    assert len(kg.triples("train")) == 9 and len(kg.triples("test")) == 4
    assert kg.entity_descriptions[kg.entity_index["e9"]] == "-"
    assert kg.relation_names[kg.relation_index["capital_of"]] == "capital of"


def test_generic_jsonl_reader(tmp_path):
    folder = tmp_path / "kg"
    folder.mkdir()
    (folder / "entities.jsonl").write_text(
        json.dumps({"id": "a", "name": "alpha", "description": "first"}) + "\n" + json.dumps({"id": "b", "name": "beta"}) + "\n"
    )
    (folder / "relations.jsonl").write_text(json.dumps({"id": "r", "name": "related to"}) + "\n")
    (folder / "test.jsonl").write_text(json.dumps({"head": "a", "relation": "r", "tail": "b"}) + "\n")
    kg = load_kg(str(folder))
    assert kg.entity_names == ["alpha", "beta"] and kg.entity_descriptions == ["first", "-"]
    assert kg.triples("test").tolist() == [[0, 0, 1]]


def _break(folder, file_name, text, mode="w"):
    path = folder / file_name
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    "file_name, content, line, problem",
    [
        ("test.tsv", "e6\tcapital_of\te7\ne10\t_hypernym\tnope\n", 2, "unknown tail entity id 'nope'"),
        ("test.tsv", "e6\tcapital_of\te7\nghost\t_hypernym\te9\n", 2, "unknown head entity id 'ghost'"),
        ("train.tsv", "e0\t_hypernym\te3\ne1\te3\n", 2, "expected 3 tab-separated columns, found 2"),
        ("entities.tsv", "e0\tdog\tx\ne1\tcat\ty\ne0\tdoggo\tz\n", 3, "duplicate entity id 'e0'"),
        ("entities.tsv", "e0\tdog\tx\ne1\t \ty\n", 2, "empty name for entity 'e1'"),
        ("test.tsv", "e6\tunknown_rel\te7\n", 1, "unknown relation id 'unknown_rel'"),
    ],
)
def test_bad_files_name_file_line_and_problem(tiny_kg_dir, file_name, content, line, problem):
    path = _break(tiny_kg_dir, file_name, content)
    with pytest.raises(KGFormatError) as error:
        load_textual_kg(tiny_kg_dir)
    assert error.value.path == str(path)
    assert error.value.line == line
    assert problem in str(error.value)
    assert f"{path}:{line}" in str(error.value)


def test_bad_encoding_is_reported_with_line(tiny_kg_dir):
    path = _break(tiny_kg_dir, "entities.tsv", "e0\tdog\tx\ne1\tca\xfft\ty\n".encode("latin-1"), mode="wb")
    with pytest.raises(KGFormatError) as error:
        load_textual_kg(tiny_kg_dir)
    assert error.value.line == 2 and "UTF-8" in str(error.value) and error.value.path == str(path)


def test_invalid_jsonl_line(tmp_path):
    folder = tmp_path / "kg"
    folder.mkdir()
    (folder / "entities.jsonl").write_text('{"id": "a", "name": "alpha"}\n{"id": "b" "name": "beta"}\n')
    (folder / "relations.jsonl").write_text('{"id": "r", "name": "r"}\n')
    (folder / "test.jsonl").write_text('{"head": "a", "relation": "r", "tail": "a"}\n')
    with pytest.raises(KGFormatError) as error:
        load_kg(str(folder))
    assert error.value.line == 2 and "invalid JSON" in str(error.value)


def test_queries_and_filter_on_tiny_kg(tiny_kg_dir):
    kg = load_textual_kg(tiny_kg_dir)
    queries = build_queries(kg, "test")
    assert len(queries) == 4 and len(queries.candidates) == 12
    index = kg.entity_index
    # (e0, _hypernym, ?) has true tails e3 (gold, test and train) and e2 (train): e2 is filtered.
    row = [i for i, t in enumerate(queries.triples.tolist()) if t[0] == index["e0"]][0]
    assert queries.gold[row] == index["e3"]
    assert queries.filter_tails[row].tolist() == [index["e2"]]
    # e10 _hypernym: gold e9 (test), e8 (train) filtered
    row = [i for i, t in enumerate(queries.triples.tolist()) if t[0] == index["e10"]][0]
    assert queries.filter_tails[row].tolist() == [index["e8"]]


def test_subset_protocol(wn18rr):
    queries = build_queries(wn18rr, "test", subset=500, seed=0)
    assert len(queries) == 500
    expected = np.unique(np.concatenate([queries.triples[:, 0], queries.triples[:, 2]]))
    assert queries.candidates.tolist() == expected.tolist()
    assert np.all(queries.candidates[queries.gold] == queries.triples[:, 2])
    again = build_queries(wn18rr, "test", subset=500, seed=0)
    assert again.triples.tolist() == queries.triples.tolist()
    other = build_queries(wn18rr, "test", subset=500, seed=1)
    assert other.triples.tolist() != queries.triples.tolist()


def test_filter_matches_brute_force(wn18rr):
    queries = build_queries(wn18rr, "test", subset=300, seed=3)
    all_triples = {tuple(t) for t in wn18rr.all_triples().tolist()}
    candidate_set = set(queries.candidates.tolist())
    for (head, relation, tail), filtered in zip(queries.triples.tolist(), queries.filter_tails, strict=True):
        expected = sorted(
            int(np.searchsorted(queries.candidates, e))
            for e in candidate_set
            if e != tail and (head, relation, e) in all_triples
        )
        assert filtered.tolist() == expected
    assert sum(len(tails) for tails in known_tails(wn18rr).values()) == 93003


def test_readers_take_a_path_as_well_as_a_string(tiny_kg_dir, tmp_path):
    from pathlib import Path

    from kg_data.bear import load_bear_dataset
    from tests.benchmark_folders import write_dataset

    assert load_kg(Path(tiny_kg_dir)).fingerprint() == load_kg(str(tiny_kg_dir)).fingerprint()
    folder = write_dataset(tmp_path / "BEARmini")
    assert list(load_bear_dataset(Path(folder)).relations) == list(load_bear_dataset(str(folder)).relations)


def test_one_cache_root_holds_fetched_data_and_models(tmp_path, monkeypatch):
    """$DEER_CACHE_DIR moves the fetched data, the converted models and the stores together."""
    from deer.backends.models import cache_root as models_cache_root
    from deer.platform.inputs import store_root
    from kg_data.fetch import data_root

    monkeypatch.setenv("DEER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DEER_DATA_DIR", raising=False)
    assert locate.cache_root() == models_cache_root() == tmp_path / "cache"
    assert data_root() == tmp_path / "cache" / "data" == locate.default_data_dirs()[-1]
    assert store_root(True, None) == tmp_path / "cache"


@pytest.mark.parametrize("spelling", [".", "./", "sub/.."])
def test_a_kg_folder_given_relative_is_named_and_recorded_as_the_folder_it_is(tiny_kg_dir, monkeypatch, spelling):
    """`deer probe --kg .` named the KG '' and recorded its source as '.': the metadata did not say which folder ran."""
    (tiny_kg_dir / "sub").mkdir()
    monkeypatch.chdir(tiny_kg_dir)
    kg = load_kg(spelling)
    assert (kg.name, kg.source) == (tiny_kg_dir.name, str(tiny_kg_dir.resolve()))


# -- every text reader x every way a file's bytes are not text (issue 47, item 6) ----------------------------------


def _zip(name: str, data: bytes) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(name, data)
    return buffer.getvalue()


def _tar(name: str, data: bytes) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        member = tarfile.TarInfo(name)
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def _zstd(data: bytes) -> bytes:
    try:
        from compression import zstd  # Python 3.14
    except ImportError:  # its frame's magic number before the data, as the check reads only that
        return b"\x28\xb5\x2f\xfd" + data
    return zstd.compress(data)


# fault: (the file's bytes made from its good ones and name, the line named, what the message says)
TEXT_FAULTS = {
    "gzip": (lambda data, name: __import__("gzip").compress(data), None, "is gzip-compressed, not text: decompress it"),
    "bzip2": (lambda data, name: __import__("bz2").compress(data), None, "is bzip2-compressed, not text: decompress it"),
    "xz": (lambda data, name: __import__("lzma").compress(data), None, "is xz-compressed, not text: decompress it"),
    "zstd": (lambda data, name: _zstd(data), None, "is zstd-compressed, not text: decompress it"),
    "zip": (lambda data, name: _zip(name, data), None, "is a zip archive, not text: decompress it (unzip"),
    "7z": (lambda data, name: b"7z\xbc\xaf\x27\x1c" + data, None, "is a 7-Zip archive, not text"),
    "tar": (lambda data, name: _tar(name, data), None, "is a tar archive, not text: extract it"),
    "utf-16 with its mark": (lambda data, name: data.decode().encode("utf-16"), 1, "starts with a UTF-16 byte-order mark"),
    "utf-16-le": (lambda data, name: data.decode().encode("utf-16-le"), 1, "looks like UTF-16 (NUL bytes)"),
    "utf-16-be": (lambda data, name: data.decode().encode("utf-16-be"), 1, "looks like UTF-16 (NUL bytes)"),
    "binary": (lambda data, name: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8, None, "is binary data"),
}


def _tsv_kg(tmp_path):
    from tests.conftest import write_tiny_kg

    return write_tiny_kg(tmp_path / "kg")


def _jsonl_kg(tmp_path):
    from tests.kg_folders import write_jsonl_kg

    return write_jsonl_kg(tmp_path / "kg")


def _wn18rr_kg(tmp_path):
    from tests.kg_faults import _wn18rr_format

    return _wn18rr_format(tmp_path) / "wn18rr"


def _wikidata5m_kg(tmp_path):
    from tests.kg_folders import write_wikidata5m

    return write_wikidata5m(tmp_path / "w5m")


def _lama(tmp_path):
    from tests.benchmark_folders import write_lama

    return write_lama(tmp_path / "lama")


def _bear(tmp_path):
    from tests.benchmark_folders import write_dataset

    return write_dataset(tmp_path / "BEARmini")


def _load_bear(folder):
    from kg_data.bear import load_bear_dataset

    return load_bear_dataset(folder)


def _load_lama(folder):
    from kg_data.lama import load_lama

    return load_lama(folder)


# reader: (builder, loader, its files, what an empty file of each says: a message, or None where an empty file is read)
NO_SPLIT = None  # an empty split file of the user's own KG is a split without triples (probing it names the file)
TEXT_READERS = {
    "tsv": (_tsv_kg, load_kg, {"entities.tsv": ": no entities", "relations.tsv": ": no relations", "train.tsv": NO_SPLIT,
                               "test.tsv": NO_SPLIT}),
    "tsv read in bulk": (_tsv_kg, load_kg, {"entities.tsv": ": no entities", "train.tsv": NO_SPLIT}),
    "jsonl": (_jsonl_kg, load_kg, {"entities.jsonl": ": no entities", "relations.jsonl": ": no relations",
                                   "test.jsonl": NO_SPLIT}),
    "wn18rr": (_wn18rr_kg, load_kg, {"entity2text.txt": ": no entities", "test.tsv": NO_SPLIT}),
    "wikidata5m": (_wikidata5m_kg, load_kg, dict.fromkeys(
        ["wikidata5m_entity.txt", "wikidata5m_relation.txt", "wikidata5m_text.txt", "wikidata5m_transductive_train.txt",
         "wikidata5m_transductive_valid.txt", "wikidata5m_transductive_test.txt"], ": empty file (0 bytes)")),
    "lama": (_lama, _load_lama, {"relations.jsonl": ": empty file (0 bytes)", "TREx/P19.jsonl": ": no facts",
                                 "Google_RE/place_of_birth_test.jsonl": ": no facts", "Squad/test.jsonl": ": no facts",
                                 "common_vocab_cased.txt": None}),
    "bear": (_bear, _load_bear, {"metadata_relations.json": ": empty file (0 bytes)", "P36.jsonl": ": no instances",
                                 "../relation_info.json": ": empty file (0 bytes)"}),
}
TEXT_FILES = [(reader, name) for reader, (_, _, files) in TEXT_READERS.items() for name in files]


def _bulk(monkeypatch, reader):
    if reader == "tsv read in bulk":
        import kg_data.kg
        import kg_data.textual

        monkeypatch.setattr(kg_data.kg, "BULK_BYTES", 0)
        monkeypatch.setattr(kg_data.textual, "BULK_BYTES", 0)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("fault", list(TEXT_FAULTS))
@pytest.mark.parametrize(("reader", "name"), TEXT_FILES, ids=[f"{r}:{n}" for r, n in TEXT_FILES])
def test_every_reader_names_a_file_that_is_not_text_for_what_it_is(tmp_path, monkeypatch, reader, name, fault):
    """A file compressed, archived, in UTF-16 or binary is named for what it is (with how to get the text out of it) by
    every text reader, from one check (``kg_data.lines.check_text_file``), not for the first line it cannot read: gzip bytes
    read 'looks like UTF-16 (NUL bytes)', a zip 'expected 3 tab-separated columns'."""
    build, load, _ = TEXT_READERS[reader]
    folder = build(tmp_path)
    _bulk(monkeypatch, reader)
    path = (folder / name).resolve()
    make, line, problem = TEXT_FAULTS[fault]
    path.write_bytes(make(path.read_bytes(), path.name))
    with pytest.raises(KGFormatError) as error:
        load(folder)
    assert (error.value.path, error.value.line) == (str(path), line), str(error.value)
    assert str(error.value).startswith(f"{path}{'' if line is None else f':{line}'}: {problem}"), str(error.value)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("reader", "name"), TEXT_FILES, ids=[f"{r}:{n}" for r, n in TEXT_FILES])
def test_every_reader_says_what_an_empty_file_means(tmp_path, monkeypatch, reader, name):
    """An empty file is named as empty (or for what its emptiness leaves: no entities, no facts), never as a file that
    is not plain text; where an empty file is read (a split without triples, no common vocabulary) it loads."""
    build, load, files = TEXT_READERS[reader]
    folder = build(tmp_path)
    _bulk(monkeypatch, reader)
    path = (folder / name).resolve()
    path.write_bytes(b"")
    if files[name] is None:
        load(folder)
        return
    with pytest.raises(KGFormatError) as error:
        load(folder)
    assert error.value.path == str(path) and str(error.value).startswith(f"{path}{files[name]}"), str(error.value)


LAYOUT_FILES = {"WN18RR": _wn18rr_kg, "Wikidata5M": _wikidata5m_kg, "TSV/JSONL": _tsv_kg}


@pytest.mark.parametrize("layouts", [("WN18RR", "Wikidata5M"), ("WN18RR", "TSV/JSONL"), ("Wikidata5M", "TSV/JSONL"),
                                     ("WN18RR", "Wikidata5M", "TSV/JSONL")])
def test_a_folder_holding_two_kgs_is_refused_naming_both(tmp_path, layouts):
    """Issue 47, item 12: a folder holding Wikidata5M's files and a TSV KG's was read as Wikidata5M (WN18RR's beside a TSV
    KG's as WN18RR), the other files ignored without a word.  Every mix of the KG layouts is refused, naming each one's files."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    for layout in layouts:
        for path in LAYOUT_FILES[layout](tmp_path / layout.replace("/", "-")).iterdir():
            if not (folder / path.name).exists():
                (folder / path.name).write_bytes(path.read_bytes())
    with pytest.raises(KGFormatError) as error:
        load_kg(folder)
    message = str(error.value)
    assert message.startswith(f"{folder}: ambiguous") and all(f"{layout}'s (" in message for layout in layouts), message
    from kg_data.load import folder_layouts

    assert list(folder_layouts(folder)) == list(layouts)
