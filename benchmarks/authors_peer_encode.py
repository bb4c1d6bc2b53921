"""Time the DEER authors' encoder (deer-probe 0.1.1) on lists of prompts, in the package's own interpreter.

Run by benchmarks/bench_deer_vs_authors.py in a subprocess with PYTHONPATH=.peers/deer-probe: the
package's top-level module is also named ``deer``, so it never shares an interpreter with this
project.  Imports only the package (and torch/numpy).

    python benchmarks/authors_peer_encode.py JOB.json OUT_DIR

JOB: {"peer_dir", "model": FOLDER, "threads": int, "parts": {name: [prompt, ...]}}
OUT_DIR/peer.json: {"deer_file", "version", "threads", "load_seconds", "seconds": {name: s},
"token_ids": {name: [[id, ...] per prompt]}}; OUT_DIR/<name>.npy: float32 vectors of each part.
The timer is around the package's ``encoder(prompts)`` call (tokenising and encoding), after the
model is loaded and one untimed warm-up prompt.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path


def main(job_path: str, out_dir: str) -> None:
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    out_dir = Path(out_dir)
    import numpy as np
    import torch

    torch.set_num_threads(job["threads"])
    import deer  # the peer's package

    peer_dir = os.path.realpath(job["peer_dir"])
    if not os.path.realpath(deer.__file__).startswith(peer_dir + os.sep):
        raise SystemExit(f"imported 'deer' from {deer.__file__}, not from the peer at {peer_dir}")
    from deer.encoder_model import PromptEOL_Encoder

    out = {"deer_file": deer.__file__, "version": importlib.metadata.version("deer-probe"),
           "threads": torch.get_num_threads(), "seconds": {}, "token_ids": {}}
    with contextlib.redirect_stdout(sys.stderr):  # the package prints to stdout
        started = time.perf_counter()
        encoder = PromptEOL_Encoder(job["model"])
        out["load_seconds"] = time.perf_counter() - started
        encoder(next(iter(job["parts"].values()))[:1])  # warm-up, untimed
        for name, prompts in job["parts"].items():
            started = time.perf_counter()
            vectors = encoder(prompts)
            out["seconds"][name] = time.perf_counter() - started
            np.save(out_dir / f"{name}.npy", vectors.float().numpy())
            out["token_ids"][name] = [encoder.tokenizer(p)["input_ids"] for p in prompts]  # what it fed
    (out_dir / "peer.json").write_text(json.dumps(out), encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:3])
