"""prep synth checks what its arguments ask for before any work: the disk at OUT, this
process's memory (tasks and Dask's state per chunk), a worker's memory limit (a task holds one
chunk), and absurd sizes; each refusal is exit 2 with one line naming the argument last. Was:
``--generator rmat --scale 40`` grew the client until a MemoryError with no message."""

from __future__ import annotations

import collections
import os
import time

import pytest

from faultkit import assert_clean_exit, prep_fails, run_cli
from graphprep.pipeline.synth import SynthSpec

MB = 10**6


def _last(text: str) -> str:
    return [ln for ln in text.splitlines() if ln.strip()][-1]


def test_rmat_scale_40_is_refused_at_once_naming_it(tmp_path):
    start = time.monotonic()
    proc = run_cli("synth", tmp_path / "G", "--generator", "rmat", "--scale", 40,
                   "--no-progress", timeout=60)
    text = assert_clean_exit(proc, 2, ["TB on disk", "free at"])
    assert _last(text).endswith("--scale 40"), text
    assert "17,592,186,044,416 edges" in text
    assert time.monotonic() - start < 30
    assert not os.listdir(tmp_path)               # nothing half-written


# The disk is faked small (1 MB free) so that the graphs stay small where nothing checks.
Usage = collections.namedtuple("Usage", "total used free")


def test_a_graph_bigger_than_the_free_disk_names_edges(prep, tmp_path, monkeypatch):
    import graphprep.pipeline.synth_job as job
    monkeypatch.setattr(job.shutil, "disk_usage", lambda path: Usage(2 * MB, MB, MB))
    out = prep_fails(None, "synth", tmp_path / "G", "--nodes", 10**4, "--edges", 10**6,
                     code=2, names=["MB on disk, 1 MB free at", str(tmp_path / "G")],
                     cluster=False)
    assert _last(out).endswith("--edges 1000000"), out
    assert not os.listdir(tmp_path)


def test_wide_features_bigger_than_the_disk_name_feat_dim(prep, tmp_path, monkeypatch):
    import graphprep.pipeline.synth_job as job
    monkeypatch.setattr(job.shutil, "disk_usage", lambda path: Usage(2 * MB, MB, MB))
    out = prep_fails(None, "synth", tmp_path / "G", "--nodes", 20000, "--feat-dim", 512,
                     code=2, names=["of 512 features need"], cluster=False)
    assert _last(out).endswith("--feat-dim 512"), out


def test_a_chunk_over_a_workers_memory_limit_names_chunk_size(tmp_path):
    proc = run_cli("synth", tmp_path / "G", "--nodes", 10**6, "--edges", 10**6,
                   "--chunk-size", 10**6, "--memory-limit", "256MiB", "--no-progress",
                   timeout=120)
    text = assert_clean_exit(proc, 2, ["over a worker's memory limit of 268 MB"])
    assert _last(text).endswith("--chunk-size 1000000"), text
    assert not os.listdir(tmp_path)


def test_tiny_chunks_of_a_big_graph_name_chunk_size(tmp_path):
    proc = run_cli("synth", tmp_path / "G", "--edges", 2 * 10**6, "--chunk-size", 1,
                   "--no-progress", timeout=60)
    text = assert_clean_exit(proc, 2, ["2,020,000 tasks"])
    assert _last(text).endswith("--chunk-size 1"), text


@pytest.mark.parametrize("limit,names", [
    ("lots", ["not a memory size", "--memory-limit lots"]),
    ("100MB", ["give it at least 256 MiB", "--memory-limit 100MB"]),
])
def test_a_memory_limit_no_worker_can_run_under_is_refused(tmp_path, limit, names):
    proc = run_cli("synth", tmp_path / "G", "--memory-limit", limit, "--no-progress",
                   timeout=60)
    text = assert_clean_exit(proc, 2, names)
    assert _last(text).endswith(names[-1]), text


def test_more_workers_than_the_memory_holds_is_refused(prep, tmp_path, monkeypatch):
    import psutil
    real = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory",
                        lambda: real._replace(available=1 << 30))
    out = prep_fails(None, "synth", tmp_path / "G", "--workers", 5, code=2,
                     names=["5 workers need"], cluster=False)
    assert _last(out).endswith("--workers 5"), out


@pytest.mark.parametrize("args,culprit", [
    (["--generator", "rmat", "--scale", 1], "--scale 1"),
    (["--generator", "rmat", "--scale", 3], "--scale 3"),
    (["--nodes", 10], "--nodes 10"),
    (["--nodes", 3 * 10**10, "--edges", 100], "--nodes 30000000000"),
])
def test_sizes_too_small_or_beyond_the_generator_name_their_value(prep, tmp_path, args,
                                                                   culprit):
    out = prep_fails(None, "synth", tmp_path / "G", *args, code=2, cluster=False)
    assert _last(out).endswith(culprit), out
    assert "Traceback" not in out


@pytest.mark.parametrize("kw,culprit", [
    (dict(generator="rmat", scale=0), "--scale 0"),
    (dict(generator="rmat", edge_factor=0), "--edge-factor 0"),
    (dict(edges=0), "--edges 0"),
    (dict(nodes=-5), "--nodes -5"),
])
def test_the_api_names_an_absurd_size_too(tmp_path, kw, culprit):
    from graphprep.formats import FormatError
    from graphprep.pipeline import api
    with pytest.raises(FormatError) as err:
        api.synth(str(tmp_path / "G"), **kw)
    assert str(err.value).endswith(culprit), err.value


def test_dry_run_prints_the_footprint_and_refuses_what_cannot_fit(tmp_path):
    from graphprep.formats import FormatError
    from graphprep.pipeline.core.cluster import ClusterOptions
    from graphprep.pipeline.synth_job import dry_run
    line = dry_run(SynthSpec.from_scale(12, 16), str(tmp_path / "G"), 1 << 20,
                   ClusterOptions())
    assert line.startswith("synth (rmat) dry run, from the arguments: 65,536 edges and "
                           "4,096 nodes in 2 chunks; disk ~"), line
    assert "peak per worker ~" in line and not os.listdir(tmp_path)
    with pytest.raises(FormatError, match="--scale 40$"):
        dry_run(SynthSpec.from_scale(40, 16), str(tmp_path / "G"), 1 << 20, ClusterOptions())


def test_prep_synth_dry_run_prints_it_and_writes_nothing(tmp_path):
    proc = run_cli("synth", tmp_path / "G", "--generator", "rmat", "--scale", 12, "--dry-run",
                   cwd=tmp_path)
    text = assert_clean_exit(proc, 0, names=["synth (rmat) dry run", "65,536 edges"])
    assert "peak per worker" in text and os.listdir(tmp_path) == []
    proc = run_cli("synth", tmp_path / "G", "--generator", "rmat", "--scale", 40, "--dry-run",
                   cwd=tmp_path)
    assert_clean_exit(proc, 2, names=["--scale 40"])


@pytest.mark.parametrize("args", [["--nodes", 30000, "--edges", 300000],
                                  ["--generator", "rmat", "--scale", 15]])
def test_the_disk_estimate_is_near_what_synth_writes(prep, tmp_path, args):
    from graphprep.pipeline.synth import estimate_synth, make_spec
    prep("synth", tmp_path / "G", *args, "--chunk-size", 100000)
    written = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in
                  os.walk(tmp_path / "G" / "edges") for f in fs) + \
        sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in
            os.walk(tmp_path / "G" / "node_data") for f in fs)
    kw = dict(zip(args[::2], args[1::2]))
    spec = make_spec(kw.get("--generator", "planted"), nodes=kw.get("--nodes"),
                     edges=kw.get("--edges"), scale=kw.get("--scale"))
    estimate = estimate_synth(spec, 100000).disk_bytes
    assert 0.7 < estimate / written < 1.5, (estimate, written)
