"""The benchmarks and the demo run here, so that they cannot rot unnoticed (issue 29, item 10).

Each ``examples/benchmarks/bench_*.py`` runs as a user runs it (``python bench_X.py``), with
``--quick``: tiny sizes, the same steps and JSON keys as the default run. Each test parses the
one JSON object the benchmark prints and checks its keys and that its figures are sane (counts
match the quick size, times and rates positive, ratios finite, cuts in [0, 1]); never a speed.
``examples/demo.sh`` runs with ``DEMO_QUICK=1`` (the same steps, smaller) and must end with test
accuracies and an AUC above chance.

The runs are subprocesses that mostly start processes (Dask workers, trainer ranks) and wait,
so the module starts all those its selected tests need at once, ``PARALLEL`` at a time (the
longest first), and each test waits for its own: the module's wall time is about half the sum.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

# Each test waits for its run in a shared pool (159 s seen under load): bounded per run below.
pytestmark = pytest.mark.timeout(600)

from conftest import ROOT  # noqa: E402  (the repository)
BENCHMARKS = os.path.join(ROOT, "examples", "benchmarks")
TIMEOUT_S = 400     # a quick run takes seconds to a minute or two; this only bounds a hang
PARALLEL = min(4, max(2, (os.cpu_count() or 2) // 2))

# Each run's options besides --quick ({work}: its own scratch folder, also its working
# directory), longest first (measured) so that the pool ends about together.
RUNS = {
    "demo": [],
    "link": ["--workdir", "{work}/w"],
    "models": ["--workdir", "{work}/w"],
    "train": ["--workdir", "{work}/w"],
    "embeddings": ["--workdir", "{work}/w"],
    "partition_families": [],
    "partition": [],
    "pipeline": [],
    "sampling": ["--workdir", "{work}/w"],
    "edge_feat": ["--workdir", "{work}/w"],
    "chunk": ["--out", "{work}/w"],
    "keys": [],
    "sparse": ["--workdir", "{work}/w"],
    "load_checks": ["--workdir", "{work}/w"],
    "dgl_input": ["--out", "{work}/w"],
    "dgl_partition": ["--workdir", "{work}/w"],
    "read_checks": ["--workdir", "{work}/w"],
    "synth_rmat": [],
    "model_parity": ["--workdir", "{work}/w"],
    # one graph family: the planted graph's recipe is train's, and each row costs a training run
    "train_curve": ["--scale-curve", "--graphs", "rmat", "--epochs", "1", "--remote-store",
                    "--remote-store-fill", "--workdir", "{work}/w"],
    "train_curve_link": ["--scale-curve", "--task", "link", "--graphs", "rmat", "--epochs", "1",
                         "--max-batches", "2", "--workdir", "{work}/w"],
    "moonshot": ["--workdir", "{work}/w"],
    "pyg_loader": ["--workdir", "{work}/w"],
    "dispatch": ["--workdir", "{work}/w"],
    "numpy_sort": [],
}
# runs of a script under another name: the script's second mode
SCRIPTS = {"train_curve": "train", "train_curve_link": "train"}


def command(name: str, work: str) -> tuple[list[str], dict]:
    """The command line and environment of one run, as a user types it."""
    if name == "demo":
        prep = os.path.join(os.path.dirname(sys.executable), "prep")
        # the demo's own defaults are the project's .venv; here, this interpreter's install
        env = {**os.environ, "DEMO_QUICK": "1", "PREP": prep, "PYTHON": sys.executable}
        return ["bash", os.path.join(ROOT, "examples", "demo.sh"), f"{work}/demo-out"], env
    script = os.path.join(BENCHMARKS, f"bench_{SCRIPTS.get(name, name)}.py")
    return ([sys.executable, script, "--quick", *(a.format(work=work) for a in RUNS[name])],
            dict(os.environ))


def kill_group(p: subprocess.Popen) -> None:
    """SIGKILL ``p``'s process group (its own session): ``p`` and every process it started."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:      # already gone
        pass


class QuickRuns:
    """The runs this module's selected tests need, started together in a pool."""

    def __init__(self, names: list[str], root):
        self.work = {name: root / name for name in names}
        self.running: dict[str, subprocess.Popen] = {}
        self.pool = ThreadPoolExecutor(PARALLEL)
        self.futures = {name: self.pool.submit(self._run, name) for name in names}

    def _run(self, name: str):
        self.work[name].mkdir()
        cmd, env = command(name, str(self.work[name]))
        start = time.monotonic()
        # its own session: a hung run is killed with every process it started (workers, ranks)
        with subprocess.Popen(cmd, cwd=self.work[name], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True) as p:
            self.running[name] = p
            try:
                out, err = p.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                kill_group(p)
                out, err = p.communicate()
                err += f"\n[killed: still running after {TIMEOUT_S} s]"
        proc = subprocess.CompletedProcess(cmd, p.returncode, out, err)
        return proc, time.monotonic() - start

    def close(self) -> None:
        """Drop the runs not started; kill those still running (the session ends early)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        for p in self.running.values():
            kill_group(p)
        self.pool.shutdown(wait=True)

    def result(self, name: str) -> subprocess.CompletedProcess:
        """Wait for run ``name``; its exit status must be 0."""
        proc, _ = self.futures[name].result()
        assert proc.returncode == 0, (f"{name} --quick exited {proc.returncode}:\n"
                                      f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        return proc

    def json(self, name: str) -> dict:
        """Run ``name``'s stdout, which must be exactly one JSON object."""
        proc = self.result(name)
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError as err:
            raise AssertionError(f"bench_{name}.py --quick did not print one JSON object "
                                 f"({err}):\n{proc.stdout[-2000:]}") from None


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """Starts, at the module's first test, the runs of all its selected tests."""
    here = request.module.__file__
    selected = {item.originalname for item in request.session.items if str(item.path) == here}
    names = [name for name in RUNS if f"test_bench_{name}" in selected
             or (name == "demo" and "test_quick_demo" in selected)]
    if importlib.util.find_spec("pandas") is None:       # its test skips, naming pandas
        names = [n for n in names if n != "dgl_input"]
    quick = QuickRuns(names, tmp_path_factory.mktemp("quick"))
    yield quick
    quick.close()


def positive(x) -> bool:
    """A finite number > 0 (a rate, a size, a ratio of two positive figures)."""
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def seconds(x) -> bool:
    """A finite time >= 0: quick runs round some of their times down to 0.0."""
    return isinstance(x, (int, float)) and math.isfinite(x) and x >= 0


def fraction(x) -> bool:
    """A number in [0, 1] (a cut ratio, an accuracy, an AUC)."""
    return isinstance(x, (int, float)) and 0 <= x <= 1


def rss_per_worker(x, workers: int = 2) -> bool:
    """One positive memory figure (MB) per worker of the benchmark's 2-worker cluster."""
    return isinstance(x, list) and len(x) == workers and all(positive(v) for v in x)


def test_every_benchmark_has_a_quick_test():
    """A benchmark added without its quick run here would rot unseen."""
    scripts = {f[len("bench_"):-len(".py")] for f in os.listdir(BENCHMARKS)
               if f.startswith("bench_") and f.endswith(".py")}
    tested = {name[len("test_bench_"):] for name in globals() if name.startswith("test_bench_")}
    assert tested == set(RUNS) - {"demo"}
    assert scripts == {SCRIPTS.get(name, name) for name in tested}


def test_bench_chunk(runs):
    r = runs.json("chunk")
    assert set(r) == {"machine", "cluster_start_s", "idle_cluster", "task_set_overhead_ms",
                      "synth", "csv_to_chunked", "synth_scaling"}
    assert set(r["task_set_overhead_ms"]) == {"task_0_ms", "task_30_ms", "task_150_ms"}
    for each in r["task_set_overhead_ms"].values():
        # the tasks' own time taken off (they hold their thread that long): what is left
        assert set(each) == {"graphprep", "dask_map_gather"} and all(
            seconds(v) for v in each.values()), each
    assert positive(r["cluster_start_s"])
    idle = r["idle_cluster"]
    assert idle["window_s"] == 3.0
    assert positive(idle["graphprep_cpu_s_per_min"])
    assert positive(idle["dask_defaults_cpu_s_per_min"])
    assert positive(idle["ratio"])
    for run, edges in ((r["synth"], 10**4), (r["synth_scaling"]["small"], 10**4),
                       (r["synth_scaling"]["large"], 10**5)):
        assert run["edges"] == edges and run["nodes"] == edges // 10, run
        assert seconds(run["seconds"]) and positive(run["edges_per_s"]), run
        assert rss_per_worker(run["worker_peak_rss_mb"]), run
    assert positive(r["synth_scaling"]["rss_growth"])
    csv = r["csv_to_chunked"]
    assert csv["edges"] == 10**4
    assert csv["baseline_read_csv_write_table"]["rows"] == 10**4     # the whole CSV was written
    assert positive(csv["baseline_read_csv_write_table"]["peak_rss_mb"])
    for ours in (csv["graphprep"], csv["graphprep_chunk_size_2^18"]):
        assert seconds(ours["seconds"]) and rss_per_worker(ours["worker_peak_rss_mb"])
        assert rss_per_worker(ours["worker_idle_rss_mb"])
    for key in ("time_ratio", "peak_rss_ratio", "peak_rss_above_idle_ratio"):
        assert math.isfinite(csv[key]), key
    assert positive(csv["peak_rss_ratio"]) and positive(csv["time_ratio"])
    assert positive(csv["graphprep_chunk_size_2^18"]["peak_rss_ratio"])


def test_bench_keys(runs):
    r = runs.json("keys")
    (run,) = r["runs"]
    assert run["edges"] == 10**4 and run["nodes"] == 10**3, run
    ours, pandas = run["prep_chunk"], run["pandas_factorize"]
    assert seconds(ours["seconds"]) and rss_per_worker(ours["worker_peak_rss_mb"]), ours
    assert positive(pandas["peak_rss_mb"]) and pandas["seconds"] >= 0, pandas
    assert math.isfinite(run["speedup_vs_pandas"])
    assert os.listdir(runs.work["keys"]) == []       # its scratch folder in the cwd is removed


def test_bench_sparse(runs):
    r = runs.json("sparse")
    assert (r["graph"], r["nodes"], r["width"]) == ("synthetic", 2000, 500), r
    for name in ("sparse", "dense"):
        run = r[name]
        assert seconds(run["epoch_s"][0]) and positive(run["rpc_mb_per_epoch"][0]), run
        assert 0.5 < run["test_auc"] <= 1, run          # link prediction above chance
    assert r["dense_over_sparse"]["parts_bytes"] > 1     # multi-hot rows are smaller as CSR
    assert all(math.isfinite(v) for v in r["dense_over_sparse"].values())


def test_bench_partition(runs):
    r = runs.json("partition")
    edges = 10**5
    assert r["graph"] == {"generator": "planted", "nodes": edges // 10, "edges": edges}
    assert set(r["runs"]) == {"2"}
    row = r["runs"]["2"]
    assert set(row) == {"random", "metis", "multilevel", "multilevel_forced", "direct_pymetis",
                        "metis_overhead_time", "metis_overhead_peak_rss", "prep_kaminpar",
                        "direct_kaminpar"}
    for method in ("random", "metis", "multilevel", "multilevel_forced", "prep_kaminpar"):
        run = row[method]
        assert seconds(run["seconds"]), method
        assert rss_per_worker(run["worker_peak_rss_mb"]), method
        assert rss_per_worker(run["worker_peak_anon_mb"]), method
        assert rss_per_worker(run["worker_peak_file_backed_mb"]), method
        assert fraction(run["cut_ratio"]) and run["edge_cut"] == round(run["cut_ratio"] * edges)
        assert 1 <= run["imbalance_nodes"] < 1.1, (method, run["imbalance_nodes"])
    # The synth graph has planted communities: METIS cuts far fewer edges than random.
    assert row["metis"]["edge_cut"] < 0.5 * row["random"]["edge_cut"]
    for method, budget in (("multilevel", None), ("multilevel_forced", 10_000)):
        run = row[method]
        # coarsening really happened, down to the budget: the multilevel path, not METIS alone
        assert len(run["levels"]) >= 2 and run["levels"][0]["nodes"] == edges // 10, run
        assert run["levels"][-1]["edges"] <= run["coarse_edge_budget"] < edges, run
        assert budget is None or run["coarse_edge_budget"] == budget
        assert 0 < run["cut_vs_metis"] < 2, run
        for key in ("time_vs_metis", "peak_rss_vs_metis", "peak_anon_vs_metis"):
            assert positive(run[key]), key
    assert positive(row["direct_pymetis"]["metis_edge_cut"])
    assert positive(row["direct_pymetis"]["peak_rss_mb"])
    assert positive(row["metis_overhead_time"]) and positive(row["metis_overhead_peak_rss"])
    # KaMinPar (the test extra installs it): --method kaminpar rebalanced within --imbalance,
    # and the one-process peer on one combined weight, its cut counted over the input edges
    kmp, peer = row["prep_kaminpar"], row["direct_kaminpar"]
    assert max(kmp["imbalance_edges"], kmp["imbalance_train"]) <= 1.03 + 1e-9, kmp
    assert kmp["edge_cut"] < 0.5 * row["random"]["edge_cut"]       # planted communities
    assert positive(kmp["kaminpar_edge_cut"])
    assert kmp["kaminpar_blocks"] >= 2 and kmp["kaminpar_runs"] >= 1
    for key in ("cut_vs_metis", "time_vs_metis", "peak_rss_vs_metis", "peak_anon_vs_metis"):
        assert positive(kmp[key]), key
    assert peer["threads"] == 2 and positive(peer["peak_rss_mb"])
    for key in ("seconds", "seconds_without_csr_build", "seconds_csr_build",
                "seconds_parhip_write", "seconds_kaminpar"):
        assert seconds(peer[key]), key
    assert peer["seconds_without_csr_build"] <= peer["seconds"]
    assert fraction(peer["cut_ratio"]) and peer["edge_cut"] == round(peer["cut_ratio"] * edges)
    assert peer["edge_cut"] < 0.5 * row["random"]["edge_cut"]
    assert positive(peer["kaminpar_edge_cut"])
    assert 1 <= peer["imbalance_nodes"] < 1.5 and 1 <= peer["imbalance_edges"] < 1.5, peer


def test_bench_partition_families(runs):
    r = runs.json("partition_families")
    fams = r["families"]
    assert set(fams) == {"random_geometric", "grid", "chung_lu", "block_model", "synth",
                         "cora", "citeseer"}
    assert fams["synth"]["edges"] == 20_000                 # --scale 0.02 of 10^6
    assert fams["cora"]["coarse_edges"] == fams["citeseer"]["coarse_edges"] == 1000
    for name, fam in fams.items():
        assert fam["coarse_edges"] < fam["edges"], name     # coarsening forced
        for k in ("2", "4", "8"):
            run = fam[k]
            assert positive(run["cut"]) and positive(run["metis_cut"]), (name, k, run)
            assert run["ratio"] == pytest.approx(run["cut"] / run["metis_cut"], abs=1e-4)
            assert 0 < run["ratio"] < 2, (name, k, run)       # finite; not a broken partition
            assert seconds(run["multilevel_s"])
    synthetic = [fams[n][k]["ratio"] for n in fams if n not in ("cora", "citeseer")
                 for k in ("2", "4", "8")]
    assert r["max_ge_1e5_edges"] == max(synthetic)
    assert r["geomean_ge_1e5_edges"] == pytest.approx(
        math.exp(sum(map(math.log, synthetic)) / len(synthetic)), abs=1e-4)
    assert r["coarsen_rounds"] >= 1


def test_bench_pipeline(runs):
    r = runs.json("pipeline")
    assert set(r) == {"small"}
    run = r["small"]
    assert (run["edges"], run["nodes"], run["parts"], run["method"]) == (10**4, 10**3, 4,
                                                                         "random")
    for step in ("synth", "partition_random", "dispatch", "verify"):
        assert seconds(run[step]["seconds"]) and positive(run[step]["edges_per_s"]), step
        for key in ("worker_peak_rss_mb", "worker_peak_anon_mb", "worker_peak_file_backed_mb"):
            assert rss_per_worker(run[step][key]), (step, key)
        assert run[step]["peak_disk_written_mb"] >= 0
    assert fraction(run["partition_random"]["cut_ratio"])
    assert run["partition_random"]["edge_cut"] == round(run["partition_random"]["cut_ratio"]
                                                        * 10**4)
    assert positive(run["total_s"]) and positive(run["max_worker_peak_rss_mb"])
    assert run["output_mb"] >= 0 and run["synth"]["disk_mb"] >= 0
    assert seconds(run["in_memory_route"]["seconds"])
    assert positive(run["in_memory_route"]["peak_rss_mb"])
    assert positive(run["dispatch_throughput_vs_in_memory"])
    assert positive(run["peak_rss_vs_in_memory"])
    assert os.listdir(runs.work["pipeline"]) == []   # its scratch folder in the cwd is removed


def test_bench_read_checks(runs):
    r = runs.json("read_checks")
    assert r["edges"] == 10**4
    assert os.path.exists(r["dispatched"])
    assert json.load(open(r["dispatched"]))["num_parts"] == 4
    for key in ("relabel_s", "shuffle_s"):
        assert set(r[key]) == {"checked", "unchecked"} and all(map(seconds, r[key].values()))
    assert math.isfinite(r["added_pct"])
    assert set(r["inside_checks_s"]) == {"check_ids", "check_finite"}
    assert all(map(seconds, r["inside_checks_s"].values()))
    assert positive(r["tasks_s"])
    # the timed check functions were really called by the tasks (else 0)
    assert 0 < r["checks_pct_of_tasks"] <= 100


def test_bench_load_checks(runs):
    r = runs.json("load_checks")
    assert r["graph"] == {"edges": 10**4, "nodes": 10**3, "parts": 2, "feat_dim": 32}
    assert set(r["per_part_warm"]) == {"0", "1"}
    for part in r["per_part_warm"].values():
        assert positive(part["part_mb"])
        for key in ("plain_load_s", "layout_s", "structure_s", "sampled_hashes_s",
                    "full_hashes_s", "default_check_s", "verify_data_check_s"):
            assert seconds(part[key]), key
        assert positive(part["structure_mb_per_s"]) and positive(part["full_hash_mb_per_s"])
    # --quick must not empty the page cache of the machine the suite runs on
    assert r["cold_page_cache_part0"] == "not measured: --no-cold"
    summary = r["summary"]
    assert all(seconds(v) for v in summary.values())
    slowest = max(r["per_part_warm"].values(), key=lambda p: p["verify_data_check_s"])
    assert summary["default_check_s"] == slowest["default_check_s"]


def test_bench_sampling(runs):
    r = runs.json("sampling")
    assert (r["edges"], r["fanouts"], r["batch_size"], r["device"]) == (10**4, [15, 10, 5], 64,
                                                                          "cpu")
    most = 64 * (15 + 15 * 10 + 15 * 10 * 5)           # every seed's every hop at full fanout
    for key in ("graphprep_1_part", "graphprep_2_parts"):
        run = r[key]
        assert positive(run["edges_per_s"]) and positive(run["batches_per_s"]), key
        assert 0 < run["edges_per_batch"] <= most, (key, run)
    assert "remote_requests_per_batch" not in r["graphprep_1_part"]    # nothing is remote
    assert positive(r["graphprep_2_parts"]["remote_requests_per_batch"])
    assert r["per_seed_loop"]["batches"] == 1 and positive(r["per_seed_loop"]["edges_per_s"])
    assert positive(r["speedup_vs_per_seed_loop"])
    # PyG and DGL run where they import, else the reason is reported
    for name in ("pyg", "dgl"):
        assert "edges_per_s" in r[name] or r[name]["error"], r[name]
        if "edges_per_s" in r[name]:
            assert positive(r[name]["edges_per_s"]) and positive(r[f"ratio_vs_{name}"])
    if importlib.util.find_spec("dgl") is not None:     # the test extra installs it
        assert "edges_per_s" in r["dgl"], r["dgl"]


def test_bench_edge_feat(runs):
    r = runs.json("edge_feat")
    assert (r["edges"], r["edge_dim"], r["fanouts"], r["batch_size"]) == (2 * 10**4, 16, [10, 5],
                                                                         64)
    s = r["sampler"]
    for name in ("with", "without"):
        assert positive(s[name]["edges_per_s"]) and s[name]["edges_per_batch"] > 0, s
    assert s["with"]["edges_per_batch"] == s["without"]["edges_per_batch"]   # the same sample
    assert s["with"]["rpc_requests_per_batch"] == s["without"]["rpc_requests_per_batch"] > 0
    assert s["with"]["rpc_bytes_sent_per_batch"] == s["without"]["rpc_bytes_sent_per_batch"]
    assert s["extra_bytes_received_per_remote_edge"] == 16 * 4                # float32 rows
    t = r["trainer"]
    assert t["same_requests"] and len(t["with"]["rpc_requests_per_epoch"]) == 2
    assert all(a > b for a, b in zip(t["with"]["rpc_bytes_received_per_epoch"],
                                     t["without"]["rpc_bytes_received_per_epoch"]))
    assert positive(t["bytes_received_ratio"]) and seconds(t["with"]["epoch_s"])


def test_bench_train(runs):
    r = runs.json("train")
    assert (r["edges"], r["fanouts"], r["batch_size"]) == (2 * 10**4, "5,5", 64)
    runs = [r["1_part_1_rank"], r["2_parts_2_ranks"], r["2_parts_2_ranks_no_halo_cache"]]
    for run in runs:
        assert positive(run["epoch_s"]) and positive(run["train_s"]), run
        assert fraction(run["test_acc"]) and fraction(run["val_acc"])
        assert positive(run["peak_rss_mb_max_rank"]) and positive(run["train_seeds_per_s"])
        assert run["batches_per_epoch"] >= 1
        assert {"sample_local", "sample_remote", "feature_fetch", "forward_backward",
                "allreduce"} <= set(run["time_per_rank_s"])
    # the same graph on 1 and 2 parts: the same training nodes (5% of 2000, by random masks)
    assert 0 < runs[0]["train_nodes"] == runs[1]["train_nodes"] == runs[2]["train_nodes"] <= 200
    assert runs[0]["rpc_requests_per_epoch"] == 0 and runs[0]["rpc_mb_per_epoch"] == 0
    assert runs[1]["rpc_requests_per_epoch"] > 0 and runs[2]["rpc_requests_per_epoch"] > 0
    assert positive(r["epoch_time_ratio_2_over_1"])


def test_bench_train_curve(runs):
    r = runs.json("train_curve")
    assert (r["fanouts"], r["batch_size"], r["parts"]) == ("5,5", 64, 2)
    assert r["remote_store"] and r["remote_store_fill"] and "planted" not in r
    for graph in ("rmat",):
        rows = r[graph]["rows"]
        assert set(rows) == {"20000", "40000"}, rows
        for row in rows.values():
            assert positive(row["launch_to_first_batch_s"]) and row["train_seeds"] > 0
            assert positive(row["epoch_s_per_1e5_seeds"]), row
            # fanouts 5,5: at most 5 + 25 sampled edges per seed, and some on these graphs
            assert 0 < row["sampled_edges_per_seed"] <= 30, row
            assert positive(row["rpc_bytes_per_seed"]), row     # random 2 parts: remote rows
            assert fraction(row["halo_cache_hit_rate"]) and row["halo_cache_hit_rate"] > 0
            assert isinstance(row["remote_store_hits"], int) and row["remote_store_hits"] >= 0
            assert rss_per_worker(row["rank_peak_anon_mb"]), row
            assert fraction(row["test_acc"]) and fraction(row["majority_class_rate"])
            assert row["majority_class_rate"] > 0
        assert all(positive(v) for v in r[graph]["largest_vs_previous"].values())


def test_bench_train_curve_link(runs):
    r = runs.json("train_curve_link")
    assert (r["task"], r["max_batches"], r["batch_size"]) == ("link", 2, 64)
    rows = r["rmat"]["rows"]
    assert set(rows) == {"20000", "40000"}, rows
    for row in rows.values():
        # 2 ranks x at most 2 batches of 64 positives
        assert 0 < row["train_edges"] <= 2 * 2 * 64, row
        assert positive(row["launch_to_first_batch_s"]) and positive(row["epoch_s_per_1e5_edges"])
        assert row["sampled_edges_per_edge"] > 0 and positive(row["rpc_bytes_per_edge"]), row
        assert rss_per_worker(row["rank_peak_anon_mb"]), row
        assert fraction(row["test_auc"]) and fraction(row["test_mrr"]), row
    assert set(r["rmat"]["largest_vs_previous"]) == {"time_per_unit", "rpc_bytes_per_unit",
                                                     "rank_peak_anon"}


def test_bench_moonshot(runs):
    r = runs.json("moonshot")
    prep, train = r["prep"], r["train"]
    assert (prep["scale"], prep["edges"], prep["parts"]) == (12, 16 * 2**12, 2)
    for name in ("synth", "partition", "dispatch", "verify"):
        assert positive(prep[name]["seconds"])
        assert rss_per_worker(prep[name]["worker_peak_anon_mb"])
    assert positive(prep["prep_s"]) and prep["parts_mb"] >= 0
    assert positive(train["launch_to_first_batch_s"]) and train["train_seeds"] > 0
    assert rss_per_worker(train["train_rank_peak_anon_mb"])
    assert rss_per_worker(train["embed_rank_peak_anon_mb"])
    assert fraction(train["test_acc"]) and fraction(train["majority_class_rate"])
    assert train["embed_inference"] == "layer-wise" and positive(train["embed_wall_s"])
    n = 2**12                                 # every node once, by original ID
    files = train["embed_files"]
    assert {name: f["shape"][0] for name, f in files.items()} == {
        "_N/embeddings.npy": n, "_N/logits.npy": n, "_N/predictions.npy": n}
    assert all(f["rows_all_zero"] == 0 and f["rows_not_finite"] == 0 for f in files.values())


def test_bench_pyg_loader(runs):
    r = runs.json("pyg_loader")
    assert (r["fanouts"], r["batch_size"], r["batches"]) == ("10,5", 64, 3)
    row = r["20000"]
    ours = row["graphprep"]
    assert positive(ours["batches_per_s"]) and 0 < ours["edges_per_batch"] <= 64 * (10 + 50)
    assert set(ours["ms_per_batch"]) == {"sample", "layers", "input_rows", "labels"}
    assert all(positive(v) for v in ours["ms_per_batch"].values()), ours
    pyg = row["pyg"]
    if "error" in pyg:           # no sampling backend in this venv: PyG's own error, named
        assert "torch-sparse" in pyg["error"] or "pyg-lib" in pyg["error"], pyg
    else:
        assert positive(pyg["batches_per_s"]) and positive(row["batches_per_s_ratio"])


def test_bench_dispatch(runs):
    r = runs.json("dispatch")
    assert (r["parts"], r["method"], r["workers"]) == (2, "multilevel", 2)
    assert set(r["rows"]) == {"10", "11"}
    for scale, row in r["rows"].items():
        assert row["edges"] == 16 * 2 ** int(scale)
        now = row["now"]
        assert positive(now["seconds"]) and positive(now["edges_per_s"])
        assert rss_per_worker(now["worker_peak_anon_mb"]), now
        assert len(now["worker_peak_rss_mb"]) == 2
    assert positive(r["largest_vs_previous_anon"]["now"])


def test_bench_model_parity(runs):
    r = runs.json("model_parity")
    assert (r["edges"], r["epochs"], r["repeats"], r["dropout"]) == (2 * 10**4, 2, 1, 0.0)
    assert r["baseline_commit"] == "dc4bc56"
    for name in ("baseline", "now"):
        assert positive(r[name]["epoch_s"]) and fraction(r[name]["test_acc"]), r
    assert positive(r["epoch_time_ratio_now_over_baseline"])
    # --model sage is today's GraphSAGE: the same seed gives the same losses and accuracies
    assert r["identical_losses_and_accuracies"] is True, r


def test_bench_models(runs):
    r = runs.json("models")
    assert (r["model"], r["epochs"], r["parts"], r["ranks"]) == ("gat", 2, 2, 2)
    assert set(r["accuracy"]) == {"cora", "citeseer"}
    for name, published in (("cora", 0.830), ("citeseer", 0.725)):
        acc = r["accuracy"][name]
        assert acc["published_test_acc"] == published
        for features in ("raw", "row_normalised"):
            run = acc[features]
            assert run["seeds"] == [0] and len(run["test_acc"]) == 1
            assert all(map(fraction, run["test_acc"])) and fraction(run["test_acc_mean"])
            assert run["test_acc_min"] <= run["test_acc_mean"] <= run["test_acc_max"]
            assert run["mean_minus_published"] == pytest.approx(
                run["test_acc_mean"] - published, abs=1e-4)
            assert positive(run["mean_epoch_s"])
    timing = r["timing"]
    assert timing["device"] == "cpu" and timing["torch_threads"] >= 1
    drop = timing["dropout"]
    assert drop["shape"] == [2708, 1433] and drop["p"] == 0.5, drop
    assert positive(drop["ours_ms"]) and positive(drop["torch_ms"]), drop
    assert positive(drop["ratio_ours_over_torch"]), drop
    for name in ("cora", "citeseer", "synth"):
        t = timing[name]
        assert t["batches"] >= 1 and positive(t["edges_per_epoch"]), t
        assert positive(t["ours_epoch_s"]) and positive(t["pyg_gatconv_epoch_s"])
        assert t["ratio_ours_over_pyg"] == pytest.approx(
            t["ours_epoch_s"] / t["pyg_gatconv_epoch_s"], rel=0.01)
        assert positive(t["ours_epoch_cpu_s"]) and positive(t["pyg_gatconv_epoch_cpu_s"])
        assert positive(t["cpu_ratio_ours_over_pyg"])
        # the same weights on the same batches: the two models compute the same outputs
        assert t["eval_max_abs_diff"] < 1e-4, t
    assert timing["cora"]["batches"] == 1 and timing["cora"]["fanouts"] == [-1, -1]
    assert timing["synth"]["edges"] == 2 * 10**4


def ranking_ok(metrics: dict, prefix: str) -> None:
    """AUC and MRR in [0, 1], Hits@k in [0, 1] and growing with k."""
    assert fraction(metrics[f"{prefix}_auc"]) and 0 < metrics[f"{prefix}_mrr"] <= 1, metrics
    hits = [metrics[f"{prefix}_hits@{k}"] for k in (20, 50, 100)]
    assert all(map(fraction, hits)) and hits == sorted(hits), metrics


def test_bench_embeddings(runs):
    r = runs.json("embeddings")
    assert (r["nodes"], r["edges"], r["epochs"], r["parts"]) == (6000, 40_000, 2, 2)
    runs = r["rgcn"]
    for mode in ("embed", "constant"):
        run = runs[mode]
        assert positive(run["epoch_s"]) and positive(run["train_s"]), run
        assert fraction(run["test_acc"]) and len(run["test_acc_by_epoch"]) == 2
        assert run["batches_per_epoch"] >= 1 and positive(run["rpc_mb_per_epoch"])
    embed = runs["embed"]
    assert seconds(embed["embedding_pull_s_per_rank"])
    assert seconds(embed["embedding_push_s_per_rank"])
    assert embed["embedding_rows_per_epoch"] > 0 and positive(embed["embedding_push_mb_per_epoch"])
    assert "embedding_rows_per_epoch" not in runs["constant"]
    assert positive(runs["embed_over_constant"]["epoch_time_ratio"])


def test_bench_link(runs):
    r = runs.json("link")
    assert set(r) == {"scorer", "fanouts", "batch_size", "lr", "hidden", "dropout",
                      "ref_batch_size", "cores", "synth-10000-h0.95"}
    run = r["synth-10000-h0.95"]
    assert run["epochs"] == 1
    dist, ref = run["distributed_2_parts"], run["single_process_reference"]
    assert dist["epochs"] == 1 and positive(dist["seconds"]) and positive(ref["seconds"])
    for prefix in ("val", "test"):
        ranking_ok(dist, prefix)
        ranking_ok(ref, prefix)
    full = dist["embed_full_neighbor"]
    ranking_ok(full, "test")
    # trainer embed's exact inference of the same checkpoint scores like the trainer's
    # sampled evaluation (same held-out edges, same negatives' distribution)
    assert abs(full["test_auc"] - dist["test_auc"]) < 0.05, (full, dist)


def test_bench_dgl_input(runs):
    pytest.importorskip("pandas", reason="bench_dgl_input.py needs pandas (DGL's readers): "
                                         "pip install -c constraints.txt -e '.[test]'")
    r = runs.json("dgl_input")
    sizes = r["sizes"]
    assert (sizes["total_edges"], sizes["total_nodes"], sizes["chunks"]) == (2 * 10**4, 4000, 2)
    assert sum(sizes["edges"].values()) == 2 * 10**4 and sum(sizes["nodes"].values()) == 4000
    assert all(positive(v) for v in r["dgl_files_bytes"].values())
    for key in ("baseline_dgl_array_readwriter", "baseline_dgl_dispatch_edge_loop_edges_only"):
        base = r[key]
        assert base["edges_read"] == 2 * 10**4, base
        assert seconds(base["seconds"]) and positive(base["edges_per_s"])
        assert positive(base["peak_rss_mb"])
    assert positive(r["baseline_dgl_array_readwriter"]["arrays_in_memory_mb"])
    ours = r["prep_chunk"]
    assert ours["check"] == {"node_types": 3, "edge_types": 3, "counts_match": True}
    assert positive(ours["seconds"]) and positive(ours["output_bytes"])
    assert rss_per_worker(ours["worker_peak_rss_mb"]) and positive(ours["cli_process_peak_rss_mb"])
    assert ours["warnings"] == []
    for key in ("time_ratio", "time_ratio_with_cluster_start", "peak_rss_ratio"):
        assert positive(r[key]), key


def test_bench_dgl_partition(runs):
    r = runs.json("dgl_partition")
    assert r["graph"] == {"generator": "rmat", "scale": 13, "nodes": 2**13, "edges": 16 * 2**13,
                          "feat_dim": 8}
    assert r["parts"] == 4 and set(r["graphprep"]) == {"auto", "kaminpar", "metis"}
    dgl = r["dgl"]
    if importlib.util.find_spec("dgl") is not None:     # the test extra installs it
        assert "seconds" in dgl, dgl
    if "seconds" in dgl:
        for key in ("seconds", "seconds_read_and_build", "seconds_partition_graph"):
            assert seconds(dgl[key]), key
        assert positive(dgl["peak_rss_mb"]) and fraction(dgl["cut_ratio"])
        assert sum(dgl["nodes_per_part"]) == 2**13 and len(dgl["nodes_per_part"]) == 4
        assert dgl["imbalance_nodes"] >= 1 and dgl["imbalance_edges"] >= 1
    else:
        assert dgl["error"]
    for method, run in r["graphprep"].items():
        assert seconds(run["partition_seconds"]) and seconds(run["dispatch_seconds"]), method
        assert run["seconds"] == pytest.approx(run["partition_seconds"] +
                                               run["dispatch_seconds"], abs=0.02)
        assert rss_per_worker(run["partition_worker_peak_rss_mb"])
        assert rss_per_worker(run["dispatch_worker_peak_rss_mb"])
        assert fraction(run["cut_ratio"]) and 1 <= run["imbalance_nodes"] <= 1.03 + 1e-9
        if "seconds" in dgl:
            assert positive(run["time_vs_dgl"]) and positive(run["peak_rss_vs_dgl"])
    assert r["graphprep"]["auto"]["auto_chose"] == "metis"       # 131,072 edges fit


def test_quick_demo(runs):
    """``DEMO_QUICK=1 bash examples/demo.sh OUT``: every step exits 0, and the three training
    runs print test figures above chance."""
    assert os.path.exists(os.path.join(os.path.dirname(sys.executable), "prep")), \
        f"no prep script beside {sys.executable}: install the project"
    proc = runs.result("demo")
    out = runs.work["demo"] / "demo-out"
    assert f"demo done: outputs in {out}/" in proc.stdout
    acc = [float(x) for x in re.findall(r"^test accuracy (\d\.\d+)", proc.stdout, re.M)]
    auc = [float(x) for x in re.findall(r"^test AUC (\d\.\d+)", proc.stdout, re.M)]
    printed = "\n".join(re.findall(r"^test .*", proc.stdout, re.M))
    assert len(acc) == 2 and len(auc) == 1, proc.stdout
    cora, synth = acc
    assert cora > 0.6, f"Cora: {printed}"      # 7 classes; always the largest class: 0.30
    assert synth > 0.3, f"synth: {printed}"    # 8 planted classes of equal size: 0.125
    assert auc[0] > 0.7, f"Cora link: {printed}"   # a random scorer: 0.5
    # what the steps write is there: the embeddings, and the metrics of what was printed
    assert (out / "cora-embeddings").is_dir()
    assert json.load(open(out / "cora-train.json"))["summary"]["test_acc"] == pytest.approx(
        cora, abs=1e-4)


def test_bench_numpy_sort(runs):
    r = runs.json("numpy_sort")
    assert r["keys"] == 1 << 16
    for side in filter(None, (r["default"], r["without_avx512"])):
        assert all(positive(v) for k, v in side.items() if k.endswith("_ns"))
    if r["numpy_avx512_targets"]:                # x86-64: the second side ran without them
        assert r["without_avx512"]["avx512_sorts"] is False
    if "NPY_DISABLE_CPU_FEATURES" not in os.environ:
        assert r["workers_environment"] == ({"NPY_DISABLE_CPU_FEATURES": r[
            "numpy_avx512_targets"]} if r["avx512_sort_is_slow"] else {})


def test_bench_synth_rmat(runs):
    r = runs.json("synth_rmat")
    assert r["scale"] == 12 and r["edge_factor"] == 16
    for run in (r["synth_rmat"], r["synth_planted_same_size"]):
        assert positive(run["seconds"]) and positive(run["edges_per_s"])
    assert all(positive(v) for v in r["edge_generation_per_s"].values())
    for shape, scale in ((r["shape"], 12), (r["label_scale"], 11)):
        assert shape["nodes"] == 2 ** scale and shape["edges"] == 16 * 2 ** scale
        assert abs(shape["isolated_fraction"] - shape["isolated_expected"]) < 0.05
        assert shape["max_in_degree"] > 10 * shape["edges"] / shape["nodes"]   # a heavy tail
        assert 0 <= shape["repeated_edge_fraction"] < 0.5
    labels = r["label_scale"]
    assert sum(labels["class_sizes"]) == 2 ** 11
    assert labels["nearest_class_mean_accuracy"] > labels["chance"] + 0.2
