"""The `deer` command run as a separate process (a real interrupt, runs side by side): its command line, environment,
and an interrupt sent once its first part is stored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CLI = [sys.executable, "-c", "from experiments.cli import main; main(prog_name='deer')"]


def cli_env(cache: Path, **extra: str) -> dict:
    return {**os.environ, "DEER_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "DEER_OFFLINE": "1",
            "OMP_NUM_THREADS": "1", **extra}


def run_cli(args: list[str], env: dict, log: Path) -> subprocess.CompletedProcess:
    with open(log, "w") as stderr:
        done = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + log.read_text()
    return done


def interrupt_after_first_part(args: list[str], env: dict, parts: str, cache: Path, stderr_path: Path, sig) -> int:
    """Run the CLI, send ``sig`` as soon as a store part matching ``parts`` (a glob under ``cache``)
    is written, and return its exit code."""
    with open(stderr_path, "w") as stderr:
        # A user's Ctrl-C reaches a process whose SIGINT is at its default; the child inherits the test
        # process's disposition, which an earlier test may have left ignored (then Python installs no handler).
        process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 120
            while not list(cache.glob(parts)):
                assert process.poll() is None and time.monotonic() < deadline, f"no part {parts} was written"
                time.sleep(0.02)
            process.send_signal(sig)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    return process.returncode
