"""Built-in model benchmark (issue 31): ``--model gat``; prints one JSON object.

**Accuracy**: GAT's recipe (Veličković et al. 2018: 8 heads x 8 hidden, one output head,
dropout 0.6 on inputs and attention, Adam lr 0.005, weight decay 5e-4, full neighborhoods,
the 140 training nodes in one batch) through ``python -m graphprep.trainer`` on 2 METIS parts
(train-balanced) and 2 ranks, on the bundled Cora and CiteSeer with the standard Planetoid
split, over ``--seeds``. Features as ``prep chunk`` writes them (``raw``: binary bag of words)
and row-normalised as the paper does (``row_normalised``: each row divided by its sum,
written as a ``.npz`` and chunked with ``prep chunk --from npy``). Reported: test accuracy at
the best validation epoch (the trainer's summary) per seed, its mean, standard deviation
(population), min and max, against the published 83.0% (Cora) and 72.5% (CiteSeer).

**Time**: forward + backward of our ``graphprep.trainer.models.gat`` against a stack of PyG's
``GATConv`` with the same weights, on the same batches in one process: batches sampled once
through our loader from a 1-part dispatch (Cora: the accuracy recipe's batch of 140 seeds with
full neighborhoods; a ``prep synth`` graph: mini-batches of 1024 with fanouts 10,10), each
model run on every batch of an epoch (training mode, cross-entropy of the seeds), repeated and
interleaved; the median epoch time of each (wall clock, and the process's CPU time, which a
busy machine disturbs less) and their ratios (ours / PyG). The eval-mode outputs
of the two on those batches must agree (``eval_max_abs_diff``).
**Dropout**: ms per call of the models' dropout (``models.common.fast_dropout``: the mask drawn
with ``torch.rand``) against ``torch.nn.functional.dropout`` on the same input (Cora's
2,708 x 1,433 features, p = 0.5), interleaved, median of ``--repeats`` x 10 calls each.
``--quick``: 1 seed of 2 epochs, a 2*10^4-edge synth graph, 1 timing repeat (seconds; for the
test suite: the figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import fresh_cluster, parse_args  # noqa: E402
from graphprep.pipeline import api  # noqa: E402
from graphprep.pipeline.convert.planetoid import read_planetoid  # noqa: E402

PLANETOID = os.path.join(ROOT, "examples", "data", "planetoid")
PUBLISHED = {"cora": 0.830, "citeseer": 0.725}       # Veličković et al. 2018, Table 2
FEATURES = ("raw", "row_normalised")
RECIPE = ("--model", "gat", "--fanouts", "-1,-1", "--hidden", "64", "--dropout", "0.6",
          "--lr", "0.005", "--weight-decay", "5e-4", "--batch-size", "140")


def row_normalised_npz(name: str, path: str) -> str:
    """The Planetoid dataset ``name`` as a ``.npz`` for ``prep chunk --from npy``, features
    divided by their row sums (all-zero rows stay zero): the paper's preprocessing."""
    edge_index, feat, label, masks = read_planetoid(PLANETOID, name)
    sums = feat.sum(1, keepdims=True)
    np.savez(path, edge_index=edge_index, x=feat / np.where(sums == 0, 1, sums), y=label,
             **masks)
    return path


def prepare(workdir: str, datasets: list[str], synth_edges: int) -> dict:
    """Every graph the benchmark needs, on one cluster (reused from ``workdir``):
    ``{(dataset, features): 2-part graph.json}``, ``{dataset or "synth": 1-part graph.json}``
    for the timing."""
    two, one = {}, {}
    with fresh_cluster() as (_, client):
        def dispatched(chunked: str, parts: int, method: str) -> str:
            out = f"{chunked}-d{parts}"
            balance = ("train",) if method == "metis" else None
            api.partition(chunked, f"{chunked}-a{parts}", num_parts=parts, method=method,
                          balance=balance, client=client)
            api.dispatch(chunked, f"{chunked}-a{parts}", out, client=client)
            return os.path.join(out, "graph.json")

        for name in datasets:
            raw = os.path.join(workdir, name)
            api.chunk(PLANETOID, raw, kind="planetoid", name=name, client=client)
            norm = os.path.join(workdir, f"{name}-rownorm")
            npz = row_normalised_npz(name, os.path.join(workdir, f"{name}-rownorm.npz"))
            api.chunk(npz, norm, kind="npy", name=name, client=client)
            two[(name, "raw")] = dispatched(raw, 2, "metis")
            two[(name, "row_normalised")] = dispatched(norm, 2, "metis")
            one[name] = dispatched(norm, 1, "random")
        synth = os.path.join(workdir, f"synth-{synth_edges}")
        api.synth(synth, nodes=synth_edges // 10, edges=synth_edges, split=(0.05, 0.05, 0.1),
                  client=client)
        one["synth"] = dispatched(synth, 1, "random")
    return two, one


def train(graph_json: str, workdir: str, seed: int, epochs: int, tag: str) -> dict:
    metrics = os.path.join(workdir, f"m-{tag}-{seed}.json")
    cmd = [sys.executable, "-m", "graphprep.trainer", "--graph", graph_json, *RECIPE, "--epochs",
           str(epochs), "--seed", str(seed), "--threads", "1", "--no-progress", "--overwrite",
           "--metrics-out", metrics, "--checkpoint-dir", os.path.join(workdir, f"ck-{tag}-{seed}")]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        summary = json.load(f)["summary"]
    return {k: summary[k] for k in ("test_acc", "val_acc", "best_epoch", "final_test_acc",
                                    "mean_epoch_s")}


def accuracy(two: dict, workdir: str, seeds: list[int], epochs: int) -> dict:
    out = {}
    for (name, features), graph in two.items():
        runs = [train(graph, workdir, s, epochs, f"{name}-{features}") for s in seeds]
        acc = [r["test_acc"] for r in runs]
        mean = statistics.fmean(acc)
        out.setdefault(name, {"published_test_acc": PUBLISHED[name]})[features] = {
            "seeds": seeds, "test_acc": acc,
            "test_acc_mean": round(mean, 4), "test_acc_std": round(statistics.pstdev(acc), 4),
            "test_acc_min": min(acc), "test_acc_max": max(acc),
            "mean_minus_published": round(mean - PUBLISHED[name], 4),
            "final_epoch_test_acc_mean": round(statistics.fmean(r["final_test_acc"]
                                                                 for r in runs), 4),
            "best_epoch": [r["best_epoch"] for r in runs],
            "mean_epoch_s": round(statistics.fmean(r["mean_epoch_s"] for r in runs), 4)}
    return out


# --- forward + backward time against PyG ------------------------------------------------------

def sampled_batches(graph_json: str, fanouts: list[int], batch_size: int):
    """One epoch of training batches of a 1-part graph through our loader, in one process:
    ``(batches, classes, input width)``."""
    from graphprep.trainer.data.features import FeatureFetcher
    from graphprep.trainer.data.loader import NodeLoader, rank_seeds
    from graphprep.trainer.loop import num_classes
    from graphprep.trainer.sampling.dist_sampler import DistNeighborSampler
    from graphprep.trainer.sampling.partition import LocalPart
    from graphprep.trainer.sampling.service import LocalTransport, PartServer

    part = LocalPart.load(graph_json, 0)
    server = PartServer(part)
    transport = LocalTransport({0: server})
    loader = NodeLoader(DistNeighborSampler(part, server, transport, fanouts),
                        FeatureFetcher(part, server, transport), "_N",
                        rank_seeds(part, "_N", "train_mask", 1, 0), batch_size, seed=0, rank=0)
    batches = list(loader.epoch(0))
    for b in batches:
        b.y = b.y.long()
    return batches, num_classes(part, "_N"), batches[0].x.shape[1]


def pyg_stack(ours, torch):
    """PyG ``GATConv`` layers with ``ours``' weights, run as the Batch docs say:
    ``conv((h, h[:num_dst]), edge_index)``, input dropout before each, ELU between."""
    from torch_geometric.nn import GATConv

    class PyGGAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList()
            for layer in ours.layers:
                conv = layer.convs["_N:_E:_N"]
                ref = GATConv(conv.lin.in_features, conv.channels, heads=conv.heads,
                              concat=conv.concat, dropout=conv.dropout)
                with torch.no_grad():
                    ref.lin.weight.copy_(conv.lin.weight)
                    ref.att_src.copy_(conv.att_src)
                    ref.att_dst.copy_(conv.att_dst)
                    ref.bias.copy_(conv.bias)
                self.convs.append(ref)
            self.p = ours.dropout.p

        def forward(self, batch):
            h = batch.x
            for i, (conv, layer) in enumerate(zip(self.convs, batch.layers)):
                h = torch.nn.functional.dropout(h, self.p, self.training)
                h = conv((h, h[:layer.num_dst]), layer.edge_index)
                if i < len(self.convs) - 1:
                    h = torch.nn.functional.elu(h)
            return h
    return PyGGAT()


def timing(graph_json: str, fanouts: list[int], batch_size: int, repeats: int, device: str,
           hidden: int = 64, heads: int = 8) -> dict:
    """Median forward+backward epoch time of ours and of the PyG stack on the same batches."""
    import torch

    from graphprep.trainer.models.gat import GAT
    batches, classes, width = sampled_batches(graph_json, fanouts, batch_size)
    torch.manual_seed(0)
    ours = GAT({"_N": width}, hidden, classes, [("_N", "_E", "_N")], len(fanouts), heads)
    ref = pyg_stack(ours, torch)
    ours, ref = ours.to(device), ref.to(device)
    batches = [b.to(device) for b in batches]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        ours.eval(), ref.eval()
        diff = max(float((ours(b) - ref(b)).abs().max()) for b in batches)

    def epoch(model) -> tuple[float, float]:
        model.train()
        sync()
        start, cpu = time.perf_counter(), time.process_time()
        for b in batches:
            loss = torch.nn.functional.cross_entropy(model(b)[:b.batch_size], b.y)
            model.zero_grad(set_to_none=True)
            loss.backward()
        sync()
        return time.perf_counter() - start, time.process_time() - cpu

    epoch(ours), epoch(ref)                        # warm-up (allocator, kernels)
    times = {"ours": [], "pyg": []}
    for _ in range(repeats):                        # interleaved: drift hits both
        times["ours"].append(epoch(ours))
        times["pyg"].append(epoch(ref))
    med = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    return {"fanouts": fanouts, "batch_size": batch_size, "batches": len(batches),
            "edges_per_epoch": sum(l.edge_index.shape[1] for b in batches for l in b.layers),
            "hidden": hidden, "heads": heads, "repeats": repeats,
            "ours_epoch_s": round(med["ours"], 5), "pyg_gatconv_epoch_s": round(med["pyg"], 5),
            "ratio_ours_over_pyg": round(med["ours"] / med["pyg"], 3),
            "ours_epoch_cpu_s": round(cpu["ours"], 5),
            "pyg_gatconv_epoch_cpu_s": round(cpu["pyg"], 5),
            "cpu_ratio_ours_over_pyg": round(cpu["ours"] / cpu["pyg"], 3),
            "eval_max_abs_diff": diff}


def dropout_timing(repeats: int, device: str, shape=(2708, 1433), p: float = 0.5) -> dict:
    """Median ms per call of our dropout and torch's on one ``shape`` input (training mode)."""
    import torch

    from graphprep.trainer.models.common import fast_dropout
    x = torch.rand(shape, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ways = {"ours": lambda: fast_dropout(x, p), "torch": lambda: torch.nn.functional.dropout(x, p)}
    times = {k: [] for k in ways}
    for _ in range(max(repeats, 1) * 10):           # interleaved: drift hits both
        for k, call in ways.items():
            sync()
            start = time.perf_counter()
            call()
            sync()
            times[k].append(time.perf_counter() - start)
    ms = {k: statistics.median(v) * 1000 for k, v in times.items()}
    return {"shape": list(shape), "p": p, "ours_ms": round(ms["ours"], 3),
            "torch_ms": round(ms["torch"], 3),
            "ratio_ours_over_torch": round(ms["ours"] / ms["torch"], 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="cora,citeseer")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--synth-edges", type=int, default=10**6,
                    help="edges of the synth graph timed with mini-batches")
    ap.add_argument("--repeats", type=int, default=10, help="timed epochs of each model")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the timing (1: as a trainer rank with --threads 1)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where the timing runs (training always on the CPU)")
    ap.add_argument("--skip-accuracy", action="store_true", help="only the timing")
    ap.add_argument("--workdir", default=None, help="keep the prepared graphs here")
    args = parse_args(ap, {"seeds": "0", "epochs": 2, "synth_edges": 2 * 10**4,
                           "repeats": 1})
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-models-")
    datasets = [d for d in args.datasets.split(",") if d]
    seeds = [int(s) for s in args.seeds.split(",")]
    two, one = prepare(workdir, datasets, args.synth_edges)
    res = {"model": "gat", "recipe": " ".join(RECIPE), "epochs": args.epochs,
           "parts": 2, "ranks": 2, "cores": os.cpu_count()}
    if not args.skip_accuracy:
        res["accuracy"] = accuracy(two, workdir, seeds, args.epochs)
    import torch
    torch.set_num_threads(args.threads)
    res["timing"] = {"device": args.device, "torch_threads": torch.get_num_threads()}
    for name in datasets:
        res["timing"][name] = timing(one[name], [-1, -1], 140, args.repeats, args.device)
    res["timing"]["synth"] = timing(one["synth"], [10, 10], 1024, args.repeats, args.device)
    res["timing"]["synth"]["edges"] = args.synth_edges
    res["timing"]["dropout"] = dropout_timing(args.repeats, args.device)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
