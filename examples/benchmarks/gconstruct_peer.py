"""GraphStorm's ``gconstruct`` as a peer of ``prep chunk`` on the bench_keys tables.

GraphStorm (AWS) does the same step as ``prep chunk`` of tables: string-keyed node and edge
tables -> a graph with an ID mapping, features and categorical transforms. It is *not* a
dependency of this project: it runs as a subprocess of another Python (``python``, e.g. a
venv made by ``pip install graphstorm`` plus the DGL that imports with its torch), so this
module imports only the standard library, psutil and the benchmarks' `common` helpers.

- :func:`write_config`: the gconstruct JSON config for the tables of ``bench_keys.make_tables``
  (``nodes.parquet``: key, f0, f1, country; ``edges/*.parquet``: src, dst, amount, channel),
  as close as gconstruct allows to ``bench_keys.CONFIG``: f0 and f1 one float feature ``feat``
  (no transform), ``amount`` a float feature, ``country`` and ``channel`` ``to_categorical``.
  One difference gconstruct imposes: its ``to_categorical`` writes an int8 one-hot
  ``[rows, categories]``; ``prep chunk`` writes int64 codes ``[rows]`` (its default, not
  ``one_hot``).
- :func:`run_gconstruct`: runs ``python -m graphstorm.gconstruct.construct_graph`` on it,
  measuring wall time and the peak memory of the process tree (see there), then reads back
  what it wrote (nodes, edges, feature shapes) with a second, untimed, run of ``python``.
  It never raises for a failure of gconstruct: it returns ``{"error": ...}``.

``--num-processes 2`` only parallelizes gconstruct across *files* of a type (one file: read in
its main process); ``make_tables`` writes one node file and one edge file per 8 Mi edges, so
below that size gconstruct runs in one process, as ``"processes"`` shows. GraphStorm also
renames the types of a graph of one node type and one edge type to ``_N`` and
``(_N, _E, _N)``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

from common import PeriodicSampler

MB = 1 << 20

# ``bench_keys.CONFIG`` in gconstruct's words: gconstruct-v0.1 config (see
# graphstorm/gconstruct/construct_graph.py and transform.py:parse_feat_ops).
NODE_TYPE, RELATION = "user", ["user", "pays", "user"]


def write_config(folder: str, path: str | None = None, normalize: bool = False) -> str:
    """Writes the gconstruct config for the tables under ``folder`` to ``path`` (default
    ``folder/gconstruct.json``); returns ``path``. ``normalize``: ``max_min_norm`` on the float
    features (gconstruct allows it on one column only, so f0 and f1 then become two features,
    ``f0`` and ``f1``, not ``feat``); the default is none, like ``prep chunk``'s config."""
    folder = os.path.abspath(folder)
    path = path or os.path.join(folder, "gconstruct.json")

    def floats(columns: list[str], name: str) -> list[dict]:
        if not normalize:
            return [{"feature_col": columns if len(columns) > 1 else columns[0],
                     "feature_name": name, "out_dtype": "float32"}]
        return [{"feature_col": c, "feature_name": c if len(columns) > 1 else name,
                 "out_dtype": "float32", "transform": {"name": "max_min_norm"}}
                for c in columns]

    def categorical(column: str) -> dict:
        return {"feature_col": column, "feature_name": column,
                "transform": {"name": "to_categorical"}}

    conf = {
        "version": "gconstruct-v0.1",
        "nodes": [{
            "node_type": NODE_TYPE, "format": {"name": "parquet"},
            "files": [os.path.join(folder, "nodes.parquet")], "node_id_col": "key",
            "features": floats(["f0", "f1"], "feat") + [categorical("country")]}],
        "edges": [{
            "relation": RELATION, "format": {"name": "parquet"},
            "files": [os.path.join(folder, "edges", "*.parquet")],
            "source_id_col": "src", "dest_id_col": "dst",
            "features": floats(["amount"], "amount") + [categorical("channel")]}],
    }
    with open(path, "w") as f:
        json.dump(conf, f, indent=1)
    return path


def command(python: str, conf: str, out_dir: str, graph_name: str = "keys_bench",
            num_processes: int = 2, output_format: str = "DistDGL") -> list[str]:
    """The gconstruct command line (GraphStorm 0.5.1's flags). ``DistDGL`` with one part and
    ``--part-method random``: no METIS, the partition a plain copy; ``DGL``: one .dgl file."""
    cmd = [python, "-m", "graphstorm.gconstruct.construct_graph", "--conf-file", conf,
           "--output-dir", out_dir, "--graph-name", graph_name,
           "--num-processes", str(num_processes), "--output-format", output_format]
    if output_format == "DistDGL":
        cmd += ["--num-parts", "1", "--part-method", "random"]
    return cmd


def _rollup(pid: int) -> tuple[int, int]:
    """(Rss, Pss) of a process in bytes from /proc/PID/smaps_rollup; (0, 0) if gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) << 10
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) << 10
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return rss, pss


class TreeSampler(PeriodicSampler):
    """Polls a process and its descendants (psutil) every ``interval_s``: the peak of the
    *sum* of their RSS, and of the sum of their PSS (shared pages, e.g. the libraries a forked
    worker shares with its parent, counted once over the tree), and the most processes seen
    at once."""

    def __init__(self, pid: int, interval_s: float = 0.05):
        super().__init__(interval_s)
        self.pid = pid
        self.rss = self.pss = self.procs = 0

    def sample(self) -> None:
        import psutil
        try:
            root = psutil.Process(self.pid)
            pids = [root.pid] + [c.pid for c in root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        sizes = [_rollup(p) for p in pids]
        self.rss = max(self.rss, sum(r for r, _ in sizes))
        self.pss = max(self.pss, sum(p for _, p in sizes))
        self.procs = max(self.procs, len(pids))



INSPECT = r"""
import glob, json, os, sys
out, name, fmt = sys.argv[1:4]
res = {}
def shapes(tensors):
    return {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in
            sorted(tensors.items()) if not k.endswith("__gs_orig_id")}
if fmt == "DistDGL":
    from dgl.data.utils import load_tensors
    with open(os.path.join(out, name + ".json")) as f:
        meta = json.load(f)
    res["nodes"], res["edges"] = meta["num_nodes"], meta["num_edges"]
    res["num_parts"] = meta["num_parts"]
    part = os.path.join(out, "part0")
    res["node_features"] = shapes(load_tensors(os.path.join(part, "node_feat.dgl")))
    res["edge_features"] = shapes(load_tensors(os.path.join(part, "edge_feat.dgl")))
else:
    import dgl
    (g,), _ = dgl.load_graphs(os.path.join(out, name + ".dgl"))
    res["nodes"], res["edges"] = g.num_nodes(), g.num_edges()
    res["node_features"] = shapes({f"{t}/{k}": v for t in g.ntypes
                                   for k, v in g.nodes[t].data.items()})
    res["edge_features"] = shapes({":".join(t) + "/" + k: v for t in g.canonical_etypes
                                   for k, v in g.edges[t].data.items()})
import pyarrow.parquet as pq
maps = sorted(glob.glob(os.path.join(out, "raw_id_mappings", "*", "*.parquet")))
res["id_map_rows"] = sum(pq.read_metadata(p).num_rows for p in maps)
res["output_mb"] = round(sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out)
                             for f in fs) / 2**20, 1)
print(json.dumps(res))
"""


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def measured_run(cmd: list[str], timeout_s: float | None = None) -> tuple[int, str, dict]:
    """Runs ``cmd`` (stdout dropped): ``(exit status, stderr, {"seconds", "peak_tree_rss_mb",
    "peak_tree_pss_mb", "max_process_rss_mb", "processes"})`` (see :func:`run_gconstruct`).
    Killed after ``timeout_s``."""
    with tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        with TreeSampler(proc.pid) as sampler:
            deadline = None if timeout_s is None else t + timeout_s
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if deadline is not None and time.perf_counter() > deadline:
                    proc.kill()
                    pid, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.02)
        seconds = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)   # Popen must not wait again
        err.seek(0)
        stderr = err.read()
    return proc.returncode, stderr, {
        "seconds": round(seconds, 2), "peak_tree_rss_mb": round(sampler.rss / MB, 1),
        "peak_tree_pss_mb": round(sampler.pss / MB, 1),
        "max_process_rss_mb": round(usage.ru_maxrss / 1024, 1), "processes": sampler.procs}


def run_gconstruct(python: str, folder: str, out_dir: str | None = None,
                   graph_name: str = "keys_bench", num_processes: int = 2,
                   output_format: str = "DistDGL", normalize: bool = False,
                   timeout_s: float | None = None) -> dict:
    """gconstruct on the bench_keys tables under ``folder``, output under ``out_dir`` (default
    ``folder/gconstruct``, left in place). Returns ``{"seconds", "peak_tree_rss_mb",
    "peak_tree_pss_mb", "max_process_rss_mb", "processes", "command", "output": {nodes, edges,
    feature shapes, ...}}``, or ``{"error": the last lines of its stderr, ...}``.

    Memory: ``peak_tree_rss_mb`` is the peak of the sum of the RSS of gconstruct and all its
    descendants, polled every 50 ms through psutil and /proc/PID/smaps_rollup (a peak shorter
    than that can be missed); ``peak_tree_pss_mb`` the same with PSS; ``max_process_rss_mb``
    the kernel's exact ``ru_maxrss`` from ``wait4``: the largest single process of the tree
    (the figure ``/usr/bin/time -v`` prints as "Maximum resident set size")."""
    out_dir = out_dir or os.path.join(folder, "gconstruct")
    conf = write_config(folder, normalize=normalize)
    cmd = command(python, conf, out_dir, graph_name, num_processes, output_format)
    row = {"command": " ".join(cmd[1:]), "output_format": output_format,
           "num_processes": num_processes}
    try:
        status, stderr, measured = measured_run(cmd, timeout_s)
        row.update(measured)
        if status == 0:
            # The floor under those figures: starting Python and importing gconstruct (torch,
            # DGL, pandas, pyarrow), measured the same way; untimed above.
            _, _, floor = measured_run([python, "-c",
                                        "import graphstorm.gconstruct.construct_graph"])
            row["import_floor"] = {k: floor[k] for k in ("seconds", "peak_tree_rss_mb")}
    except OSError as e:                  # e.g. ``python`` does not exist
        return {**row, "error": f"{type(e).__name__}: {e}"}
    if status != 0:
        return {**row, "error": f"exit status {status}: {_tail(stderr)}"}
    check = subprocess.run([python, "-c", INSPECT, out_dir, graph_name, output_format],
                           capture_output=True, text=True)
    try:
        row["output"] = json.loads(check.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {**row, "error": f"reading its output: {_tail(check.stderr)}"}
    return row


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="gconstruct on a folder of bench_keys tables")
    ap.add_argument("python", help="a Python with graphstorm installed")
    ap.add_argument("folder", help="holds nodes.parquet and edges/*.parquet")
    ap.add_argument("--output-format", default="DistDGL", choices=["DistDGL", "DGL"])
    ap.add_argument("--num-processes", type=int, default=2)
    ap.add_argument("--normalize", action="store_true", help="max_min_norm on float features")
    a = ap.parse_args()
    print(json.dumps(run_gconstruct(a.python, a.folder, output_format=a.output_format,
                                    num_processes=a.num_processes, normalize=a.normalize),
                     indent=1))
