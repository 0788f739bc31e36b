#!/usr/bin/env bash
# The main job end to end on the embedded default: a local Dask cluster, built-in data.
# synth -> validate -> partition -> dispatch -> verify -> train; Cora -> chunk -> partition
# -> dispatch -> train; chunked -> re-chunk.
# Usage: bash examples/demo.sh [OUT]   (default demo-out). DEMO_QUICK=1: the same steps on synth
# graphs of 10x fewer edges, fewer epochs (the test suite runs it: tests/cli/test_benchmarks_quick.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PREP=${PREP:-.venv/bin/prep}
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${1:-demo-out}
if [ -n "${DEMO_QUICK:-}" ]; then
  # mag: 4000 nodes, near the least that leaves its smallest type (institution, 0.45% of the
  # nodes) the 2 nodes per class that prep synth requires.
  SIZE=20k NODES=2000 EDGES=20000 MAG_NODES=4000 MAG_EDGES=20000 RECHUNK=5000
  CORA_EPOCHS=6 LINK_EPOCHS=4 SYNTH_EPOCHS=2
else
  SIZE=200k NODES=20000 EDGES=200000 MAG_NODES=20000 MAG_EDGES=200000 RECHUNK=50000
  CORA_EPOCHS=12 LINK_EPOCHS=15 SYNTH_EPOCHS=3
fi
rm -rf "$OUT"
mkdir -p "$OUT"

echo "== prep synth: $SIZE-edge graph with planted communities"
"$PREP" synth "$OUT/synth" --nodes $NODES --edges $EDGES --seed 0
"$PREP" validate "$OUT/synth"

echo "== prep synth --hetero: ogbn-mag-shaped graph"
"$PREP" synth "$OUT/synth-mag" --hetero --nodes $MAG_NODES --edges $MAG_EDGES

echo "== prep chunk: Cora from its raw Planetoid files (bundled in examples/data)"
"$PREP" chunk examples/data/planetoid "$OUT/cora" --name cora

echo "== prep partition: random and METIS (train-balanced) into 4 parts"
"$PREP" partition "$OUT/synth" "$OUT/parts-random" -p 4 --method random
"$PREP" partition "$OUT/synth" "$OUT/parts-metis" -p 4 --method metis --balance train

echo "== prep dispatch: 4 parts delivered to 2 (simulated) machines, then prep verify"
"$PREP" dispatch "$OUT/synth" "$OUT/parts-metis" "$OUT/partitioned" --machines m0,m1
"$PREP" verify "$OUT/synth" "$OUT/partitioned"

echo "== prep chunk: a chunked graph in (DGL's format reader), re-chunked and validated"
"$PREP" chunk "$OUT/synth" "$OUT/synth-rechunked" --chunk-size $RECHUNK

echo "== Cora: partition (METIS, 2 parts) -> dispatch -> train GraphSAGE on 2 ranks"
"$PREP" partition "$OUT/cora" "$OUT/cora-metis" -p 2 --method metis --balance train
"$PREP" dispatch "$OUT/cora" "$OUT/cora-metis" "$OUT/cora-partitioned"
"$PYTHON" -m graphprep.trainer --graph "$OUT/cora-partitioned/graph.json" --fanouts 10,10 \
  --batch-size 32 --lr 0.01 --epochs $CORA_EPOCHS --checkpoint-dir "$OUT/checkpoints/cora" \
  --metrics-out "$OUT/cora-train.json"

echo "== Cora link prediction: split-edges -> METIS -> dispatch -> train (2 ranks) -> embed"
"$PREP" split-edges "$OUT/cora" "$OUT/cora-split" --etype _N:_E:_N --val 0.05 --test 0.1
"$PREP" partition "$OUT/cora-split" "$OUT/cora-split-metis" -p 2 --method metis
"$PREP" dispatch "$OUT/cora-split" "$OUT/cora-split-metis" "$OUT/cora-link-partitioned"
"$PYTHON" -m graphprep.trainer --graph "$OUT/cora-link-partitioned/graph.json" --task link \
  --fanouts 10,10 --batch-size 256 --lr 0.01 --hidden 64 --epochs $LINK_EPOCHS \
  --checkpoint-dir "$OUT/checkpoints/cora-link" --metrics-out "$OUT/cora-link.json"
"$PYTHON" -m graphprep.trainer embed --graph "$OUT/cora-link-partitioned/graph.json" \
  --checkpoint "$OUT/checkpoints/cora-link" --out "$OUT/cora-embeddings"

echo "== train GraphSAGE on the 4 synth parts just made (4 ranks: RPC sampling + DDP)"
"$PYTHON" -m graphprep.trainer --graph "$OUT/partitioned/graph.json" --fanouts 10,5 --epochs $SYNTH_EPOCHS \
  --checkpoint-dir "$OUT/checkpoints/synth" --metrics-out "$OUT/synth-train.json"
echo "demo done: outputs in $OUT/"
