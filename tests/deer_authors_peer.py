"""Run the DEER authors' package (deer-probe 0.1.1) on a job and write what it produced as JSON.

Used by tests/test_deer_authors_parity.py in a subprocess with PYTHONPATH=.peers/deer-probe:
the package's top-level module is also named ``deer``, so it never shares an interpreter with
this project.  Not a test module (no ``test_`` prefix); it imports only the peer.

    python tests/deer_authors_peer.py JOB.json OUT.json

JOB: {"peer_dir": ..., "query_jobs": [{"triplets", "entity_id2text", "relation_id2text",
"fewshot_prompt", "entity_id2definition"}], "tail_jobs": [{"entities", "definitions"}],
"encode": {"model": FOLDER, "prompts": [...]} or null}
OUT: {"deer_file", "query_prompts": [[...] per query job], "tail_prompts": [[...] per tail job],
"embeddings": [[...] per prompt] or null}
"""

from __future__ import annotations

import contextlib
import json
import os
import sys


def main(job_path: str, out_path: str) -> None:
    with open(job_path, encoding="utf-8") as handle:
        job = json.load(handle)
    import deer  # the peer's package

    peer_dir = os.path.realpath(job["peer_dir"])
    if not os.path.realpath(deer.__file__).startswith(peer_dir + os.sep):
        raise SystemExit(f"imported 'deer' from {deer.__file__}, not from the peer at {peer_dir}")
    from deer.prompt_templates import query2prompts, tail_entities2prompts

    out = {"deer_file": deer.__file__, "query_prompts": [], "tail_prompts": [], "embeddings": None}
    with contextlib.redirect_stdout(sys.stderr):  # the package prints progress to stdout
        for query_job in job["query_jobs"]:
            out["query_prompts"].append(query2prompts(
                [tuple(t) for t in query_job["triplets"]],
                query_job["entity_id2text"],
                query_job["relation_id2text"],
                fewshot_prompt=query_job["fewshot_prompt"],
                entity_id2definition=query_job["entity_id2definition"],
            ))
        for tail_job in job["tail_jobs"]:
            out["tail_prompts"].append(tail_entities2prompts(tail_job["entities"], tail_job["definitions"]))
        if job.get("encode"):
            from deer.encoder_model import PromptEOL_Encoder

            encoder = PromptEOL_Encoder(job["encode"]["model"])
            out["embeddings"] = encoder(job["encode"]["prompts"]).float().tolist()
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(out, handle)


if __name__ == "__main__":
    main(*sys.argv[1:3])
