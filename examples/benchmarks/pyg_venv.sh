#!/usr/bin/env bash
# Builds .venv-pyg: this project, PyG, and PyG's sampling backend torch-sparse (with
# torch-scatter) compiled from source against the pinned torch (constraints.txt): no wheel of
# pyg-lib or torch-sparse fits this torch on the package registry. For
#   python examples/benchmarks/bench_pyg_loader.py --pyg-python .venv-pyg/bin/python
# Takes 15-30 minutes on 2 cores (C++ extensions); run it from the repository's root.
set -euo pipefail
venv=${1:-.venv-pyg}
python3 -m venv "$venv"
"$venv/bin/pip" install -q -c constraints.txt -e . torch_geometric
# --no-build-isolation: the extensions build against the torch just installed, not a new one
MAX_JOBS=${MAX_JOBS:-2} "$venv/bin/pip" install -q -c constraints.txt --no-build-isolation \
    torch-scatter torch-sparse
"$venv/bin/python" -c "from torch_geometric import typing as t; assert t.WITH_TORCH_SPARSE; print('PyG sampling backend: torch-sparse')"
