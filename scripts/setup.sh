#!/usr/bin/env bash
# Creates .venv with the CPU build of PyTorch and the project (train, export, serve, dev, bench, http, hf and bulk extras).
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
# setuptools prints a boxed UserWarning about editable installs on every run, -q or not.
PYTHONWARNINGS=ignore::UserWarning \
  .venv/bin/python -m pip install -q -c scripts/constraints-cpu.txt -e ".[train,export,serve,dev,bench,http,hf,bulk]"
echo "environment ready: $(.venv/bin/python -c 'import torch; print("torch", torch.__version__)')"
