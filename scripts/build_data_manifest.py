"""Maintainer tool: rebuild kg_data/manifest.json from a local copy of the data (shared/data) and check it.

Usage: python scripts/build_data_manifest.py kg_data/manifest.json
Checks every file against the README tables of shared/data and against the upstream git blob ids
(needs the upstream repositories mirrored under /work/.mirror, e.g. with the `fetch` tool)."""
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path("/work/shared/data")
MIRROR = Path("/work/.mirror")
KGBERT = ("yao8839836/kg-bert", "0b8f625108efcb9b43603b6840f2548ff3d3c973")
BEAR = ("lm-pub-quiz/BEAR", "3818fdc029d335b603631255c135d2a87b0bd24d")
KNN = ("norakassner/BERT-kNN", "f9c832b3a9851ce4e0b19592e0092df90e5a3fee")
OPTI = ("princeton-nlp/OptiPrompt", "9450bc96f28ac3df01337c79be079a2ac3defb5c")


def upstream(rel):
    """(repo, commit, path in repo) for a path relative to the data root."""
    top, rest = rel.split("/", 1)
    if top == "wn18rr":
        return KGBERT + ("data/WN18RR/" + rest,)
    if top == "bear":
        return BEAR + (rest,)
    if rest == "common_vocab_cased.txt":
        return OPTI + ("common_vocabs/common_vocab_cased.txt",)
    return KNN + ("data/" + rest,)


def readme_table(folder):
    rows = {}
    for line in (ROOT / folder / "README.md").read_text().splitlines():
        m = re.match(r"\|\s*([^|]+?)\s*\|\s*(\d+)\s*\|[^|]*\|\s*`([0-9a-f]{64})`", line)
        if m:
            rows[f"{folder}/{m[1]}"] = (int(m[2]), m[3])
    return rows


def git_blob(repo, commit, path):
    git = MIRROR / repo.replace("/", "+") / "repo"
    out = subprocess.run(["git", "-C", str(git), "ls-tree", commit, "--", path], capture_output=True, text=True).stdout.split()
    return out[2] if len(out) >= 3 else None


entries = {}
for f in sorted(p for p in ROOT.rglob("*") if p.is_file() and p.name != "README.md"):
    rel = f.relative_to(ROOT).as_posix()
    data = f.read_bytes()
    repo, commit, path = upstream(rel)
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    entries[rel] = dict(path=rel, url=f"https://raw.githubusercontent.com/{repo}/{commit}/{path}",
                        bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), _up=(repo, commit, path, blob))

problems = []
for folder in ("wn18rr", "bear", "lama"):
    table = readme_table(folder)
    here = {k for k in entries if k.startswith(folder + "/")}
    for k in sorted(set(table) ^ here):
        problems.append(f"{k}: {'only in README' if k in table else 'not in README table'}")
    for k in sorted(set(table) & here):
        if table[k] != (entries[k]["bytes"], entries[k]["sha256"]):
            problems.append(f"{k}: README {table[k]} != disk {(entries[k]['bytes'], entries[k]['sha256'])}")
for k, e in entries.items():
    repo, commit, path, blob = e.pop("_up")
    up = git_blob(repo, commit, path)
    if up != blob:
        problems.append(f"{k}: upstream blob {up} at {repo}@{commit[:7]}:{path} != disk {blob}")

def files(prefix, extra=()):
    return [entries[k] for k in entries if k.startswith(prefix)] + [entries[k] for k in extra]

bear_top = ["bear/bear_lite_indices.json", "bear/relation_info.json"]
lic = {
    "wn18rr": "WordNet 3.0 license (BSD-style, keep the Princeton notice); KG-BERT repo Apache-2.0",
    "bear": "CC BY-SA 4.0 (authors' dataset card; repo has no LICENSE); facts from Wikidata (CC0)",
    "lama": "CC BY-NC 4.0 (facebookresearch/LAMA): non-commercial use only",
}
manifest = {
    "_about": "Files of each named data set: path relative to the data root, upstream raw URL at the pinned commit, bytes, sha256; "
              "marker: the file kg_data.locate._looks_like checks (fetched last). Generated from shared/data (see each folder's README.md); no data is committed.",
    "wn18rr": dict(repo=KGBERT[0], commit=KGBERT[1], license=lic["wn18rr"], marker="wn18rr/entity2text.txt", files=files("wn18rr/")),
    "bear": dict(repo=BEAR[0], commit=BEAR[1], license=lic["bear"], marker="bear/BEAR/metadata_relations.json", files=files("bear/BEAR/", bear_top)),
    "bear-big": dict(repo=BEAR[0], commit=BEAR[1], license=lic["bear"], marker="bear/BEAR-big/metadata_relations.json", files=files("bear/BEAR-big/", bear_top)),
    "lama": dict(repo=KNN[0], commit=KNN[1], license=lic["lama"], marker="lama/relations.jsonl",
                 note="common_vocab_cased.txt from princeton-nlp/OptiPrompt@" + OPTI[1], files=files("lama/")),
}
def dump(obj):
    """JSON with one line per file, so diffs stay readable."""
    out = ["{"]
    for i, (key, value) in enumerate(obj.items()):
        comma = "," if i < len(obj) - 1 else ""
        if not isinstance(value, dict):
            out.append(f" {json.dumps(key)}: {json.dumps(value)}{comma}")
            continue
        out.append(f" {json.dumps(key)}: {{")
        for k, v in value.items():
            if k != "files":
                out.append(f"  {json.dumps(k)}: {json.dumps(v)},")
        out.append('  "files": [')
        out += [f"   {json.dumps(f)}" + ("," if j < len(value["files"]) - 1 else "") for j, f in enumerate(value["files"])]
        out.append(f"  ]\n }}{comma}")
    return "\n".join(out) + "\n}\n"


Path(sys.argv[1]).write_text(dump(manifest))
assert json.loads(Path(sys.argv[1]).read_text()) == manifest
print(len(entries), "files;", "problems:" if problems else "no disagreements", *problems, sep="\n")
