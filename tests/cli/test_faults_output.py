"""Fault injection on outputs and the cluster: OUT aliasing an input, failed and killed
overwrites, concurrent runs, lost Dask workers, a full disk, bad option values.

Every case checks the exit code, that the message names the culprit, and that nothing was lost:
the inputs' bytes and any previous output's bytes are unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from faultkit import (PREP, ROOT, assert_clean_exit, hashes, needs_privilege, prep_fails,
                      private_copies, run_cli, tree_hash)

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def base(scheduler, tmp_path_factory):
    """A small synth graph G, its 2-part assignment A and dispatch D (read-only for tests)."""
    from conftest import synth_partitioned

    return synth_partitioned(scheduler, tmp_path_factory.mktemp("faults-out"), "--nodes", 2000,
                             "--edges", 20000, "--seed", 3)


@pytest.fixture
def work(base, tmp_path):
    """Private copies of G, A and D."""
    return private_copies(base, tmp_path)


def no_leftovers(folder):
    """No ``.NAME.partial`` / ``.NAME.old`` / ``.NAME.lock`` beside anything in ``folder``."""
    left = [n for n in os.listdir(folder) if n.endswith((".partial", ".old", ".lock"))]
    assert not left, left


# --- OUT aliasing an input: exit 2 whatever --overwrite says, input bytes unchanged ----------

@pytest.mark.parametrize("args, culprit", [
    (("partition", "{G}", "{G}", "-p", 2, "--overwrite"), "is the input"),
    (("partition", "{G}", "{G}/sub", "-p", 2, "--overwrite"), "lies inside the input"),
    (("partition", "{G}", "{W}", "-p", 2, "--overwrite"), "contains the input"),
    (("dispatch", "{G}", "{A}", "{A}", "--overwrite"), "is the input"),
    (("dispatch", "{G}", "{A}", "{G}", "--overwrite"), "is the input"),
    (("dispatch", "{G}", "{A}", "{A}/parts", "--overwrite"), "lies inside the input"),
    (("chunk", "{G}/e.csv", "{G}", "--overwrite"), "contains the input"),
])
def test_out_aliasing_an_input_is_refused(scheduler, work, args, culprit):
    (work / "G" / "e.csv").write_text("0,1\n")
    before = hashes(work / "G", work / "A")
    fill = {"G": work / "G", "A": work / "A", "W": work}
    argv = [str(a).format(**fill) for a in args]
    prep_fails(scheduler, *argv, code=2, names=[culprit, "choose another path"])
    assert hashes(work / "G", work / "A") == before


def test_out_through_a_symlink_to_the_input_is_refused(scheduler, work):
    os.symlink(work / "G", work / "link")
    before = tree_hash(work / "G")
    prep_fails(scheduler, "partition", work / "G", work / "link", "-p", 2, "--overwrite",
               code=2, names=["is the input"])
    assert tree_hash(work / "G") == before


# --- a failed --overwrite leaves the previous output untouched --------------------------------

def corrupt_first_edge_chunk(graph_dir, value=-1):
    """Make row 3 of the first edge chunk point at node ``value``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = json.loads((graph_dir / "metadata.json").read_text())
    rel = next(iter(meta["edges"].values()))["data"][0]
    path = graph_dir / rel
    table = pq.read_table(path)
    dst = table.column("dst").to_numpy().copy()
    dst[3] = value
    pq.write_table(table.set_column(1, "dst", pa.array(dst)), path)
    return path


def test_failed_partition_overwrite_keeps_previous_output(scheduler, work):
    shutil.copytree(work / "G", work / "Gbad")
    corrupt_first_edge_chunk(work / "Gbad")
    before = hashes(work / "A", work / "Gbad")
    prep_fails(scheduler, "partition", work / "Gbad", work / "A", "-p", 2, "--method", "metis",
               "--overwrite", code=2, names=["part-", "dst"])
    assert hashes(work / "A", work / "Gbad") == before
    no_leftovers(work)


def test_failed_dispatch_overwrite_keeps_previous_output(scheduler, work):
    shutil.copytree(work / "G", work / "Gbad")
    corrupt_first_edge_chunk(work / "Gbad", value=10**6)
    before = hashes(work / "D", work / "Gbad")
    prep_fails(scheduler, "dispatch", work / "Gbad", work / "A", work / "D", "--overwrite",
               code=2, names=["part-", "dst"])
    assert hashes(work / "D", work / "Gbad") == before


def test_failed_chunk_overwrite_keeps_previous_output(scheduler, work, tmp_path):
    good = tmp_path / "e.csv"
    good.write_text("src,dst\n0,1\n1,2\n2,0\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("src,dst\n0,1\n1,x\n")
    out = tmp_path / "C"
    from conftest import run_prep
    run_prep(scheduler, "chunk", good, out)
    before = tree_hash(out)
    prep_fails(scheduler, "chunk", bad, out, "--overwrite", code=2, names=["bad.csv"])
    assert tree_hash(out) == before
    no_leftovers(tmp_path)


def test_different_command_on_existing_output_is_refused_without_overwrite(scheduler, work):
    before = tree_hash(work / "A")
    prep_fails(scheduler, "partition", work / "G", work / "A", "-p", 3, code=2,
               names=["--overwrite", str(work / "A")])
    assert tree_hash(work / "A") == before


def test_overwrite_that_succeeds_replaces_output_and_cleans_up(scheduler, work, prep):
    prep("dispatch", work / "G", work / "A", work / "D", "--machines", "m0,m1", "--overwrite",
         cluster=False)
    graph = json.loads((work / "D" / "graph.json").read_text())
    assert [p["machine"] for p in graph["parts"]] == ["m0", "m1"]
    assert not os.path.exists(work / "D" / "part-0")      # the old layout is gone
    assert not os.path.exists(work / "D" / ".work")
    no_leftovers(work)
    prep("verify", work / "G", work / "D")


def test_replacement_cut_between_its_renames_is_undone(work, scheduler, prep):
    """A kill between 'OUT -> .OUT.old' and '.OUT.partial -> OUT' loses nothing."""
    prep("partition", work / "G", work / "P", "-p", 2)
    before = tree_hash(work / "P")
    os.rename(work / "P", work / ".P.old")
    os.makedirs(work / ".P.partial")                          # the half-built new output
    prep("partition", work / "G", work / "P", "-p", 2)        # same command: up to date
    assert tree_hash(work / "P") == before
    no_leftovers(work)


# --- concurrent runs on one OUT ---------------------------------------------------------------

def test_second_writer_fails_at_once_naming_the_holder(scheduler, work):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom graphprep.formats.guard import OutputLock\n"
         "with OutputLock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(60)",
         str(work / "P")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        prep_fails(scheduler, "partition", work / "G", work / "P", "-p", 2, "--seed", 2,
                   code=2, names=["another run is writing", f"pid {holder.pid}", ".P.lock"])
        assert time.monotonic() - start < 10
        assert not os.path.exists(work / "P")
    finally:
        holder.kill()
        holder.wait()
    # The lock dies with its holder: the next run goes ahead.
    prep_fails(scheduler, "partition", work / "G", work / "P", "-p", 2, code=0)


def test_two_real_runs_never_mix_their_outputs(scheduler, work):
    """Two `prep partition` runs with seeds 1 and 2 on one OUT: whichever wrote OUT wrote all of
    it (assignment, metadata and manifest agree), and a loser exits 2 naming the holder."""
    procs = [subprocess.Popen([PREP, "partition", str(work / "G"), str(work / "P"), "-p", "2",
                               "--seed", str(seed), "--no-progress", "--scheduler", scheduler,
                               "--overwrite"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for code, err in results:
        assert code in (0, 2), err
        if code == 2:
            assert "another run is writing" in err and "Traceback" not in err
    manifest = json.loads((work / "P" / "manifest.json").read_text())
    meta = json.loads((work / "P" / "partition_meta.json").read_text())
    assert manifest["seed"] == meta["seed"]
    no_leftovers(work)


# --- kills --------------------------------------------------------------------------------------

def _kill_when(proc, path, timeout=60):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_killed_dispatch_resumes_to_a_verified_output(scheduler, work):
    shutil.rmtree(work / "D")
    args = [PREP, "dispatch", str(work / "G"), str(work / "A"), str(work / "D"),
            "--no-progress", "--scheduler", scheduler, "--range-size", "256"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_when(proc, work / ".D.partial" / ".work" / "edges")
    assert not os.path.exists(work / "D")                  # never half-visible
    # .work/edges appears once every relabel task has finished (each piece renamed into place):
    # the rerun reuses them all. Only they are counted: the session cluster's workers may still
    # finish shuffle tasks of the killed client.
    pieces = list((work / ".D.partial" / ".work" / "nodes").glob("*/r?????"))
    assert len(pieces) == 8, pieces                        # 2,000 nodes in ranges of 256
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"resumed the interrupted dispatch in \S+: \d+ of \d+ tasks were done "
                     r"already \(relabel 8 of 8, ", done.stderr), done.stderr   # without -v
    verify = run_cli("verify", work / "G", work / "D", "--no-progress", "--scheduler", scheduler)
    assert_clean_exit(verify, 0, ["verified"])
    no_leftovers(work)


def test_killed_overwrite_keeps_previous_output(scheduler, work):
    before = tree_hash(work / "D")
    args = [PREP, "dispatch", str(work / "G"), str(work / "A"), str(work / "D"), "--overwrite",
            "--machines", "m0,m1", "--no-progress", "--range-size", "256"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_when(proc, work / ".D.partial" / ".work")
    assert tree_hash(work / "D") == before
    # A different command later finds the previous output intact and the debris cleaned.
    prep_fails(scheduler, "verify", work / "G", work / "D", code=0)


def test_killed_partition_leaves_nothing_and_reruns(scheduler, work):
    args = [PREP, "partition", str(work / "G"), str(work / "P"), "-p", "2", "--method", "metis",
            "--no-progress"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_when(proc, work / ".P.partial")
    assert not os.path.exists(work / "P")
    assert_clean_exit(subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                                     timeout=120), 0)
    no_leftovers(work)


@pytest.fixture(scope="module")
def machines():
    """A cluster of two named workers with nannies (they restart a worker that dies)."""
    from distributed import Client

    from graphprep.pipeline.core.cluster import _named_cluster
    with _named_cluster(("m0", "m1"), "1GiB") as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        yield client


def _die_once(marker: str) -> int:
    """Task: the first run kills its own worker process; a rerun returns 7."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return 7


def test_task_pinned_to_a_restarted_worker_is_rerun_there(machines, tmp_path):
    from graphprep.pipeline.core.cluster import TaskRunner

    run = TaskRunner(machines, progress=False, lost_worker_timeout=60)
    before = machines.scheduler_info()["workers"]
    start = time.monotonic()
    assert run(_die_once, [str(tmp_path / "m")], "pinned", workers=["m1"]) == [7]
    assert time.monotonic() - start < 45
    assert set(machines.scheduler_info()["workers"]) != set(before)   # m1 came back anew


def test_lost_worker_that_never_returns_fails_naming_it(scheduler, tmp_path):
    """A worker without a nanny dies for good while its pinned task runs."""
    from distributed import Client

    from graphprep.pipeline.core.cluster import LostWorkerError, TaskRunner
    ghost = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "dask"), "worker",
                              scheduler, "--name", "ghost", "--no-nanny", "--nthreads", "1",
                              "--no-dashboard"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        with Client(scheduler) as client:
            client.wait_for_workers(3, timeout=60)
            run = TaskRunner(client, progress=False, lost_worker_timeout=3)
            start = time.monotonic()
            with pytest.raises(LostWorkerError, match="worker ghost .* did not come back "
                                                      "within 3 s"):
                run(_die_once, [str(tmp_path / "m")], "pinned", workers=["ghost"])
            assert time.monotonic() - start < 30
    finally:
        ghost.kill()
        ghost.wait()


def test_unpinned_task_of_a_dead_worker_is_rerun(scheduler, tmp_path):
    from distributed import Client

    from graphprep.pipeline.core.cluster import TaskRunner
    with Client(scheduler) as client:
        assert TaskRunner(client, progress=False)(_die_once, [str(tmp_path / "m")]) == [7]


def _fail_or_write_late(task: tuple[str, int]) -> int:
    """Task: item 0 fails at once; the others write a file into the folder 2 s later."""
    folder, i = task
    if i == 0:
        time.sleep(0.3)
        raise ValueError("first task fails")
    time.sleep(2)
    open(os.path.join(folder, f"late-{i}"), "w").close()
    return i


def test_failed_step_returns_only_after_its_running_tasks_ended(scheduler, tmp_path):
    """The caller removes the folder the tasks write into as soon as the runner raises: a
    cancelled task still running would write into it afterwards (a stray ``.OUT.partial``)."""
    from distributed import Client

    from graphprep.pipeline.core.cluster import TaskRunner
    with Client(scheduler) as client:
        with pytest.raises(ValueError, match="first task fails"):
            TaskRunner(client, progress=False)(_fail_or_write_late,
                                               [(str(tmp_path), i) for i in range(4)])
        settled = sorted(os.listdir(tmp_path))
        time.sleep(3)
        assert sorted(os.listdir(tmp_path)) == settled


# --- a full disk ----------------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path):
    if os.geteuid() != 0:
        needs_privilege("mounting a tmpfs needs root: the disk-full case runs only as root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)],
                           capture_output=True, text=True)
    if mount.returncode:
        needs_privilege(f"mount -t tmpfs failed ({mount.stderr.strip()}): no CAP_SYS_ADMIN")
    yield disk
    subprocess.run(["umount", "-l", str(disk)])


def test_full_disk_names_device_and_file_and_keeps_previous(scheduler, tiny_disk,
                                                           monkeypatch):
    from conftest import run_prep

    run_prep(scheduler, "synth", tiny_disk / "S", "--nodes", 100, "--edges", 300)
    before = tree_hash(tiny_disk / "S")
    # synth refuses what its arguments say cannot fit, before any work...
    prep_fails(scheduler, "synth", tiny_disk / "S", "--nodes", 20000, "--edges", 200000,
               "--overwrite", code=2, names=["on disk", "free at", "--nodes 20000"])
    assert tree_hash(tiny_disk / "S") == before
    # ...and a disk that fills while it writes (an estimate is an estimate) is named too
    monkeypatch.setattr("graphprep.pipeline.synth_job.check_fits", lambda *args, **kwargs: None)
    out = prep_fails(scheduler, "synth", tiny_disk / "S", "--nodes", 20000, "--edges", 200000,
                     "--overwrite", code=1, names=["no space left on tmpfs", str(tiny_disk),
                                                   "while writing", ".S.partial"])
    assert len(out.strip().splitlines()) == 1, out
    assert tree_hash(tiny_disk / "S") == before
    assert sorted(os.listdir(tiny_disk)) == ["S"]


# --- bad option values and paths -------------------------------------------------------------

@pytest.mark.parametrize("args, culprit", [
    (("partition", "{G}", "{o}", "-p", 0), "--num-parts"),
    (("partition", "{G}", "{o}", "-p", 2, "--imbalance", 5), "--imbalance"),
    (("partition", "{G}", "{o}", "-p", 2, "--method", "magic"), "--method"),
    (("partition", "{G}", "{o}", "-p", 2, "--method", "metis", "--balance", "x"), "--balance"),
    (("partition", "{G}", "{o}", "-p", 2, "--balance", "train"), "--balance"),
    (("partition", "{G}", "{o}"), "--num-parts"),
    (("dispatch", "{G}", "{A}", "{o}", "--range-size", 0), "--range-size"),
    (("synth", "{o}", "--split", "0.5,0.5"), "--split"),
    (("chunk", "{G}/nope.csv", "{o}"), "nope.csv"),
    (("synth", "{o}", "--lost-worker-timeout", 0), "--lost-worker-timeout"),
])
def test_bad_option_values_exit_2_naming_the_option(scheduler, work, args, culprit):
    argv = [str(a).format(G=work / "G", A=work / "A", o=work / "o") for a in args]
    prep_fails(scheduler, *argv, code=2, names=[culprit])
    assert not os.path.exists(work / "o")


def test_unknown_machines_on_an_external_cluster(scheduler, work):
    prep_fails(scheduler, "dispatch", work / "G", work / "A", work / "o", "--machines", "x9",
               code=2, names=["no workers named ['x9']", "--machines"])


def test_relative_paths_with_an_external_scheduler(scheduler, work):
    """Workers do not share the client's working directory: paths are made absolute."""
    def prep_in(*args):
        return subprocess.run([PREP, *map(str, args), "--no-progress", "--scheduler", scheduler],
                              cwd=work, capture_output=True, text=True, timeout=120)
    assert_clean_exit(prep_in("partition", "G", "P", "-p", 2), 0)
    assert_clean_exit(prep_in("dispatch", "G", "P", "Q"), 0)
    assert_clean_exit(prep_in("verify", "G", "Q"), 0, ["verified"])


def test_unexpected_failure_is_one_line_and_v_shows_the_traceback(scheduler, work):
    """An environment fault (an OUT name the file system refuses: ENAMETOOLONG) ends in one
    line, exit 1. (OUT under a regular file is bad input now: refused up front, exit 2.)"""
    out = work / ("S" * 300)
    text = prep_fails(scheduler, "synth", out, code=1,
                      names=["File name too long", "-v shows the traceback"])
    assert len(text.strip().splitlines()) == 1, text
    from click.testing import CliRunner

    from graphprep.pipeline.cli import prep as cli
    verbose = CliRunner().invoke(cli, ["synth", str(out), "-v"])
    assert verbose.exit_code == 1 and "Traceback" in verbose.output, verbose.output


def _memory_tree(root: str) -> dict[str, bytes]:
    import fsspec
    fs = fsspec.filesystem("memory")
    return {p: fs.cat(p) for p in fs.find(root)}


def test_url_output_is_replaced_by_versions_never_mixed(scheduler, work, prep):
    url = f"memory://faults-{os.getpid()}-{time.monotonic_ns()}/d"
    root = url.split("://")[1]
    prep("dispatch", work / "G", work / "A", url)
    first = _memory_tree("/" + root)
    prep_fails(scheduler, "dispatch", work / "G", work / "A", url, code=0)      # up to date
    assert _memory_tree("/" + root) == first
    prep_fails(scheduler, "partition", work / "G", work / "A3", "-p", 3, code=0)
    prep_fails(scheduler, "dispatch", work / "G", work / "A3", url, code=2,
               names=["another dispatch", "--overwrite"])
    shutil.copytree(work / "G", work / "Gbad")
    corrupt_first_edge_chunk(work / "Gbad", value=10**6)
    prep_fails(scheduler, "dispatch", work / "Gbad", work / "A", url, "--overwrite", code=2,
               names=["part-"])
    assert _memory_tree("/" + root) == first                  # a failed overwrite: untouched
    prep("dispatch", work / "G", work / "A3", url, "--overwrite")
    after = _memory_tree("/" + root)
    graph = json.loads(after[f"/{root}/graph.json"])
    version = graph["parts"][0]["path"].split("/")[0]
    assert graph["num_parts"] == 3
    assert all(p.startswith((f"/{root}/{version}/", f"/{root}/graph.json",
                             f"/{root}/manifest.json")) for p in after), sorted(after)[:5]
