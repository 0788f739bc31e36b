#!/usr/bin/env bash
# The CUDA checks and GPU benchmarks in one call, for a lent GPU machine (the CUDA paths are
# the same code as the CPU paths; this is where the CUDA-only part runs).
#   1. the environment: GPU, torch, the imports graphprep needs;
#   2. the CUDA-parametrized tests (pytest -k cuda over the files that hold them);
#   3. Cora end to end on the GPU: chunk -> METIS 2 parts -> dispatch -> train GraphSAGE with
#      --device cuda --placement cuda (2 ranks sharing one GPU: gloo) and on 1 part / 1 rank
#      (the cpu:gloo,cuda:nccl group), with the same run on CPU as the baseline;
#   4. bench_sampling.py --device cuda, then --device cpu on the same prepared graphs;
#   5. bench_train.py --device cuda --placement cuda, then the CPU baseline on the same graphs.
# Each step is bounded by `timeout`, so one that hangs leaves the rest their time. Logs and
# JSON go to $OUT/gpu_logs.tar.gz (OUT defaults to gpu-out). Packages the machine lacks (dask,
# distributed, pymetis, ...) travel as wheels in .whl/ (`pip download --python-version` of the
# machine's Python).
# Usage: bash examples/benchmarks/gpu_run.sh [SAMPLING_EDGES] [TRAIN_EDGES]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}
L="$OUT/logs"                  # everything; packed into $OUT/gpu_logs.tar.gz after each step,
mkdir -p "$L"                  # since a call brings back at most 8 files
PY=${PYTHON:-python3}
SAMPLING_EDGES=${1:-10000000}
TRAIN_EDGES=${2:-1000000}
export PYTHONUNBUFFERED=1
# graphprep's one import package over this tree's folders, without installing it
mkdir -p /tmp/gp-root/graphprep
for p in formats pipeline dispatch trainer; do ln -sfn "$PWD/$p" "/tmp/gp-root/graphprep/$p"; done
if ! "$PY" -c "import dask, distributed, pymetis" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:/tmp/gp-root:$PWD
else
  export PYTHONPATH=/tmp/gp-root:$PWD
fi
export PATH="$(dirname "$PY"):$PATH"   # bench_*.py start `python -m graphprep.trainer` with sys.executable
PREP=("$PY" -m graphprep.pipeline.cli)
step() { tar -czf "$OUT/gpu_logs.tar.gz" -C "$L" . 2>/dev/null; echo "== $1 ($(date +%T))"; }

step "environment"
nvidia-smi -L || true
"$PY" - <<'EOF' 2>&1 | tee "$L/env.txt"
import torch, numpy, pyarrow, dask, distributed, pymetis
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
print("numpy", numpy.__version__, "pyarrow", pyarrow.__version__, "dask", dask.__version__)
import graphprep.pipeline.cli, graphprep.trainer.cli  # noqa: F401
EOF

step "CUDA tests"
timeout 180 "$PY" -m pytest -q -p no:cacheprovider -k cuda --timeout 120 \
  tests/trainer/test_sampler.py tests/trainer/test_dist_sampler.py tests/trainer/test_edge_feat.py \
  tests/trainer/test_link_metrics.py tests/trainer/test_sparse_trainer.py tests/core/test_network.py \
  2>&1 | tee "$L/pytest_cuda.log" | tail -25

step "Cora on the GPU"
W=$(mktemp -d)
"${PREP[@]}" chunk examples/data/planetoid "$W/cora" --name cora --no-progress >/dev/null &&
"${PREP[@]}" partition "$W/cora" "$W/a2" -p 2 --method metis --balance train --no-progress >/dev/null &&
"${PREP[@]}" dispatch "$W/cora" "$W/a2" "$W/d2" --no-progress >/dev/null &&
"${PREP[@]}" partition "$W/cora" "$W/a1" -p 1 --method random --no-progress >/dev/null &&
"${PREP[@]}" dispatch "$W/cora" "$W/a1" "$W/d1" --no-progress >/dev/null
for run in "d2 cuda cuda" "d1 cuda cuda" "d2 cpu cpu"; do
  set -- $run
  timeout 150 "$PY" -m graphprep.trainer --graph "$W/$1/graph.json" --fanouts 10,10 --batch-size 32 \
    --lr 0.01 --epochs 12 --device "$2" --placement "$3" ${CORA_EXTRA:-} --no-progress \
    --checkpoint-dir "$W/ckpt-$1-$2" --metrics-out "$L/cora-$1-$2.json" \
    > "$L/cora-$1-$2.log" 2>&1
  echo "cora $1 device=$2 rc=$? $("$PY" -c "import json,sys; s=json.load(open(sys.argv[1]))['summary']; print({k: s[k] for k in s if 'acc' in k or 'time' in k})" "$L/cora-$1-$2.json" 2>&1 | tail -1)"
done

step "sampling benchmark"
S=$(mktemp -d)
timeout 220 "$PY" examples/benchmarks/bench_sampling.py --edges "$SAMPLING_EDGES" --device cuda \
  --workdir "$S" > "$L/sampling_cuda.json" 2> "$L/sampling_cuda.err"; echo "rc=$?"
timeout 60 "$PY" examples/benchmarks/bench_sampling.py --edges "$SAMPLING_EDGES" --device cpu \
  --graphprep-only --workdir "$S" > "$L/sampling_cpu.json" 2> "$L/sampling_cpu.err"; echo "rc=$?"
tail -c 600 "$L/sampling_cuda.json"; echo; tail -c 600 "$L/sampling_cpu.json"; echo

step "training benchmark"
T=$(mktemp -d)
timeout 180 "$PY" examples/benchmarks/bench_train.py --edges "$TRAIN_EDGES" --device cuda \
  --placement cuda --workdir "$T" > "$L/train_cuda.json" 2> "$L/train_cuda.err"; echo "rc=$?"
timeout 120 "$PY" examples/benchmarks/bench_train.py --edges "$TRAIN_EDGES" --device cpu \
  --workdir "$T" > "$L/train_cpu.json" 2> "$L/train_cpu.err"; echo "rc=$?"
tail -c 800 "$L/train_cuda.json"; echo; tail -c 800 "$L/train_cpu.json"; echo
step "done"
