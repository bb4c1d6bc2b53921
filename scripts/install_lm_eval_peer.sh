#!/usr/bin/env bash
# lm-evaluation-harness 0.4.13, the peer of benchmarks/bench_lm_eval.py, in its own venv (.peers/lm-eval-venv):
# never in the project's environment. torch and transformers pinned to the project's versions.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -d .peers/lm-eval-venv ] || "$PYTHON" -m venv .peers/lm-eval-venv
.peers/lm-eval-venv/bin/pip install -q "torch==2.13.0" "transformers==5.24.0" "lm-eval==0.4.13" "accelerate==1.15.0"
.peers/lm-eval-venv/bin/python -c 'import lm_eval.models.huggingface' && echo "lm-eval 0.4.13 in .peers/lm-eval-venv"
