"""kg_data.fetch against a local HTTP server that serves the shared data folder (no internet)."""

from __future__ import annotations

import http.server
import socket
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

import kg_data.locate as locate
from experiments.cli import main
from kg_data import KGNotFoundError, find_dataset, load_kg
from kg_data.bear import load_bear_dataset
from kg_data.fetch import STAGING_DIR, DataFetchError, ensure_dataset, fetch_dataset, load_manifest

try:
    SHARED = find_dataset("wn18rr").parent  # the data root, found the way the code finds it
except KGNotFoundError:
    SHARED = None

pytestmark = pytest.mark.skipif(SHARED is None, reason="shared data (wn18rr/, bear/, lama/) not found")
MANIFEST = load_manifest()
WN18RR_FILES = [spec["path"] for spec in MANIFEST["wn18rr"]["files"]]


class Server(http.server.ThreadingHTTPServer):
    """Serves SHARED; records (path, Range) per request; can alter or cut files."""

    def __init__(self, tamper=(), cut_once=(), honour_range=True):
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[tuple[str, str | None]] = []
        self.tamper, self.cut_once, self.honour_range = set(tamper), set(cut_once), honour_range

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        self.server.requests.append((rel, self.headers.get("Range")))
        file = SHARED / rel
        if ".." in rel or not file.is_file():
            return self.send_error(404)
        data = file.read_bytes()
        if rel in self.server.tamper:
            data = data[:-1] + bytes([data[-1] ^ 1])  # same size, other bytes
        start = 0
        if self.server.honour_range and (self.headers.get("Range") or "").startswith("bytes="):
            start = int(self.headers["Range"][len("bytes="):].rstrip("-"))
        body = data[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if rel in self.server.cut_once:
            # Half the file, then the connection closes (HTTP/1.0): the client sees a short read.
            self.server.cut_once.discard(rel)
            self.wfile.write(body[: len(body) // 2])
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(**options) -> Server:
        server = Server(**options)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def local_only(monkeypatch):
    """No test reaches beyond 127.0.0.1; the shared data is never "found" as a fallback."""
    real = urllib.request.urlopen

    def guarded(request, *args, **kwargs):
        host = urllib.parse.urlsplit(getattr(request, "full_url", request)).hostname
        assert host == "127.0.0.1", f"a test tried to reach {host}"
        return real(request, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", guarded)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setattr(locate, "default_data_dirs", lambda: [])
    for name in ("DEER_DATA_DIR", "DEER_DATA_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEER_OFFLINE", "1")  # only explicit tests turn it off


def same_bytes(root: Path, paths) -> bool:
    return all((root / p).read_bytes() == (SHARED / p).read_bytes() for p in paths)


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name == STAGING_DIR or p.suffix == ".part"]


def not_found(name: str, root: Path) -> bool:
    with pytest.raises(KGNotFoundError):
        find_dataset(name, root)
    return True


def test_manifest_agrees_with_shared_data_and_locate(tmp_path):
    for name, entry in MANIFEST.items():
        if name not in locate.NAMED_DATASETS:
            continue
        paths = [spec["path"] for spec in entry["files"]]
        assert entry["marker"] in paths and len(set(paths)) == len(paths)
        marker = tmp_path / name / entry["marker"]
        marker.parent.mkdir(parents=True)
        marker.touch()  # the marker alone is what find_dataset checks
        assert locate._looks_like(name, tmp_path / name / locate.NAMED_DATASETS[name])
        for spec in entry["files"]:
            assert (SHARED / spec["path"]).stat().st_size == spec["bytes"], spec["path"]
            assert spec["url"].startswith("https://raw.githubusercontent.com/") and len(spec["sha256"]) == 64
    assert set(locate.NAMED_DATASETS) - set(locate.MANUAL_DATASETS) <= set(MANIFEST)  # the rest: not pinned here


def test_fetch_wn18rr_byte_identical_and_loads(tmp_path, serve):
    server = serve()
    folder = fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    assert folder == tmp_path / "wn18rr" == find_dataset("wn18rr", tmp_path)
    assert same_bytes(tmp_path, WN18RR_FILES) and not leftovers(tmp_path)
    assert sorted(path for path, _ in server.requests) == sorted(WN18RR_FILES)
    assert server.requests[-1][0] == MANIFEST["wn18rr"]["marker"]  # the marker comes last
    assert load_kg("wn18rr", data_dir=tmp_path).n_entities == 40943


def test_second_fetch_downloads_nothing(tmp_path, serve):
    server = serve()
    fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    server.requests.clear()
    fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    assert server.requests == []


def test_checksum_mismatch_is_refused(tmp_path, serve):
    server = serve(tamper={"wn18rr/train.tsv"})
    with pytest.raises(DataFetchError) as error:
        fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    message = str(error.value)
    expected = next(s["sha256"] for s in MANIFEST["wn18rr"]["files"] if s["path"] == "wn18rr/train.tsv")
    assert "wn18rr/train.tsv" in message and expected in message and server.base_url in message
    assert not (tmp_path / "wn18rr" / "train.tsv").exists() and not leftovers(tmp_path)
    assert not_found("wn18rr", tmp_path)


@pytest.mark.parametrize("honour_range", [True, False], ids=["resume", "restart"])
def test_interrupted_download_completes_on_next_fetch(tmp_path, serve, honour_range):
    cut = "wn18rr/train.tsv"
    server = serve(cut_once={cut}, honour_range=honour_range)
    with pytest.raises(DataFetchError, match="train.tsv"):
        fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    assert not (tmp_path / cut).exists() and not_found("wn18rr", tmp_path)
    server.requests.clear()
    fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    # Only the cut file and the marker (never reached) are fetched again; the cut one resumes.
    assert [path for path, _ in server.requests] == [cut, MANIFEST["wn18rr"]["marker"]]
    assert server.requests[0][1] is not None and server.requests[0][1].startswith("bytes=")
    assert same_bytes(tmp_path, WN18RR_FILES) and not leftovers(tmp_path)
    assert find_dataset("wn18rr", tmp_path) == tmp_path / "wn18rr"


@pytest.mark.parametrize("how", ["argument", "env"])
def test_offline_refuses_and_says_where_to_put_files(tmp_path, monkeypatch, how):
    root = tmp_path / "data"
    monkeypatch.setenv("DEER_OFFLINE", "1" if how == "env" else "0")
    with pytest.raises(DataFetchError) as error:
        fetch_dataset("wn18rr", root, base_url="http://127.0.0.1:9", offline=True if how == "argument" else None)
    message = str(error.value)
    assert str(root / "wn18rr") in message and "DEER_DATA_DIR" in message and "deer data fetch wn18rr" in message
    assert MANIFEST["wn18rr"]["repo"] in message and MANIFEST["wn18rr"]["commit"] in message
    assert not root.exists()


def test_unreachable_server(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DataFetchError) as error:
        fetch_dataset("wn18rr", tmp_path, base_url=f"http://127.0.0.1:{port}", offline=False, show_progress=False)
    assert str(tmp_path / "wn18rr") in str(error.value) and "deer data fetch wn18rr" in str(error.value)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [] and not leftovers(tmp_path)


def test_hugging_face_offline_variables_are_honoured_and_a_failed_fetch_leaves_no_empty_folder(tmp_path, monkeypatch):
    """Issue 22.6: HF_HUB_OFFLINE=1 stops a fetch as DEER_OFFLINE=1 does (DEER_OFFLINE=0 overrides it); the
    message names the variable and the files expected; an unreachable server leaves no empty data folder."""
    monkeypatch.delenv("DEER_OFFLINE")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataFetchError) as error:
        ensure_dataset("wn18rr", tmp_path / "data")
    message = str(error.value)
    assert "Fetching is off (HF_HUB_OFFLINE=1; DEER_OFFLINE=0 turns it on)" in message
    assert f"Expected under the data root: {', '.join(WN18RR_FILES[:6])}" in message
    monkeypatch.setenv("DEER_OFFLINE", "0")  # the toolkit's own variable decides
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("DEER_DATA_BASE_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(DataFetchError, match="Could not download"):
        ensure_dataset("wn18rr", tmp_path / "data")
    assert [p for p in (tmp_path / "data").rglob("*") if p.is_dir()] == []


def test_ensure_dataset_fetches_when_missing(tmp_path, serve, monkeypatch, capsys):
    server = serve()
    root = tmp_path / "data"
    with pytest.raises(DataFetchError, match="holds no 'wn18rr' data set"):  # DEER_OFFLINE=1: the usual not-found message
        ensure_dataset("wn18rr", root)
    monkeypatch.delenv("DEER_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # honoured too (test_hugging_face_offline_variables_are_honoured)
    monkeypatch.setenv("DEER_DATA_BASE_URL", server.base_url)
    monkeypatch.setenv("DEER_DATA_DIR", str(root))
    assert ensure_dataset("wn18rr") == root / "wn18rr"
    entry = MANIFEST["wn18rr"]
    assert f"wn18rr not found locally; fetching it from {entry['repo']}@{entry['commit']} into {root / 'wn18rr'}" in capsys.readouterr().err
    assert same_bytes(root, WN18RR_FILES)
    server.requests.clear()
    assert ensure_dataset("wn18rr") == root / "wn18rr" and server.requests == []


def test_fetch_bear_then_bear_big_shares_top_level_files(tmp_path, serve):

    server = serve()
    assert fetch_dataset("bear", tmp_path, base_url=server.base_url, offline=False, show_progress=False) == tmp_path / "bear" / "BEAR"
    assert load_bear_dataset("bear", data_dir=tmp_path).n_instances == 7731
    server.requests.clear()
    fetch_dataset("bear-big", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    fetched = {path for path, _ in server.requests}
    assert fetched == {s["path"] for s in MANIFEST["bear-big"]["files"]} - {"bear/relation_info.json", "bear/bear_lite_indices.json"}
    assert same_bytes(tmp_path, [s["path"] for s in MANIFEST["bear-big"]["files"]]) and not leftovers(tmp_path)


def test_fetch_lama_with_a_small_manifest(tmp_path, serve):
    entry = dict(MANIFEST["lama"])
    entry["files"] = [s for s in entry["files"] if s["path"] in ("lama/relations.jsonl", "lama/Squad/test.jsonl")]
    server = serve()
    folder = fetch_dataset("lama", tmp_path, base_url=server.base_url, offline=False, show_progress=False, manifest={"lama": entry})
    assert folder == find_dataset("lama", tmp_path) == tmp_path / "lama"
    assert same_bytes(tmp_path, ["lama/relations.jsonl", "lama/Squad/test.jsonl"]) and not leftovers(tmp_path)


def test_repair_hides_the_data_set_until_complete(tmp_path, serve):
    server = serve()
    fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    cut = "wn18rr/train.tsv"
    (tmp_path / cut).write_bytes(b"damaged")
    server.cut_once.add(cut)
    server.requests.clear()
    with pytest.raises(DataFetchError, match="resumes"):
        fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    assert not_found("wn18rr", tmp_path)  # the marker waits in staging while train.tsv is broken
    fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    assert [path for path, _ in server.requests] == [cut, cut]  # the marker is not downloaded again
    assert same_bytes(tmp_path, WN18RR_FILES) and not leftovers(tmp_path)


def test_foreign_partial_file_is_downloaded_again(tmp_path, serve):
    server = serve()
    spec = next(s for s in MANIFEST["wn18rr"]["files"] if s["path"] == "wn18rr/dev.tsv")
    part = tmp_path / "wn18rr" / STAGING_DIR / "dev.tsv.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * (spec["bytes"] // 2))  # a half that belongs to no version of dev.tsv
    fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
    dev_requests = [rng for path, rng in server.requests if path == "wn18rr/dev.tsv"]
    assert dev_requests == [f"bytes={spec['bytes'] // 2}-", None]  # resumed, refused, fetched whole
    assert same_bytes(tmp_path, WN18RR_FILES) and not leftovers(tmp_path)


def test_cli_data_fetch(serve, tmp_path, monkeypatch):
    """`deer data fetch` fetches into --data-dir from --base-url; `deer data` then finds it; offline says where to put it."""
    from click.testing import CliRunner

    from experiments.cli import main

    server = serve()
    runner = CliRunner()
    offline = runner.invoke(main, ["data", "fetch", "wn18rr", "--data-dir", str(tmp_path / "empty"), "--offline"])
    assert offline.exit_code == 1 and "Traceback" not in offline.output
    assert str(tmp_path / "empty" / "wn18rr") in offline.output
    monkeypatch.delenv("DEER_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # honoured too
    fetched = runner.invoke(main, ["data", "fetch", "wn18rr", "--data-dir", str(tmp_path), "--base-url", server.base_url])
    assert fetched.exit_code == 0, fetched.output
    assert f"ready    {tmp_path / 'wn18rr'}" in fetched.output
    listing = runner.invoke(main, ["data", "--data-dir", str(tmp_path)])
    assert f"wn18rr    found    {tmp_path / 'wn18rr'}" in listing.output and "40943 entities" in listing.output


def test_processes_fetching_the_same_data_set_download_it_once(tmp_path, serve):
    """Bug 3: DDP ranks or Ray tasks resolving the same name raced (N downloads into one .part); the
    fetch now holds a cross-process lock per data set (flock locks open files, so two threads with
    their own lock files contend as two processes do): the second waits and downloads nothing."""
    server = serve()
    start = threading.Barrier(2)
    errors = []

    def fetch():
        try:
            start.wait()
            fetch_dataset("wn18rr", tmp_path, base_url=server.base_url, offline=False, show_progress=False)
        except Exception as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(path for path, _ in server.requests) == sorted(WN18RR_FILES)  # each file once
    assert same_bytes(tmp_path, WN18RR_FILES) and not leftovers(tmp_path)


def test_deer_data_fetch_reads_the_groups_data_dir(tmp_path):
    """`deer data --data-dir X fetch NAME` fetched into the default root, ignoring X."""
    result = CliRunner().invoke(main, ["data", "--data-dir", str(tmp_path / "mine"), "fetch", "wn18rr", "--offline"])
    assert result.exit_code == 1 and str(tmp_path / "mine" / "wn18rr") in result.output, result.output
