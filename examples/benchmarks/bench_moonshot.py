"""The moonshot: R-MAT scale 26 (1.07*10^9 edges) from raw edges to a trained model and its
embeddings, on this machine; prints one JSON object and keeps each phase's figures in
``WORKDIR/moonshot.json`` (a long run that stops keeps what it finished).

``--phase prep``: ``prep synth --generator rmat`` (split 0.05,0.01,0.01) -> multilevel
partition into 2 parts -> dispatch -> verify, each step on fresh workers (seconds, the largest
worker's peak anonymous and file-backed memory, disk). ``--phase train``: ``python -m
graphprep.trainer`` on the 2 parts / 2 ranks for one epoch over the training seeds (or
``--max-steps``), checkpoint written, then ``trainer embed`` of every node: launch -> first
batch, epoch time, peak anonymous RSS per rank, test accuracy against the majority-class rate,
embed time and a check that every node is embedded once by its original ID. ``--phase all``:
both. ``--scale``: a smaller R-MAT (e.g. 20 for a rehearsal); ``--quick``: scale 12 (seconds;
for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from bench_pipeline import du, step  # noqa: E402
from common import parse_args  # noqa: E402

from graphprep.dispatch.job import run_dispatch  # noqa: E402
from graphprep.dispatch.verify import run_verify  # noqa: E402
from graphprep.pipeline.partition import PartitionOptions, run_partition  # noqa: E402
from graphprep.pipeline.synth import SynthSpec  # noqa: E402
from graphprep.pipeline.synth_job import run_synth  # noqa: E402

SPLIT = (0.05, 0.01, 0.01)


def record(workdir: str, phase: str, figures: dict) -> dict:
    """Merge ``figures`` under ``phase`` into ``WORKDIR/moonshot.json``; returns the whole."""
    path = os.path.join(workdir, "moonshot.json")
    data = json.load(open(path)) if os.path.exists(path) else {}
    data[phase] = figures
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
    return data


def prep(workdir: str, args) -> dict:
    """synth -> partition (multilevel, ``--parts``) -> dispatch -> verify into ``workdir``."""
    spec = SynthSpec.from_scale(args.scale, args.edge_factor, feat_dim=args.feat_dim,
                                split=SPLIT)
    g, a, d = (os.path.join(workdir, x) for x in ("graph", "assign", "parts"))
    res = {"scale": args.scale, "edges": spec.num_edges, "nodes": spec.num_nodes,
           "parts": args.parts, "feat_dim": args.feat_dim, "split": SPLIT}
    res["synth"] = step("synth", spec.num_edges, lambda o: run_synth(spec, g, 1 << 20, o),
                        workdir)
    res["partition"] = step("partition", spec.num_edges, lambda o: run_partition(
        g, a, "multilevel", PartitionOptions(args.parts, balance=None), o), workdir)
    res["dispatch"] = step("dispatch", spec.num_edges, lambda o: run_dispatch(g, a, d, o),
                           workdir)
    res["verify"] = step("verify", spec.num_edges, lambda o: run_verify(g, d, o), workdir)
    res["parts_mb"] = round(du(d) / 2**20)
    res["prep_s"] = round(sum(res[s]["seconds"] for s in
                              ("synth", "partition", "dispatch", "verify")), 1)
    res["prep_min"] = round(res["prep_s"] / 60, 1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=("prep", "train", "all"), default="all")
    ap.add_argument("--scale", type=int, default=26, help="R-MAT scale: 2^SCALE nodes")
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--feat-dim", type=int, default=16)
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--workdir", default=None,
                    help="where the graph, parts, checkpoint and embeddings go (kept); "
                         "needs ~60 GB at scale 26")
    args = parse_args(ap, {"scale": 12})
    workdir = args.workdir or tempfile.mkdtemp(prefix="moonshot-", dir=os.getcwd())
    os.makedirs(workdir, exist_ok=True)
    data = {}
    if args.phase in ("prep", "all"):
        data = record(workdir, "prep", prep(workdir, args))
    print(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
