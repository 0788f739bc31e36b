"""Link prediction benchmark; prints one JSON object.

For Cora (bundled) and a ``prep synth`` graph (10^6 edges by default), as a user runs it:
``prep split-edges`` (5% validation, 10% test) -> ``prep partition --method metis -p 2`` ->
``prep dispatch`` -> ``python -m graphprep.trainer --task link`` (2 ranks) -> ``python -m graphprep.trainer embed``.
Against it, in the same run, a **single-process reference** in plain torch on the same split:
the same GraphSAGE layers and inputs (features + log(1 + in-degree)) run full-graph (every
training edge carries messages, no sampling),
the same scorer, epochs, negatives and learning rate (its steps take ``--ref-batch-size``
edges: each is a full-graph forward); evaluated like
the trainer (AUC against one uniform negative per held-out edge, MRR and Hits@k against 100).
``--quick``: only the synth graph, of 10^4 edges, for one epoch (seconds; for the test suite:
Cora's steps are the same functions, and the demo runs Cora's link prediction).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import parse_args  # noqa: E402
from graphprep.formats import EdgeType, load_chunked_graph, read_array_chunk, read_edge_chunk  # noqa: E402
from graphprep.trainer.batch import full_graph_batch  # noqa: E402
from graphprep.trainer.tasks.link_metrics import auc, ranking_metrics  # noqa: E402
from graphprep.trainer.models.sage import GraphSAGE  # noqa: E402
from graphprep.trainer.models.scorer import link_loss, make_scorer  # noqa: E402

ET = EdgeType("_N", "_E", "_N")


def prep(*args) -> None:
    subprocess.run([sys.executable, "-m", "graphprep.pipeline.cli", *map(str, args), "--no-progress"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def prepared(workdir: str, name: str, make) -> tuple[str, str]:
    """(chunked graph with masks, graph.json of its 2-part METIS dispatch)."""
    raw, split = os.path.join(workdir, name), os.path.join(workdir, f"{name}-split")
    if not os.path.exists(os.path.join(split, "metadata.json")):
        make(raw)
        prep("split-edges", raw, split, "--etype", str(ET), "--val", 0.05, "--test", 0.1)
        prep("partition", split, f"{split}-a", "-p", 2, "--method", "metis")
        prep("dispatch", split, f"{split}-a", f"{split}-d")
    return split, os.path.join(f"{split}-d", "graph.json")


def distributed(graph_json: str, workdir: str, args) -> dict:
    metrics = os.path.join(workdir, f"m-{os.path.basename(os.path.dirname(graph_json))}.json")
    ckpt = metrics[:-5] + "-ckpt"
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "graphprep.trainer", "--graph", graph_json, "--task", "link",
           "--epochs", args.epochs, "--fanouts", args.fanouts, "--batch-size", args.batch_size,
           "--lr", args.lr, "--hidden", args.hidden, "--scorer", args.scorer, "--dropout",
           args.dropout, "--weight-decay", args.weight_decay, "--no-progress",
           "--metrics-out", metrics, "--checkpoint-dir", ckpt]
    subprocess.run([str(a) for a in cmd], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - start
    with open(metrics) as f:
        data = json.load(f)
    out = {"seconds": round(took, 1), **{k: round(v, 4) for k, v in data["summary"].items()}}
    emb = metrics[:-5] + "-emb"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "graphprep.trainer", "embed", "--graph", graph_json,
                    "--checkpoint", ckpt, "--out", emb, "--no-progress"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(emb, "embed.json")) as f:
        full = json.load(f)["full_neighbor"]
    out["embed_seconds"] = round(time.perf_counter() - start, 1)
    out["embed_full_neighbor"] = {k: round(v, 4) for k, v in full.items()
                                  if k.startswith("test_") and isinstance(v, float)}
    return out


def _concat(g, files, reader):
    return [reader(g.path(f), files) for f in files.files]


def reference(chunked: str, args, seed: int = 0) -> dict:
    """Single-process full-graph GraphSAGE link prediction on the same split."""
    g = load_chunked_graph(chunked)
    pairs = _concat(g, g.edges[ET], read_edge_chunk)
    src = torch.from_numpy(np.concatenate([p[0] for p in pairs])).long()
    dst = torch.from_numpy(np.concatenate([p[1] for p in pairs])).long()
    mask = {m: torch.from_numpy(np.concatenate(
        [np.asarray(a) for a in _concat(g, g.edge_data[ET][m], read_array_chunk)])).bool()
        for m in ("train_mask", "val_mask", "test_mask")}
    feats = g.node_data["_N"]["feat"]
    x = torch.from_numpy(np.concatenate([np.asarray(a, dtype=np.float32) for a in
                                         _concat(g, feats, read_array_chunk)]))
    n = len(x)
    tr = mask["train_mask"]
    # the trainer's link default (--degree-input): log(1 + in-degree) over training edges
    x = torch.cat([x, torch.log1p(torch.bincount(dst[tr], minlength=n).float())[:, None]], 1)
    etype = (ET.src, ET.rel, ET.dst)
    layers = len(args.fanouts.split(","))
    batch = full_graph_batch({"_N": x}, {etype: torch.stack([src[tr], dst[tr]])}, layers)
    torch.manual_seed(seed)
    model = GraphSAGE({"_N": x.shape[1]}, args.hidden, args.hidden, [etype],
                      layers, args.dropout)
    scorer = make_scorer(args.scorer, args.hidden)
    opt = torch.optim.Adam([*model.parameters(), *scorer.parameters()], lr=args.lr,
                           weight_decay=args.weight_decay)
    gen = torch.Generator().manual_seed(seed)
    ts, td = src[tr], dst[tr]
    start = time.perf_counter()
    for _ in range(args.epochs):
        model.train()
        for idx in torch.split(torch.randperm(len(ts), generator=gen), args.ref_batch_size):
            h = model(batch)
            neg = torch.randint(0, n, (len(idx),), generator=gen)
            loss = link_loss(scorer(h[ts[idx]], h[td[idx]]), scorer(h[ts[idx]], h[neg]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        h = model(batch)
        out = _evaluate(h, scorer, src, dst, mask, n, gen)
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def _evaluate(h, scorer, src, dst, mask, n, gen) -> dict:
    """AUC against one uniform negative per held-out edge, MRR/Hits@k against 100."""
    out = {}
    for split in ("val", "test"):
        m = mask[f"{split}_mask"]
        s, d = src[m], dst[m]
        negs = torch.randint(0, n, (len(s), 100), generator=gen)
        pos = scorer(h[s], h[d])
        neg = torch.cat([scorer(h[c].repeat_interleave(100, 0), h[nc.flatten()]).view(-1, 100)
                         for c, nc in zip(torch.split(s, 4096), torch.split(negs, 4096))])
        out[f"{split}_auc"] = round(auc(pos, neg[:, 0]), 4)
        out.update({f"{split}_{k}": round(v, 4)
                    for k, v in ranking_metrics(pos, neg, (20, 50, 100)).items()})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=10**6, help="synth graph size")
    ap.add_argument("--homophily", type=float, default=0.95,
                    help="synth: share of edges inside the source's class (prep synth's "
                         "default 0.8 caps any scorer's AUC near 0.91: see RESULTS.md)")
    ap.add_argument("--epochs", type=int, default=15, help="epochs on Cora")
    ap.add_argument("--synth-epochs", type=int, default=3, help="epochs on the synth graph")
    ap.add_argument("--scorer", default="mlp", choices=["dot", "mlp"])
    ap.add_argument("--fanouts", default="10,10")
    ap.add_argument("--batch-size", type=int, default=1024, help="training edges per batch "
                                                                   "on the synth graph")
    ap.add_argument("--cora-batch-size", type=int, default=256,
                    help="training edges per batch on Cora, for the trainer and the "
                         "reference alike (Cora has ~9k training edges)")
    ap.add_argument("--graphs", default="cora,synth", help="which graphs to run")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--ref-batch-size", type=int, default=8192,
                    help="training edges per step of the reference (each step is one "
                         "full-graph forward)")
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--workdir", default=None, help="keep the prepared graphs here")
    args = parse_args(ap, {"edges": 10**4, "epochs": 1, "synth_epochs": 1, "graphs": "synth"})
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-link-")
    wanted = args.graphs.split(",")
    graphs = {}
    if "cora" in wanted:
        graphs["cora"] = prepared(workdir, "cora", lambda out: prep(
            "chunk", os.path.join(ROOT, "examples", "data", "planetoid"), out, "--name",
            "cora"))
    if "synth" in wanted:
        name = f"synth-{args.edges}-h{args.homophily}"
        graphs[name] = prepared(workdir, name, lambda out: prep(
            "synth", out, "--nodes", args.edges // 10, "--edges", args.edges, "--homophily",
            args.homophily))
    result = {k: getattr(args, k) for k in ("scorer", "fanouts", "batch_size", "lr", "hidden",
                                             "dropout", "ref_batch_size")}
    result["cores"] = os.cpu_count()
    for name, (chunked, graph_json) in graphs.items():
        cora = name == "cora"
        run = argparse.Namespace(**{
            **vars(args), "epochs": args.epochs if cora else args.synth_epochs,
            "batch_size": args.cora_batch_size if cora else args.batch_size,
            "ref_batch_size": args.cora_batch_size if cora else args.ref_batch_size})
        result[name] = {"epochs": run.epochs,
                        "distributed_2_parts": distributed(graph_json, workdir, run),
                        "single_process_reference": reference(chunked, run)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
