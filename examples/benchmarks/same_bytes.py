"""Same bytes before and after (issue: the one ``graphprep`` import package): the outputs of
``prep synth|chunk|partition|dispatch`` of a baseline commit and of a source tree, for the same
inputs, file by file; prints one JSON object and exits 1 when a file differs for real.

Both trees run as a user runs ``prep``: ``python -m pipeline.cli`` (a tree from before the
rename) or ``python -m graphprep.pipeline.cli`` with ``PYTHONPATH`` made by
:func:`common.importable_tree` (never the installed graphprep), in a scratch folder holding no
package of those names, each command starting its own embedded Dask cluster (``--workers 2``).
The baseline is ``git archive``d out of this repository (no git state changes). The trees run
one after the other in the *same* output folder (``WORKDIR/run``: outputs may record their own
paths): the baseline's outputs are hashed (sha256, every file by relative path) and moved aside
(``WORKDIR/run-baseline``, for the diff of a differing file), then the tree's commands write
the same paths. The inputs are written once, with fixed seeds,
before both.

Commands (each output folder is one entry of ``"steps"``):

* ``prep synth``: the planted graph (homogeneous, ``--edges``), R-MAT (``--scale``) and the
  heterogeneous (MAG-shaped) planted graph (at least 5000 nodes and 20000 edges);
* ``prep chunk``: a CSV edge list keyed by strings (``--map-keys``), a CSV edge list of
  sparse 62-bit integer keys (``--map-keys``), a NumPy folder (src/dst/edge_weight/x/y/masks)
  and the tables config ``examples/tables/shop.yaml`` (tables by the tree's ``make_shop.py``);
* ``prep partition -p 2``: random, metis and multilevel (``--coarse-edges`` small enough that
  it coarsens) on the planted and the R-MAT graph; random on the hetero and the shop graphs;
* ``prep dispatch`` of one assignment per graph (planted: multilevel, R-MAT: metis, hetero and
  shop: random; ``--range-size`` small enough for several ranges), then ``prep verify`` (its
  exit status; the shop graph also ``--tables``).

Chunk sizes are small so that every step runs several tasks. A differing JSON file is diffed
key by key: a difference only in a field that legitimately changes between runs (a time,
duration, date, version, host, pid, or a path under a temporary folder) is "volatile", with
the fields named; any other difference, a file on one side only, or a failed command is
"real". ``--quick``: tiny sizes (seconds per command, yet minutes in all, since each of the 46
commands starts a cluster: so not one of the test suite's ``bench_*.py``).

``python examples/benchmarks/same_bytes.py [--baseline 9f1af7b] [--tree PATH | --tree-commit C]
[--workdir DIR] [--keep] [--quick]``; default tree: this repository's working tree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import importable_tree, parse_args  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKERS = 2
# The last key of a JSON leaf that may differ between two runs of the same code.
VOLATILE_KEY = re.compile(
    r"(^|_)(time|timestamp|date|created|started|finished|duration|elapsed|seconds|secs|s|wall|"
    r"took|version|versions|host|hostname|pid)($|_)", re.I)
# A path component that tempfile or a step's staging makes up anew each run.
TEMP_PATH = re.compile(r"(^|/)tmp[a-z0-9_]{6,}(/|$)|\.partial|(^|/)\.?tmp-", re.I)


def extract(commit: str, dest: str) -> str:
    """``git archive COMMIT | tar -x`` into ``dest``; the full commit id."""
    os.makedirs(dest)
    full = subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", commit + "^{commit}"],
                          check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.Popen(["git", "-C", REPO, "archive", full], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", dest], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait() != 0:
        raise SystemExit(f"git archive {commit} failed")
    return full


# ---------------------------------------------------------------- inputs (once, fixed seeds)

def string_keys(ids: np.ndarray, salt: str) -> np.ndarray:
    return np.array([hashlib.blake2b(f"{salt}{i}".encode(), digest_size=6).hexdigest()
                     for i in ids.tolist()], dtype=object)


def power_law_edges(rng, nodes: int, edges: int) -> tuple[np.ndarray, np.ndarray]:
    weight = 1.0 / np.arange(1, nodes + 1) ** 0.8
    src = rng.choice(nodes, edges, p=weight / weight.sum())
    return src, rng.integers(0, nodes, edges)


def make_inputs(folder: str, tree: str, edges: int, shop_users: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    nodes = max(2, edges // 10)
    os.makedirs(folder)
    paths = {}
    # CSV, string keys (some nodes only as destinations, some never named).
    src, dst = power_law_edges(rng, nodes, edges)
    keys = string_keys(np.arange(nodes), "user-")
    paths["csv_str"] = os.path.join(folder, "edges_str.csv")
    with open(paths["csv_str"], "w") as f:
        f.write("src,dst\n")
        f.writelines(f"{a},{b}\n" for a, b in zip(keys[src], keys[dst]))
    # CSV, sparse integer keys up to 2^62 (only --map-keys makes them keys).
    src, dst = power_law_edges(rng, nodes, edges)
    ikeys = rng.choice(1 << 62, nodes, replace=False)
    paths["csv_int"] = os.path.join(folder, "edges_int.csv")
    with open(paths["csv_int"], "w") as f:
        f.write("src,dst\n")
        f.writelines(f"{a},{b}\n" for a, b in zip(ikeys[src].tolist(), ikeys[dst].tolist()))
    # NumPy folder: src/dst, an edge weight, features, labels, masks.
    npy = paths["npy"] = os.path.join(folder, "npy_graph")
    os.makedirs(npy)
    src, dst = power_law_edges(rng, nodes, edges)
    split = rng.random(nodes)
    for name, a in {"src": src.astype(np.int64), "dst": dst.astype(np.int64),
                    "edge_weight": rng.random(edges).astype(np.float32),
                    "x": rng.normal(size=(nodes, 8)).astype(np.float32),
                    "y": rng.integers(0, 5, nodes).astype(np.int64),
                    "train_mask": split < 0.6, "val_mask": (split >= 0.6) & (split < 0.8),
                    "test_mask": split >= 0.8}.items():
        np.save(os.path.join(npy, name + ".npy"), a)
    # Tables: the tree's own shop example (its make_shop.py writes with a fixed seed).
    shop = os.path.join(folder, "shop")
    os.makedirs(shop)
    shutil.copy(os.path.join(tree, "examples", "tables", "shop.yaml"), shop)
    subprocess.run([sys.executable, os.path.join(tree, "examples", "tables", "make_shop.py"),
                    os.path.join(shop, "data"), str(shop_users)], check=True, cwd=folder)
    paths["tables"] = os.path.join(shop, "shop.yaml")
    return paths


# ---------------------------------------------------------------- commands

def commands(args, inputs: dict, run: str) -> list[tuple[str, list[str], str | None]]:
    """``(step name, prep arguments, output folder relative to run or None)`` in order."""
    r = lambda name: os.path.join(run, name)  # noqa: E731
    common = ["--workers", str(WORKERS), "--no-progress"]
    cs = ["--chunk-size", str(args.chunk_size)]
    out = [
        ("synth planted", ["synth", r("planted"), "--nodes", str(args.edges // 10),
                           "--edges", str(args.edges), *cs], "planted"),
        ("synth rmat", ["synth", r("rmat"), "--generator", "rmat", "--scale", str(args.scale),
                        *cs], "rmat"),
        # Each of the 4 node types needs >= 2 * 8 classes nodes (institution gets 0.4%).
        ("synth hetero", ["synth", r("hetero"), "--hetero",
                          "--nodes", str(max(args.edges // 10, 5000)),
                          "--edges", str(max(args.edges, 20_000)), *cs], "hetero"),
        ("chunk csv string keys", ["chunk", inputs["csv_str"], r("csv_str"), "--map-keys", *cs],
         "csv_str"),
        ("chunk csv integer keys", ["chunk", inputs["csv_int"], r("csv_int"), "--map-keys", *cs],
         "csv_int"),
        ("chunk npy", ["chunk", inputs["npy"], r("npy"), "--from", "npy", *cs], "npy"),
        ("chunk tables", ["chunk", inputs["tables"], r("shop"), *cs], "shop"),
    ]
    for graph in ("planted", "rmat"):
        for method in ("random", "metis", "multilevel"):
            extra = ["--coarse-edges", str(args.coarse_edges)] if method == "multilevel" else []
            out.append((f"partition {graph} {method}",
                        ["partition", r(graph), r(f"{graph}-{method}"), "-p", "2",
                         "--method", method, *extra], f"{graph}-{method}"))
    for graph in ("hetero", "shop"):
        out.append((f"partition {graph} random", ["partition", r(graph), r(f"{graph}-random"),
                                                  "-p", "2", "--method", "random"],
                    f"{graph}-random"))
    for graph, method in (("planted", "multilevel"), ("rmat", "metis"), ("hetero", "random"),
                          ("shop", "random")):
        parts = f"{graph}-{method}-parts"
        out.append((f"dispatch {graph} {method}",
                    ["dispatch", r(graph), r(f"{graph}-{method}"), r(parts),
                     "--range-size", str(args.range_size)], parts))
        tables = ["--tables", inputs["tables"]] if graph == "shop" else []
        out.append((f"verify {graph} {method}", ["verify", r(graph), r(parts), *tables], None))
    return [(name, argv + common, folder) for name, argv, folder in out]


def hash_folder(folder: str) -> dict[str, tuple[str, int]]:
    """``{relative path: (sha256, size)}`` of every file (symlinks: their target's text)."""
    out = {}
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if os.path.islink(path):
                out[rel] = ("link:" + os.readlink(path), 0)
                continue
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            out[rel] = (h.hexdigest(), os.path.getsize(path))
    return out


def run_tree(label: str, tree: str, work: str, steps) -> dict:
    """Run every command with ``tree`` in ``work/run`` and hash each output folder:
    ``{"steps": {name: {"rc", "seconds", "files"}}, "module": ..., "loaded_from": ...}``."""
    entry, trainer = importable_tree(tree, work)
    prep = "pipeline.cli" if trainer == "trainer" else "graphprep.pipeline.cli"
    env = {**os.environ, "PYTHONPATH": entry, "TQDM_DISABLE": "1"}
    # The folder the commands run in: python -m puts it first on sys.path, so it must hold no
    # package named pipeline/formats/dispatch/trainer/graphprep (the repository's root does).
    cwd = os.path.join(work, "cwd")
    os.makedirs(cwd, exist_ok=True)
    loaded = subprocess.run([sys.executable, "-c", f"import {prep} as m; print(m.__file__)"],
                            env=env, cwd=cwd, capture_output=True, text=True)
    loaded_from = loaded.stdout.strip() or loaded.stderr.strip()[-500:]
    if not os.path.realpath(loaded_from).startswith(os.path.realpath(tree) + os.sep):
        raise SystemExit(f"{label}: {prep} loads from {loaded_from}, not from {tree}")
    run = os.path.join(work, "run")
    os.makedirs(run)
    result = {}
    for name, argv, folder in steps:
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", prep, *argv], env=env, cwd=cwd,
                           capture_output=True, text=True, timeout=900)
        step = {"rc": p.returncode, "seconds": round(time.perf_counter() - t, 1)}
        if p.returncode != 0:
            step["stderr_tail"] = p.stderr[-1500:]
        if folder is not None:
            path = os.path.join(run, folder)
            step["files"] = hash_folder(path) if os.path.isdir(path) else {}
        result[name] = step
        print(f"[same_bytes] {label}: {name}: rc {p.returncode}, {step['seconds']} s",
              file=sys.stderr, flush=True)
    return {"module": prep, "pythonpath": entry, "loaded_from": loaded_from, "steps": result}


# ---------------------------------------------------------------- comparison

def json_leaves_differing(a, b, path: str = ""):
    """``(path, value a, value b)`` of each differing leaf of two parsed JSON documents."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                yield sub, a.get(k, "<absent>"), b.get(k, "<absent>")
            else:
                yield from json_leaves_differing(a[k], b[k], sub)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from json_leaves_differing(x, y, f"{path}[{i}]")
    elif a != b or type(a) is not type(b):
        yield path, a, b


def volatile_reason(path: str, a, b) -> str | None:
    """Why the difference of leaf ``path`` is legitimate between two runs, else None."""
    last = re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1])
    if a != "<absent>" and b != "<absent>" and VOLATILE_KEY.search(last):
        return f"{last} (a time, date, version, host or pid field)"
    if isinstance(a, str) and isinstance(b, str) and TEMP_PATH.search(a) and TEMP_PATH.search(b):
        return f"{last} (a path under a temporary folder)"
    return None


def short(v) -> str:
    s = json.dumps(v)
    return s if len(s) <= 120 else s[:117] + "..."


def compare_file(rel: str, a_path: str, b_path: str) -> dict:
    """The entry of one differing file; ``"volatile"``: its differences are all legitimate."""
    entry = {"path": rel, "size_baseline": os.path.getsize(a_path),
             "size_tree": os.path.getsize(b_path)}
    if rel.endswith(".json"):
        try:
            with open(a_path) as f:
                a = json.load(f)
            with open(b_path) as f:
                b = json.load(f)
        except ValueError as err:
            entry["unparsed"] = str(err)
            return entry
        leaves = list(json_leaves_differing(a, b))
        keys, volatile = [], True
        for path, x, y in leaves:
            reason = volatile_reason(path, x, y)
            volatile &= reason is not None
            keys.append({"key": path, "baseline": short(x), "tree": short(y),
                         **({"volatile": reason} if reason else {})})
        entry["differing_keys"] = keys[:40]
        if len(keys) > 40:
            entry["differing_keys_left_off"] = len(keys) - 40
        entry["volatile"] = volatile and bool(leaves)
    return entry


def compare(a: dict, b: dict, steps, work: str, keep_a: str, keep_b: str) -> tuple[list, bool]:
    """Per step: files compared, identical, differing (real) and volatile; ``ok``. The
    baseline's outputs are in ``keep_a`` (moved there after hashing), the tree's in ``keep_b``
    (the path both ran in)."""
    out, ok = [], True
    for name, argv, folder in steps:
        sa, sb = a["steps"][name], b["steps"][name]
        row = {"step": name, "command": "prep " + " ".join(
            os.path.relpath(x, work) if os.path.isabs(x) else x
            for x in argv), "rc": [sa["rc"], sb["rc"]], "seconds": [sa["seconds"], sb["seconds"]]}
        for side, s in (("baseline", sa), ("tree", sb)):
            if "stderr_tail" in s:
                row[f"stderr_{side}"] = s["stderr_tail"]
        if sa["rc"] != 0 or sb["rc"] != 0 or sa["rc"] != sb["rc"]:
            ok = False
        if folder is not None:
            fa, fb = sa["files"], sb["files"]
            both = sorted(set(fa) & set(fb))
            same = [r for r in both if fa[r][0] == fb[r][0]]
            differing, volatile = [], []
            for rel in both:
                if fa[rel][0] == fb[rel][0]:
                    continue
                entry = compare_file(rel, os.path.join(keep_a, folder, rel),
                                     os.path.join(keep_b, folder, rel))
                (volatile if entry.pop("volatile", False) else differing).append(entry)
            row.update({"out": folder, "files_compared": len(both), "identical": len(same),
                        "differing": differing, "volatile": volatile,
                        "only_in_baseline": sorted(set(fa) - set(fb)),
                        "only_in_tree": sorted(set(fb) - set(fa))})
            if differing or row["only_in_baseline"] or row["only_in_tree"]:
                ok = False
        out.append(row)
    return out, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="9f1af7b",
                    help="commit of this repository to compare against (git archive'd)")
    ap.add_argument("--tree", default=REPO,
                    help="source tree to compare (default: this repository's working tree)")
    ap.add_argument("--tree-commit", default=None,
                    help="instead of --tree: this commit of the repository, git archive'd")
    ap.add_argument("--workdir", default=None,
                    help="scratch folder, empty or new; kept (default: a new temporary folder, "
                         "deleted at the end unless --keep)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary scratch folder (inputs, both trees, both runs)")
    ap.add_argument("--edges", type=int, default=200_000,
                    help="edges of the planted and hetero graphs and of the edge lists")
    ap.add_argument("--scale", type=int, default=14, help="R-MAT scale (edge factor 16)")
    ap.add_argument("--shop-users", type=int, default=2000, help="users of the shop tables")
    ap.add_argument("--chunk-size", type=int, default=65536, help="rows per chunk")
    ap.add_argument("--coarse-edges", type=int, default=20_000, help="multilevel's")
    ap.add_argument("--range-size", type=int, default=8192, help="dispatch's")
    args = parse_args(ap, {"edges": 5000, "scale": 9, "shop_users": 100, "chunk_size": 1024,
                           "coarse_edges": 1000, "range_size": 256})
    t0 = time.perf_counter()
    work = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="same-bytes-"))
    os.makedirs(work, exist_ok=True)
    if os.listdir(work):
        ap.error(f"--workdir {work} is not empty")
    try:
        base_tree = os.path.join(work, "trees", "baseline")
        base_commit = extract(args.baseline, base_tree)
        tree, tree_commit = os.path.abspath(args.tree), None
        if args.tree_commit:
            tree = os.path.join(work, "trees", "tree")
            tree_commit = extract(args.tree_commit, tree)
        inputs = make_inputs(os.path.join(work, "inputs"), tree, args.edges, args.shop_users)
        run = os.path.join(work, "run")
        steps = commands(args, inputs, run)
        results = {}
        for label, src in (("baseline", base_tree), ("tree", tree)):
            results[label] = run_tree(label, src, work, steps)
            if label == "baseline":     # frees work/run for the tree, keeps the bytes to diff
                os.rename(run, os.path.join(work, "run-baseline"))
        rows, ok = compare(results["baseline"], results["tree"], steps, work,
                           os.path.join(work, "run-baseline"), run)
        totals = {k: sum(r.get(k, 0) for r in rows) for k in ("files_compared", "identical")}
        totals.update({k: sum(len(r.get(k, ())) for r in rows)
                       for k in ("differing", "volatile", "only_in_baseline", "only_in_tree")})
        totals["failed_commands"] = sum(1 for r in rows if r["rc"] != [0, 0])
        print(json.dumps({
            "baseline": {"commit": base_commit, **{k: results["baseline"][k]
                                                  for k in ("module", "loaded_from")}},
            "tree": {"path": tree, "commit": tree_commit,
                     **{k: results["tree"][k] for k in ("module", "loaded_from")}},
            "sizes": {k: getattr(args, k) for k in ("edges", "scale", "shop_users",
                                                     "chunk_size", "coarse_edges",
                                                     "range_size")} | {"workers": WORKERS},
            "quick": args.quick, "workdir": work, "steps": rows, "totals": totals,
            "same_bytes": ok, "wall_s": round(time.perf_counter() - t0, 1)}, indent=1))
        return 0 if ok else 1
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
