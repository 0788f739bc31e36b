"""Cost of the checks `prep dispatch` makes on what it reads; prints one JSON object.

A synth graph (default 10^7 edges, 10^6 nodes, 32 float32 features) and its 4-part random
assignment are built under ``--workdir`` (reused). Then dispatch's relabel and shuffle tasks run
in this process, in order, ``--repeat`` times with the checks as shipped and, as the baseline
of the same run, with the check functions replaced by no-ops (edge IDs then go unchecked into
the old->new map, as before issue 9). A last checked run times the check functions themselves
(edge ID ranges: ``graphprep.formats.validate.check_ids``; NaN/inf scans:
``graphprep.formats.fields.check_finite``) against the tasks' wall time. ``--quick``: 10^4 edges,
one repeat (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import parse_args, partitioned_synth  # noqa: E402

import graphprep.dispatch.shuffle as shuffle_module  # noqa: E402
import graphprep.formats.validate as validate_module  # noqa: E402
import graphprep.formats.fields as fields_module  # noqa: E402
from graphprep.dispatch.plan import DispatchPlan  # noqa: E402
from graphprep.dispatch.relabel import RangeTask, count_range, node_book, relabel_range  # noqa: E402
from graphprep.dispatch.shuffle import BucketTask, bucket_edges  # noqa: E402
from graphprep.formats import load_chunked_graph, read_edge_chunk  # noqa: E402
from graphprep.formats.assignment import load_assignment  # noqa: E402

CHECKS = ((validate_module, "check_ids"), (fields_module, "check_finite"))


@contextlib.contextmanager
def patched(replacements: dict):
    """Temporarily replace module attributes ``{(module, name): value}``."""
    saved = {key: getattr(*key) for key in replacements}
    for (module, name), value in replacements.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def no_checks():
    off = {key: (lambda *a, **k: None) for key in CHECKS}
    off[(shuffle_module, "read_checked_edges")] = lambda path, files, **k: read_edge_chunk(path,
                                                                                           files)
    return patched(off)


def run_tasks(graph_dir: str, assignment_dir: str, work: str) -> tuple[float, float]:
    """Relabel then shuffle every range/chunk in process; (relabel s, shuffle s)."""
    shutil.rmtree(work, ignore_errors=True)
    plan = DispatchPlan(load_chunked_graph(graph_dir), load_assignment(assignment_dir), work)
    t, et = plan.graph.node_types[0], plan.graph.edge_types[0]
    ranges = plan.ranges(t)
    book, bases = node_book([count_range(RangeTask(plan, t, k, a, b))
                             for k, (a, b) in enumerate(ranges)])
    os.makedirs(os.path.dirname(plan.map_path(t)), exist_ok=True)
    np.lib.format.open_memmap(plan.map_path(t), mode="w+", dtype=np.int64,
                              shape=(plan.graph.num_nodes[t],)).flush()
    start = time.perf_counter()
    for k, (a, b) in enumerate(ranges):
        relabel_range(RangeTask(plan, t, k, a, b, bases[k]))
    relabel = time.perf_counter() - start
    start = time.perf_counter()
    for k, (path, a, b) in enumerate(plan.edge_chunks(et)):
        bucket_edges(BucketTask(plan, et, k, path, a, b, tuple(map(tuple, book))))
    return relabel, time.perf_counter() - start


def time_inside_checks(graph_dir, assignment_dir, work) -> dict:
    spent = {name: 0.0 for _, name in CHECKS}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start
        return wrapper

    with patched({(m, n): timed(n, getattr(m, n)) for m, n in CHECKS}):
        relabel, shuffle = run_tasks(graph_dir, assignment_dir, work)
    tasks = relabel + shuffle
    return {"inside_checks_s": {k: round(v, 4) for k, v in spent.items()},
            "tasks_s": round(tasks, 3),
            "checks_pct_of_tasks": round(100 * sum(spent.values()) / tasks, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=10**7)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default="bench-out/read-checks")
    args = parse_args(ap, {"edges": 10**4, "repeat": 1})
    graph_json = partitioned_synth(args.workdir, args.edges, (4,))[4]
    graph_dir = os.path.join(args.workdir, f"synth-{args.edges}")
    assignment = f"{graph_dir}-a4"
    work = os.path.join(args.workdir, "tasks-work")
    runs = {"checked": [], "unchecked": []}
    for _ in range(args.repeat):  # interleaved: drift hits both alike
        runs["checked"].append(run_tasks(graph_dir, assignment, work))
        with no_checks():
            runs["unchecked"].append(run_tasks(graph_dir, assignment, work))
    best = {mode: [round(min(r[i] for r in rs), 3) for i in range(2)]
            for mode, rs in runs.items()}
    result = {"edges": args.edges, "dispatched": graph_json,
              "relabel_s": {m: b[0] for m, b in best.items()},
              "shuffle_s": {m: b[1] for m, b in best.items()},
              "added_pct": round(100 * (sum(best["checked"]) / sum(best["unchecked"]) - 1), 2),
              **time_inside_checks(graph_dir, assignment, work)}
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
