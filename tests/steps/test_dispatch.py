"""prep dispatch + prep verify: every edge and node survives, mutations are caught, reruns
resume to identical bytes, delivery to machines and fsspec URLs."""

import contextlib
import filecmp
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import edges_of, node_data_of, shared_data
from graphprep.formats.partitioned import load_partitioned


def run_cli(scheduler, *args, code=0):
    from click.testing import CliRunner
    from graphprep.pipeline.cli import prep as cli
    r = CliRunner().invoke(cli, [str(a) for a in args] + ["--no-progress", "--scheduler",
                                                          scheduler])
    assert r.exit_code == code, r.output
    return r


@pytest.fixture(scope="module")
def cora(tmp_path_factory, scheduler):
    out = tmp_path_factory.mktemp("cora") / "cora"
    run_cli(scheduler, "chunk", shared_data("planetoid"), out, "--name", "cora",
            "--chunk-size", 3000)
    return out


@pytest.fixture(scope="module")
def mag(tmp_path_factory, scheduler):
    out = tmp_path_factory.mktemp("mag") / "mag"
    run_cli(scheduler, "synth", out, "--hetero", "--nodes", 6000, "--edges", 30000,
            "--chunk-size", 4000)
    return out


def tree(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def same_bytes(a, b):
    files = tree(a)
    assert files == tree(b)
    _, mismatch, errors = filecmp.cmpfiles(a, b, files, shallow=False)
    assert not mismatch and not errors, mismatch


def reconstruct(out, etype):
    """Independent of verify: every part's edges mapped back to (edge ID, src, dst)."""
    g = load_partitioned(str(out))
    et = [e for e in g.edge_types if str(e) == etype][0]
    rows = []
    for p in range(g.num_parts):
        load = lambda *r: np.load(g.part_path(p, *r))  # noqa: E731
        indptr = load("edges", et.dirname, "indptr.npy")
        idx = load("edges", et.dirname, "indices.npy").astype(np.int64)
        eid = load("edges", et.dirname, "orig_ids.npy")
        dst = np.repeat(load("nodes", et.dst, "orig_ids.npy"), np.diff(indptr))
        own = load("nodes", et.src, "orig_ids.npy")
        halo_new = load("nodes", et.src, "halo_ids.npy")
        src = np.empty(len(idx), np.int64)
        src[idx < len(own)] = own[idx[idx < len(own)]]
        h = halo_new[idx[idx >= len(own)] - len(own)]
        owners = g.owner(et.src, h)
        src[idx >= len(own)] = [np.load(g.part_path(q, "nodes", et.src, "orig_ids.npy"))[
            n - g.node_map[et.src][q][0]] for q, n in zip(owners, h)]
        rows.append(np.stack([eid, src, dst]))
    rows = np.concatenate(rows, axis=1)
    return rows[:, np.argsort(rows[0])]


@pytest.mark.parametrize("method", ["random", "metis"])
@pytest.mark.parametrize("parts", [1, 2, 4])
def test_cora_round_trip(tmp_path, scheduler, cora, method, parts):
    run_cli(scheduler, "partition", cora, tmp_path / "a", "-p", parts, "--method", method)
    run_cli(scheduler, "dispatch", cora, tmp_path / "a", tmp_path / "d", "--range-size", 1000)
    run_cli(scheduler, "verify", cora, tmp_path / "d")
    rows = reconstruct(tmp_path / "d", "_N:_E:_N")
    src, dst = edges_of(cora)
    assert np.array_equal(rows[0], np.arange(len(src)))
    assert np.array_equal(rows[1], src) and np.array_equal(rows[2], dst)
    g = load_partitioned(str(tmp_path / "d"))
    assignment = np.load(tmp_path / "a" / "_N.npy")
    feat = node_data_of(cora)
    for p in range(parts):
        orig = np.load(g.part_path(p, "nodes", "_N", "orig_ids.npy"))
        assert (assignment[orig] == p).all() and (np.diff(orig) > 0).all()
        assert np.array_equal(np.load(g.part_path(p, "node_feats", "_N", "feat.npy")), feat[orig])
    assert g.node_feats["_N"]["feat"] == {"dtype": "float32", "shape": [1433]}


@pytest.mark.parametrize("method", ["random", "metis"])
def test_hetero_round_trip(tmp_path, scheduler, mag, method):
    run_cli(scheduler, "partition", mag, tmp_path / "a", "-p", 3, "--method", method)
    run_cli(scheduler, "dispatch", mag, tmp_path / "a", tmp_path / "d", "--range-size", 700)
    run_cli(scheduler, "verify", mag, tmp_path / "d")
    rows = reconstruct(tmp_path / "d", "author:writes:paper")
    src, dst = edges_of(mag, "author:writes:paper")
    assert np.array_equal(rows[1], src) and np.array_equal(rows[2], dst)


@pytest.fixture
def dispatched(tmp_path, scheduler, cora):
    run_cli(scheduler, "partition", cora, tmp_path / "a", "-p", 2)
    run_cli(scheduler, "dispatch", cora, tmp_path / "a", tmp_path / "d")
    return tmp_path / "d"


def edit(path, fn):
    arr = np.load(path)
    arr = fn(arr)
    np.save(path, arr)


def test_mutation_flip_endpoint(scheduler, cora, dispatched):
    path = dispatched / "part-0/edges/_N___E___N/indices.npy"
    edit(path, lambda a: np.concatenate([[(a[0] + 1) % 50], a[1:]]).astype(a.dtype))
    r = run_cli(scheduler, "verify", cora, dispatched, code=1)
    assert "part 0, edge type _N:_E:_N, original ID" in r.output and "endpoints" in r.output


def test_mutation_drop_edge(scheduler, cora, dispatched):
    base = dispatched / "part-1/edges/_N___E___N"
    edit(base / "indices.npy", lambda a: a[:-1])
    edit(base / "orig_ids.npy", lambda a: a[:-1])
    edit(base / "indptr.npy", lambda a: np.concatenate([a[:-1], [a[-1] - 1]]))
    r = run_cli(scheduler, "verify", cora, dispatched, code=1)
    assert "part 1, edge type _N:_E:_N" in r.output and "edge_map" in r.output


def test_mutation_duplicate_edge_id(scheduler, cora, dispatched):
    edit(dispatched / "part-0/edges/_N___E___N/orig_ids.npy",
         lambda a: np.concatenate([[a[1]], a[1:]]))
    r = run_cli(scheduler, "verify", cora, dispatched, code=1)
    assert "edge type _N:_E:_N, original ID" in r.output and "missing" in r.output


def test_mutation_feature_value(scheduler, cora, dispatched):
    path = dispatched / "part-1/node_feats/_N/feat.npy"
    def change(a):
        a[5, 3] += 1
        return a
    edit(path, change)
    orig = np.load(dispatched / "part-1/nodes/_N/orig_ids.npy")[5]
    r = run_cli(scheduler, "verify", cora, dispatched, code=1)
    assert f"part 1, node type _N, original ID {orig}: node data 'feat' differs" in r.output


def test_mutation_swap_two_feature_rows(scheduler, cora, dispatched):
    """Both rows still exist, each under the other node's ID: caught, the first one named."""
    path = dispatched / "part-0/node_feats/_N/feat.npy"
    feat = np.load(path)
    j = int(np.flatnonzero((feat != feat[0]).any(axis=1))[0])
    edit(path, lambda a: a[[j, *range(1, j), 0, *range(j + 1, len(a))]])
    orig = np.load(dispatched / "part-0/nodes/_N/orig_ids.npy")[[0, j]]
    r = run_cli(scheduler, "verify", cora, dispatched, code=1)
    assert f"original ID {min(orig)}: node data 'feat' differs" in r.output


def test_verify_writes_no_scratch_when_parts_agree(scheduler, cora, dispatched, monkeypatch):
    """The fingerprint path needs no disk: scratch buckets are only for locating a difference."""
    import tempfile

    def refuse(*a, **k):
        raise AssertionError("verify made a scratch folder although nothing differs")
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    run_cli(scheduler, "verify", cora, dispatched)


def test_row_hash_sees_values_as_the_row_comparison_does():
    from graphprep.dispatch.fingerprint import row_hash
    a = np.array([[0.0, 1.0], [np.nan, 2.0], [3.0, 4.0]], np.float32)
    b = a.copy()
    b[0, 0] = -0.0
    b.view(np.uint32)[1, 0] = 0x7FC00001          # another NaN payload
    assert (row_hash(a) == row_hash(b)).all()
    c = a.copy()
    c[2, 1] = np.nextafter(np.float32(4.0), np.float32(5.0))
    assert (row_hash(a) != row_hash(c)).tolist() == [False, False, True]
    assert row_hash(np.zeros((3, 0), np.float32)).shape == (3,)
    odd = np.arange(9, dtype=np.int8).reshape(3, 3)   # rows of 3 bytes, padded to a word
    assert len(set(row_hash(odd).tolist())) == 3


def test_mutation_swap_halo_ids(scheduler, cora, dispatched):
    edit(dispatched / "part-0/nodes/_N/halo_ids.npy", lambda a: a[[1, 0, *range(2, len(a))]])
    r = run_cli(scheduler, "verify", cora, dispatched, code=1)
    assert "part 0, node type _N" in r.output and "halo_ids" in r.output


def test_identical_bytes_for_one_and_two_workers(tmp_path, scheduler, mag):
    from click.testing import CliRunner
    from graphprep.pipeline.cli import prep as cli
    run_cli(scheduler, "partition", mag, tmp_path / "a", "-p", 2)
    for w in (1, 2):
        r = CliRunner().invoke(cli, ["dispatch", str(mag), str(tmp_path / "a"),
                                     str(tmp_path / f"d{w}"), "--workers", str(w),
                                     "--no-progress", "--range-size", "900"])
        assert r.exit_code == 0, r.output
    same_bytes(tmp_path / "d1", tmp_path / "d2")


RESUMED = re.compile(r"resumed the interrupted dispatch in \S+: (\d+) of (\d+) tasks were done "
                     r"already \(relabel (\d+) of (\d+), shuffle (\d+) of (\d+), build (\d+) of "
                     r"(\d+)\); ran (\d+)")


def finished_tasks(partial) -> dict[str, list[str]]:
    """Per dispatch step, the tasks whose output lies under ``partial`` (``.OUT.partial``):
    relabel pieces and edge buckets in ``.work``, built parts beside it. Each is a folder
    renamed into place when its task completed (``NAME.tmp`` while in progress)."""
    def folders(pattern):
        return sorted(str(f.relative_to(partial)) for f in partial.glob(pattern)
                      if f.is_dir() and not f.name.endswith(".tmp"))
    return {"relabel": folders(".work/nodes/*/r*"), "shuffle": folders(".work/edges/*/c*"),
            "build": folders("part-*")}


def file_ids(folder) -> dict[str, tuple[int, int]]:
    """``{relative path: (inode, mtime in ns)}`` of every file under ``folder``: a file
    rewritten or written anew changes one of them."""
    return {os.path.relpath(os.path.join(d, f), folder):
            ((st := os.stat(os.path.join(d, f))).st_ino, st.st_mtime_ns)
            for d, _, fs in os.walk(folder) for f in fs}


def kill_group_when(proc, ready, timeout: float = 60) -> None:
    """SIGKILL ``proc``'s process group (the ``prep`` client and its embedded Dask workers) as
    soon as ``ready()`` holds, then wait until none of them can still write (gone or zombie):
    what is on disk afterwards is exactly what the killed run finished."""
    import psutil
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, "dispatch ended before it could be killed midway"
        assert time.monotonic() < deadline, "the kill point never came"
        time.sleep(0.005)
    members = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    for m in members:
        with contextlib.suppress(psutil.NoSuchProcess):
            while m.status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() < deadline + 10, m
                time.sleep(0.01)


def test_killed_dispatch_resumes_without_redoing_finished_tasks(tmp_path, scheduler):
    """Killed while building parts (every relabel and shuffle task and some parts done), the
    rerun reuses exactly what the killed run finished, says so, leaves the finished parts' files
    untouched (same inodes and mtimes in OUT), and gives the bytes of an uninterrupted run; an
    uninterrupted run reports no resume."""
    run_cli(scheduler, "synth", tmp_path / "g", "--nodes", 40000, "--edges", 600000,
            "--chunk-size", 20000)
    # 8 parts on 2 workers: after the first part is built, three more rounds remain, so the
    # kill lands midway even when a loaded machine is slow to notice
    run_cli(scheduler, "partition", tmp_path / "g", tmp_path / "a", "-p", 8)
    fresh = run_cli(scheduler, "dispatch", tmp_path / "g", tmp_path / "a", tmp_path / "ref",
                    "--range-size", 4000)
    assert "interrupted dispatch" not in fresh.output, fresh.output   # no resume reported
    cmd = [sys.executable, "-m", "graphprep.pipeline.cli", "dispatch", str(tmp_path / "g"),
           str(tmp_path / "a"), str(tmp_path / "d"), "--range-size", "4000", "--no-progress"]
    partial = tmp_path / ".d.partial"                          # built beside the output
    # The embedded cluster (no --scheduler) dies with the process group: no task of the killed
    # run finishes after the kill.
    proc = subprocess.Popen(cmd + ["--workers", "2"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_group_when(proc, lambda: finished_tasks(partial)["build"])
    done = finished_tasks(partial)
    # Parts are built after every relabel and shuffle task; 2 workers build 2 of the 8 parts
    # at most at once: the kill landed after some tasks and before all.
    assert len(done["relabel"]) == 10 and len(done["shuffle"]) == 30, done
    assert 1 <= len(done["build"]) < 8, done
    assert not (tmp_path / "d").exists()
    built = {part: file_ids(partial / part) for part in done["build"]}
    rerun = subprocess.run(cmd + ["--scheduler", scheduler], capture_output=True, text=True,
                           timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    found = RESUMED.search(rerun.stdout + rerun.stderr)   # shown without -v
    assert found, rerun.stderr
    reused, total, *steps, ran = map(int, found.groups())
    assert steps == [10, 10, 30, 30, len(done["build"]), 8], found.group(0)
    assert (reused, total, ran) == (sum(map(len, done.values())), 48, 48 - reused)
    for part, ids in built.items():   # not rebuilt: the very files the killed run wrote
        assert file_ids(tmp_path / "d" / part) == ids, part
    same_bytes(tmp_path / "ref", tmp_path / "d")
    run_cli(scheduler, "verify", tmp_path / "g", tmp_path / "d")


def test_machines_delivery(tmp_path, cora):
    from click.testing import CliRunner
    from graphprep.pipeline.cli import prep as cli
    r = CliRunner().invoke(cli, ["partition", str(cora), str(tmp_path / "a"), "-p", 3,
                                 "--no-progress"])
    assert r.exit_code == 0
    r = CliRunner().invoke(cli, ["dispatch", str(cora), str(tmp_path / "a"), str(tmp_path / "d"),
                                 "--machines", "m0,m1", "--no-progress"])
    assert r.exit_code == 0, r.output
    g = load_partitioned(str(tmp_path / "d"))
    assert [(p.path, p.machine) for p in g.parts] == [("m0/part-0", "m0"), ("m1/part-1", "m1"),
                                                      ("m0/part-2", "m0")]
    assert sorted(os.listdir(tmp_path / "d" / "m0")) == ["part-0", "part-2"]


def test_missing_machine_worker_is_named(tmp_path, scheduler, cora):
    run_cli(scheduler, "partition", cora, tmp_path / "a", "-p", 2)
    r = run_cli(scheduler, "dispatch", cora, tmp_path / "a", tmp_path / "d", "--machines", "gpu7",
                code=2)
    assert "gpu7" in r.output


def test_fsspec_memory_output(tmp_path, cora):
    import fsspec
    from distributed import LocalCluster
    from graphprep.pipeline.core.cluster import ClusterOptions
    from graphprep.dispatch.job import run_dispatch
    from graphprep.pipeline.partition import PartitionOptions, run_partition

    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:
        opts = ClusterOptions(scheduler=cluster.scheduler_address, progress=False)
        run_partition(str(cora), str(tmp_path / "a"), "random", PartitionOptions(2), opts)
        run_dispatch(str(cora), str(tmp_path / "a"), "memory://graphprep-test/d", opts)
        run_dispatch(str(cora), str(tmp_path / "a"), str(tmp_path / "local"), opts)
    fs = fsspec.filesystem("memory")
    meta = json.loads(fs.cat("/graphprep-test/d/graph.json"))
    assert meta["num_parts"] == 2
    version = meta["parts"][0]["path"].split("/")[0]          # parts live under one version
    for rel in ("part-1/edges/_N___E___N/indices.npy", "part-0/node_feats/_N/feat.npy"):
        assert fs.cat(f"/graphprep-test/d/{version}/{rel}") == (tmp_path / "local" / rel).read_bytes()


def test_part_build_holds_one_sub_range_of_edges(tmp_path, scheduler):
    """Writing a part's CSC holds about 48 bytes per edge of one destination sub-range (its
    rows, their order, one sorted column at a time), whatever the part's size: the traced peak
    (numpy allocations are traced) of each ``_write_csc``, run in this process on the shuffled
    buckets, stays within 64 bytes per edge of the part's largest sub-range, well under the
    part's own edge rows. The CSC is the same as the CLI's."""
    import tracemalloc

    from graphprep.dispatch import build, job
    from graphprep.dispatch.plan import DispatchPlan
    from graphprep.formats import load_chunked_graph
    from graphprep.formats.assignment import load_assignment

    g, a = tmp_path / "g", tmp_path / "a"
    run_cli(scheduler, "synth", g, "--nodes", 20000, "--edges", 400000, "--chunk-size", 50000)
    run_cli(scheduler, "partition", g, a, "-p", 2)
    run_cli(scheduler, "dispatch", g, a, tmp_path / "cli", "--range-size", 2000)
    graph = load_chunked_graph(str(g))
    plan = DispatchPlan(graph, load_assignment(str(a), graph), str(tmp_path / "work"), 2000)
    peaks, write_csc = [], build._write_csc

    def traced(*args):
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            out = write_csc(*args)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
            return out
        finally:
            tracemalloc.stop()

    build._write_csc = traced
    try:
        job._dispatch_into(plan, str(tmp_path / "local"), lambda fn, items, *_, **__:
                           [fn(x) for x in items], "", {}, (), job.Reuse())
    finally:
        build._write_csc = write_csc
    for p, peak in enumerate(peaks):
        indptr = np.load(tmp_path / "local" / f"part-{p}" / "edges" / "_N___E___N" /
                         "indptr.npy")
        sub_range_edges = np.diff(indptr[::2000].tolist() + [indptr[-1]]).max()
        assert 4 * sub_range_edges < indptr[-1], "the part must span several sub-ranges"
        assert peak <= 64 * sub_range_edges + (64 << 10), (p, peak, sub_range_edges)
        same = tmp_path / "cli" / f"part-{p}" / "edges" / "_N___E___N"
        for name in ("indptr.npy", "indices.npy", "orig_ids.npy"):
            assert filecmp.cmp(same / name, tmp_path / "local" / f"part-{p}" / "edges" /
                               "_N___E___N" / name, shallow=False), name
