"""prep inspect: what a chunked graph, an assignment, a partitioned graph or a metrics file
holds, from metadata only. Every number is checked against the truth (metadata, headers, the
files themselves); a graph whose chunks are emptied still inspects the same, and a 10^9-edge
graph of sparse files inspects in seconds."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner
from numpy.lib import format as npformat

from conftest import run_prep, synth_partitioned
from faultkit import ROOT
from graphprep.formats import load_chunked_graph
from graphprep.formats.partitioned import load_partitioned


def inspect(*args, code=0):
    """``prep inspect ARGS`` in-process; checks the exit code, returns the output."""
    from graphprep.pipeline.cli import prep as cli
    result = CliRunner().invoke(cli, ["inspect", *map(str, args)])
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


def inspect_json(path) -> dict:
    return json.loads(inspect(path, "--json"))


def files_bytes(root) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def table_block(text: str, header_start: str) -> list[str]:
    """The lines of the table whose header line starts with the words of ``header_start``,
    up to the next blank line."""
    lines, words = text.splitlines(), header_start.split()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:len(words)] == words)
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


@pytest.fixture(scope="module")
def small(scheduler, tmp_path_factory):
    """Synth G (3,000 nodes, 20,000 edges in 3 chunks), random 3-part A, its dispatch D, and
    METIS (AM) and multilevel (AML, forced to coarsen) assignments of G."""
    root = synth_partitioned(scheduler, tmp_path_factory.mktemp("inspect"), "--nodes", 3000,
                             "--edges", 20000, "--chunk-size", 8000, parts=3)
    run_prep(scheduler, "partition", root / "G", root / "AM", "-p", 3, "--method", "metis",
             "--balance", "train,edges")
    run_prep(scheduler, "partition", root / "G", root / "AML", "-p", 2, "--method",
             "multilevel", "--coarse-edges", 2000)
    return root


# ---------------------------------------------------------------- chunked graph

def test_chunked_json_matches_metadata_and_files(small):
    g = load_chunked_graph(str(small / "G"))
    d = inspect_json(small / "G")
    assert d["kind"] == "chunked" and d["path"] == str(small / "G")
    assert d["graph_name"] == g.graph_name == "synth" and d["format_version"] == 1
    assert d["num_nodes"] == 3000 == sum(g.num_nodes.values())
    assert d["num_edges"] == 20000 == sum(g.num_edges.values())
    assert [(t["name"], t["num_nodes"], t["num_chunks"]) for t in d["node_types"]] == \
        [(t, g.num_nodes[t], len(g.node_chunks[t])) for t in g.node_types]
    assert [(e["name"], e["num_edges"], e["num_chunks"], e["format"]) for e in d["edge_types"]] \
        == [(str(et), g.num_edges[et], 3, "parquet") for et in g.edge_types]
    fields = {f["name"]: f for f in d["node_data"]}
    assert set(fields) == {"feat", "label", "train_mask", "val_mask", "test_mask"}
    for name, f in fields.items():              # dtype and shape as numpy reads them
        files = g.node_data["_N"][name]
        first = np.load(g.path(files.files[0]), mmap_mode="r")
        assert (f["dtype"], f["shape"]) == (str(first.dtype), list(first.shape[1:]))
        assert f["rows"] == 3000 and f["num_chunks"] == len(files.files)
        assert f["bytes"] == sum(os.path.getsize(g.path(p)) for p in files.files) > 0
    assert fields["feat"]["shape"] == [32] and fields["label"]["dtype"] == "int64"
    b = d["bytes"]
    assert b["edges"] == sum(os.path.getsize(g.path(p)) for p in g.edges[g.edge_types[0]].files)
    assert b["edges"] > 0 and b["node_data"] > 0 and b["edge_data"] == 0
    assert b["total"] == files_bytes(small / "G")    # every file of the folder is accounted
    m = d["manifest"]
    assert m["step"] == "synth" and m["seed"] == 0 and m["options"]["num_edges"] == 20000
    assert m["graphprep_version"]


def test_chunked_text_is_aligned_summary(small):
    text = inspect(small / "G")
    assert text.startswith(f"chunked graph {small / 'G'}\n")
    assert "graph_name      synth" in text and "20,000 in 1 type" in text
    rows = table_block(text, "node type  node data")
    assert len(rows) == 6                                        # header + 5 fields
    assert len({len(r) for r in rows}) == 1                      # bytes column right-aligned
    assert rows[1].split()[:5] == ["_N", "feat", "float32", "[32]", "numpy"]
    edges = table_block(text, "edge type")
    assert edges[1].split()[:3] == ["_N:_E:_N", "20,000", "3"]
    # the same text for metadata.json as for its folder
    assert inspect(small / "G" / "metadata.json") == text


def test_real_dataset_cora(cora_chunked):
    d = inspect_json(cora_chunked)
    assert d["num_nodes"] == 2708 and d["node_types"][0]["num_nodes"] == 2708
    assert d["num_edges"] == load_chunked_graph(str(cora_chunked)).num_edges[
        next(iter(load_chunked_graph(str(cora_chunked)).edge_types))]
    feat = next(f for f in d["node_data"] if f["name"] == "feat")
    assert feat["shape"] == [1433]


def test_reads_no_chunk_data(small, tmp_path):
    """Emptied edge chunks and data files cut to their headers inspect the same: nothing but
    headers and sizes is read."""
    g = shutil.copytree(small / "G", tmp_path / "G")
    before = inspect_json(g)
    for d, _, names in os.walk(g):
        for n in names:
            path = os.path.join(d, n)
            if n.endswith(".parquet"):
                open(path, "wb").close()
            elif n.endswith(".npy"):
                with open(path, "rb") as f:
                    npformat.read_magic(f)
                    npformat.read_array_header_1_0(f)
                    offset = f.tell()
                os.truncate(path, offset)
    after = inspect_json(g)
    assert after["bytes"]["edges"] == 0 and after["bytes"]["node_data"] < 2000
    unsized = [[{k: v for k, v in f.items() if k != "bytes"} for f in d["node_data"]]
               for d in (before, after)]
    assert unsized[0] == unsized[1]
    assert after["num_edges"] == before["num_edges"]


def test_instant_on_a_billion_edges(tmp_path):
    """10^9 edges in 954 chunks and 10^8 x 128 float32 features as sparse files (no disk used):
    inspect answers in seconds, from the metadata, headers and stat."""
    root = tmp_path / "big"
    (root / "edges").mkdir(parents=True)
    (root / "feat").mkdir()
    chunk, edges, nodes = 1 << 20, 10**9, 10**8
    echunks = [chunk] * (edges // chunk) + [edges % chunk]
    nchunks = [chunk] * (nodes // chunk) + [nodes % chunk]
    efiles, ffiles = [], []
    for i, n in enumerate(echunks):
        efiles.append(f"edges/part-{i:05d}.parquet")
        with open(root / efiles[-1], "wb") as f:
            f.truncate(n * 16)
    for i, n in enumerate(nchunks):
        ffiles.append(f"feat/part-{i:05d}.npy")
        with open(root / ffiles[-1], "wb") as f:
            npformat.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False,
                                                "shape": (n, 128)})
            f.truncate(f.tell() + n * 128 * 4)
    meta = {"format_version": 1, "graph_name": "big", "node_type": ["_N"],
            "num_nodes_per_type": [nodes], "num_nodes_per_chunk": [nchunks],
            "edge_type": ["_N:_E:_N"], "num_edges_per_chunk": [echunks],
            "edges": {"_N:_E:_N": {"format": {"name": "parquet"}, "data": efiles}},
            "node_data": {"_N": {"feat": {"format": {"name": "numpy"}, "data": ffiles}}}}
    (root / "metadata.json").write_text(json.dumps(meta))
    start = time.monotonic()
    d = inspect_json(root)
    took = time.monotonic() - start
    assert d["num_edges"] == edges and d["edge_types"][0]["num_chunks"] == 954
    assert d["bytes"]["edges"] == edges * 16
    feat = d["node_data"][0]
    assert (feat["dtype"], feat["shape"], feat["rows"]) == ("float32", [128], nodes)
    assert feat["bytes"] > nodes * 128 * 4 and d["manifest"] is None
    assert took < 10, took                     # ~0.1 s alone; generous for a loaded machine
    assert "1,000,000,000 in 1 type" in inspect(root)


# ---------------------------------------------------------------- assignment

@pytest.mark.parametrize("name", ["A", "AM", "AML"])
def test_assignment_stats_are_partition_meta(small, name):
    meta = json.loads((small / name / "partition_meta.json").read_text())
    stats = meta["stats"]
    d = inspect_json(small / name)
    assert d["kind"] == "assignment"
    assert d["algo_name"] == meta["algo_name"] == {"A": "random", "AM": "metis",
                                                    "AML": "multilevel"}[name]
    assert d["num_parts"] == meta["num_parts"] == len(d["stats"]["parts"])
    s = d["stats"]
    assert (s["edge_cut"], s["cut_ratio"], s["num_edges"]) == \
        (stats["edge_cut"], stats["cut_ratio"], 20000)
    assert s["imbalance"] == stats["imbalance"] and "nodes" in s["imbalance"]
    assert sum(p["nodes"]["_N"] for p in s["parts"]) == 3000
    assert sum(p["edges"] for p in s["parts"]) == 20000
    assert [p["halo"]["_N"] for p in s["parts"]] == stats["halo_per_part"]["_N"]
    assert [p["train"] for p in s["parts"]] == stats["train_per_part"]
    assert d["files"] == [{"node_type": "_N", "file": "_N.npy", "dtype": "int32",
                           "length": 3000, "bytes": os.path.getsize(small / name / "_N.npy")}]
    assert d["manifest"]["step"] == "partition"
    text = inspect(small / name)
    assert re.search(rf"edge cut +{stats['edge_cut']:,} of 20,000 edges", text)
    part_rows = table_block(text, "part")
    assert len(part_rows) == 1 + meta["num_parts"] and len({len(r) for r in part_rows}) == 1
    if name == "AM":
        assert s["metis_edge_cut"] == stats["metis_edge_cut"] and s["multilevel"] is None
        assert f"METIS cut  {stats['metis_edge_cut']:,}" in text
    if name == "AML":
        ml = s["multilevel"]
        assert ml["levels"] == stats["levels"] and len(ml["levels"]) >= 2
        assert ml["coarse_edge_budget"] == 2000 and ml["budget"] == stats["budget"]
        levels = table_block(text, "level")
        assert len(levels) == 1 + len(stats["levels"])
        assert levels[1].split() == ["0", f"{stats['levels'][0]['nodes']:,}",
                                     f"{stats['levels'][0]['edges']:,}"]


def test_assignment_without_stats(small, tmp_path):
    """DGL's assignment: num_parts and algo_name only, a .txt per node type."""
    a = tmp_path / "dgl"
    a.mkdir()
    (a / "partition_meta.json").write_text(json.dumps({"num_parts": 2, "algo_name": "metis"}))
    (a / "_N.txt").write_text("0\n1\n1\n")
    d = inspect_json(a)
    assert d["stats"] is None and d["files"][0]["file"] == "_N.txt"
    assert "no statistics" in inspect(a)


# ---------------------------------------------------------------- partitioned graph

def test_partitioned_json_matches_graph_and_parts(small):
    g = load_partitioned(str(small / "D"))
    stats = json.loads((small / "A" / "partition_meta.json").read_text())["stats"]
    d = inspect_json(small / "D")
    assert d["kind"] == "partitioned" and d["num_parts"] == 3 and d["part_method"] == "random"
    assert d["dispatch_id"] == g.dispatch_id and len(d["dispatch_id"]) == 32
    assert d["integrity"] == {"manifests": 3, "stamps_ok": 3}
    assert d["num_nodes"] == 3000 and d["num_edges"] == 20000
    parts = d["parts"]
    assert sum(p["owned_nodes"]["_N"] for p in parts) == 3000     # owned nodes cover the graph
    assert [p["owned_nodes"]["_N"] for p in parts] == stats["nodes_per_part"]["_N"]
    assert sum(p["num_edges"] for p in parts) == 20000
    assert [p["num_edges"] for p in parts] == stats["edges_per_part"]
    for p, part in enumerate(parts):
        halo = np.load(g.part_path(p, "nodes", "_N", "halo_ids.npy"), mmap_mode="r")
        assert part["halo_nodes"]["_N"] == len(halo) == stats["halo_per_part"]["_N"][p]
        assert part["bytes"] == files_bytes(g.part_path(p)) > 0
        assert part["present"] and part["stamp"] == "ok" and part["path"] == f"part-{p}"
        assert part["feature_fields"] == 5 and part["files"] == len(g.parts[p].manifest)
    assert d["bytes"] == sum(p["bytes"] for p in parts)
    assert {(f["name"], f["dtype"], tuple(f["shape"])) for f in d["node_feats"]} >= \
        {("feat", "float32", (32,)), ("label", "int64", ())}
    assert d["manifest"]["step"] == "dispatch" and d["num_classes"] == {"_N": 8}
    assert inspect_json(small / "D" / "graph.json") == d


def test_partitioned_text(small):
    text = inspect(small / "D")
    assert text.startswith(f"partitioned graph {small / 'D' / 'graph.json'}\n")
    assert "manifest for 3 of 3 parts; part.json ok for 3" in text
    rows = table_block(text, "part")
    assert rows[0].split() == ["part", "owned[_N]", "halo[_N]", "edges", "feats", "files",
                               "bytes", "part.json", "path"]
    assert len(rows) == 4
    owned = [int(r.split()[1].replace(",", "")) for r in rows[1:]]
    assert sum(owned) == 3000
    assert [r.split()[-2:] for r in rows[1:]] == [["ok", f"part-{p}"] for p in range(3)]


def test_part_elsewhere_and_wrong_stamp(small, tmp_path):
    """A part folder not on this machine: sizes and halo from graph.json's manifest; a
    part.json from another part is named."""
    d = shutil.copytree(small / "D", tmp_path / "D")
    truth = inspect_json(d)
    shutil.move(d / "part-2", tmp_path / "elsewhere")
    shutil.copy(d / "part-0" / "part.json", d / "part-1" / "part.json")
    out = inspect_json(d)["parts"]
    assert out[2]["present"] is False and out[2]["stamp"] == "absent"
    assert out[2]["bytes"] == truth["parts"][2]["bytes"]
    assert out[2]["halo_nodes"] == truth["parts"][2]["halo_nodes"]
    assert out[1]["stamp"] == "mismatch: says part 0" and out[0]["stamp"] == "ok"
    assert "not on this machine" in inspect(d)


def test_heterogeneous(mag_parts):
    chunked, graph_json = mag_parts
    g = load_chunked_graph(str(chunked))
    c = inspect_json(chunked)
    assert [t["name"] for t in c["node_types"]] == ["paper", "author", "institution",
                                                    "field_of_study"]
    assert {t["name"]: t["num_nodes"] for t in c["node_types"]} == g.num_nodes
    assert {e["name"]: e["num_edges"] for e in c["edge_types"]} == \
        {str(et): n for et, n in g.num_edges.items()}
    assert {t["name"]: t["data_fields"] for t in c["node_types"]}["author"] == []
    p = inspect_json(graph_json)
    for t, n in g.num_nodes.items():
        assert sum(part["owned_nodes"][t] for part in p["parts"]) == n
    for et, n in g.num_edges.items():
        assert sum(part["edges"][str(et)] for part in p["parts"]) == n
    assert p["num_edges"] == sum(g.num_edges.values())
    a = inspect_json(os.path.dirname(graph_json) + "-a")
    for t, n in g.num_nodes.items():
        assert sum(part["nodes"][t] for part in a["stats"]["parts"]) == n
    assert {f["node_type"]: f["length"] for f in a["files"]} == g.num_nodes
    text = inspect(graph_json)
    header = table_block(text, "part")[0].split()
    assert [h for h in header if h.startswith("owned[")] == \
        ["owned[paper]", "owned[author]", "owned[institution]", "owned[field_of_study]"]
    assert "author:writes:paper" in text


# ---------------------------------------------------------------- metrics

def metrics_file(path, epochs=3, planned=3):
    """A metrics file in the documented format (FORMATS.md §4); epoch 1 is the best."""
    phases = ("sample_local", "sample_remote", "feature_fetch", "wait_batch",
              "forward_backward", "allreduce", "eval")
    val = [0.5, 0.8, 0.7, 0.75][:epochs]
    records = [{"epoch": e, "loss": 2.0 - e * 0.5, "train_acc": 0.3 + 0.1 * e,
                "val_acc": val[e], "test_acc": val[e] - 0.05, "train_nodes": 140,
                "val_nodes": 500, "test_nodes": 1000, "epoch_s": 1.0 + e, "train_s": 0.5,
                "batches_total": 10, "batches_max_rank": 5, "peak_rss_mb_max_rank": 300.0 + e,
                "time_per_rank_s": {ph: 0.1 * (i + 1) for i, ph in enumerate(phases)},
                "rpc_requests": 40, "rpc_bytes_sent": 1000, "rpc_bytes_received": 5000}
               for e in range(epochs)]
    best = max(records, key=lambda r: (r["val_acc"], -r["epoch"]))
    summary = {"epochs": epochs, "best_epoch": best["epoch"], "val_acc": best["val_acc"],
               "test_acc": best["test_acc"], "final_test_acc": records[-1]["test_acc"],
               "mean_epoch_s": sum(r["epoch_s"] for r in records) / epochs}
    config = {"graph": "/data/d/graph.json", "fanouts": [10, 10], "epochs": planned,
              "batch_size": 32, "lr": 0.01, "target": None}
    path.write_text(json.dumps({"config": config, "epochs": records, "summary": summary},
                               indent=1))
    return records


def test_metrics(tmp_path):
    records = metrics_file(tmp_path / "m.json")
    d = inspect_json(tmp_path / "m.json")
    assert d["kind"] == "metrics" and d["task"] == "node_classification"
    assert d["best_epoch"] == 1 and d["epochs"] == 3 and d["complete"] is True
    assert d["best"] == {k: records[1][k] for k in ("loss", "train_acc", "val_acc", "test_acc")}
    assert d["final"]["test_acc"] == records[2]["test_acc"] == d["summary"]["final_test_acc"]
    t = d["time_per_rank_s"]
    assert t["forward_backward"]["total"] == pytest.approx(3 * 0.5)
    assert t["eval"]["mean"] == pytest.approx(0.7)
    assert d["rpc"] == {"requests": 120, "bytes_sent": 3000, "bytes_received": 15000}
    assert d["peak_rss_mb_max_rank"] == 302.0 and d["graph"] == "/data/d/graph.json"
    text = inspect(tmp_path / "m.json")
    assert "best epoch  1" in text and "epochs      3 of 3" in text
    metric_rows = table_block(text, "metric")
    assert metric_rows[0].split()[:3] == ["metric", "best", "(epoch"]
    assert metric_rows[3].split() == ["val_acc", "0.8000", "0.7000"]
    assert table_block(text, "phase")[5].split() == ["forward_backward", "0.5000", "1.5000"]


def test_metrics_unfinished_run_and_nan(tmp_path):
    """Written after each epoch: a stopped run shows how far it got; NaN (no validation nodes)
    is null in the JSON output."""
    metrics_file(tmp_path / "m.json", epochs=2, planned=10)
    obj = json.loads((tmp_path / "m.json").read_text())
    obj["epochs"][0]["val_acc"] = math.nan
    (tmp_path / "m.json").write_text(json.dumps(obj))       # writes NaN, as json.dump does
    out = inspect(tmp_path / "m.json", "--json")
    assert "NaN" not in out
    d = json.loads(out)
    assert d["complete"] is False and d["epochs_planned"] == 10
    assert "2 of 10 (stopped or still running)" in inspect(tmp_path / "m.json")


# ---------------------------------------------------------------- errors

def test_unrelated_folder_exit_2_names_path(tmp_path):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("hello")
    out = inspect(junk, code=2)
    assert str(junk) in out and "metadata.json" in out and "graph.json" in out
    assert "Traceback" not in out
    out = inspect(junk / "notes.txt", code=2)
    assert str(junk / "notes.txt") in out
    (junk / "other.json").write_text(json.dumps({"a": 1}))
    assert str(junk / "other.json") in inspect(junk / "other.json", code=2)
    (junk / "bad.json").write_text("{not json")
    assert "invalid JSON" in inspect(junk / "bad.json", code=2)
    assert "no such file or folder" in inspect(tmp_path / "missing", code=2)


def test_errors_name_what_is_there(small, tmp_path):
    assert "run manifest" in inspect(small / "G" / "manifest.json", code=2)
    d = shutil.copytree(small / "D", tmp_path / "D")
    os.remove(d / "graph.json")
    assert "unfinished or interrupted dispatch" in inspect(d, code=2)
    os.rename(d, tmp_path / ".out.partial")
    assert ".out.partial" in inspect(tmp_path / "out", code=2)
    g = shutil.copytree(small / "G", tmp_path / "G")
    meta = json.loads((g / "metadata.json").read_text())
    meta["num_edges_per_chunk"] = [[1]]
    (g / "metadata.json").write_text(json.dumps(meta))
    out = inspect(g, code=2)                      # the validating loader's message
    assert f"{g / 'metadata.json'}, field 'num_edges_per_type[0]'" in out


def test_help_explains_option():
    out = inspect("--help")
    assert "--json" in out and "Default: text" in out and "PATH" in out


def test_no_torch(small, tmp_path):
    """Every kind inspects with torch unimportable, and a .pt file is refused without it."""
    metrics_file(tmp_path / "m.json")
    (tmp_path / "c.pt").write_bytes(b"PK\x03\x04")
    code = f"""
import sys
sys.modules["torch"] = None
from click.testing import CliRunner
from graphprep.pipeline.cli import prep
for path, want in [({str(small / 'G')!r}, 0), ({str(small / 'AML')!r}, 0),
                   ({str(small / 'D')!r}, 0), ({str(tmp_path / 'm.json')!r}, 0),
                   ({str(tmp_path / 'c.pt')!r}, 2)]:
    r = CliRunner().invoke(prep, ["inspect", path, "--json"])
    assert r.exit_code == want, (path, r.output, r.exception)
assert "torch" not in {{m for m, v in sys.modules.items() if v is not None}}
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
