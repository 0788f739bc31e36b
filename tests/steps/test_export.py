"""``prep export``: the peer layouts load with the peers' own loaders, and every edge, feature,
label and split row matches the input by original ID."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from graphprep.formats import EdgeType, load_chunked_graph
from tests.conftest import dispatched, edges_of, node_data_of

torch = pytest.importorskip("torch")
pyg_dist = pytest.importorskip("torch_geometric.distributed")


@pytest.fixture(scope="module")
def cora_parts(scheduler, cora_chunked, tmp_path_factory):
    return dispatched(scheduler, cora_chunked, tmp_path_factory.mktemp("ex") / "d", 3,
                      "--method", "metis")


def _load_pyg(root: str, parts: int):
    return [(pyg_dist.LocalGraphStore.from_partition(root, p),
             pyg_dist.LocalFeatureStore.from_partition(root, p)) for p in range(parts)]


def _edges_by_id(stores, edge_type, num_edges):
    """(row, col) of every edge id from all parts' graph stores; each id exactly once."""
    row = np.full(num_edges, -1, np.int64)
    col = np.full(num_edges, -1, np.int64)
    seen = np.zeros(num_edges, np.int64)
    for gs, _ in stores:
        for attr in gs.get_all_edge_attrs():
            if attr.edge_type != edge_type:
                continue
            ei = gs.get_edge_index(attr).numpy()
            eid = gs.get_edge_id(attr.edge_type, attr.layout).numpy()
            assert (np.diff(ei[1]) >= 0).all()                   # sorted by destination
            row[eid], col[eid] = ei[0], ei[1]
            np.add.at(seen, eid, 1)
    assert (seen == 1).all()
    return row, col


def test_pyg_export_of_cora_loads_and_matches_the_input(prep, cora_chunked, cora_parts,
                                                        tmp_path):
    out = tmp_path / "pyg"
    prep("export", os.path.dirname(cora_parts), out, "--to", "pyg")
    root = str(out / "cora-partitions")
    meta = json.load(open(os.path.join(root, "META.json")))
    assert meta["num_parts"] == 3 and meta["is_hetero"] is False and meta["is_sorted"]
    stores = _load_pyg(root, 3)

    src, dst = edges_of(cora_chunked)
    row, col = _edges_by_id(stores, None, len(src))
    assert (row == src).all() and (col == dst).all()

    feat, label = node_data_of(cora_chunked), node_data_of(cora_chunked, name="label")
    node_pb = stores[0][0].node_pb.numpy()
    for p, (gs, fs) in enumerate(stores):
        gids = fs.get_global_id(None)
        assert (node_pb[gids.numpy()] == p).all()
        x = fs.get_tensor_from_global_id(group_name=None, attr_name="x", index=gids)
        assert np.array_equal(x.numpy(), feat[gids.numpy()])
    assert sorted(np.unique(node_pb)) == [0, 1, 2] and len(node_pb) == len(feat)
    edge_pb = stores[0][0].edge_pb.numpy()
    assert (edge_pb == node_pb[dst]).all()           # an edge lives with its destination

    assert np.array_equal(torch.load(out / "cora-label" / "label.pt").numpy(), label)
    for split in ("train", "val", "test"):
        mask = node_data_of(cora_chunked, name=f"{split}_mask").astype(bool)
        idx = [torch.load(out / f"cora-{split}-partitions" / f"partition{p}.pt").numpy()
               for p in range(3)]
        assert np.array_equal(np.sort(np.concatenate(idx)), np.flatnonzero(mask))
        assert all((node_pb[i] == p).all() for p, i in enumerate(idx))


def test_pyg_export_of_a_heterogeneous_graph(prep, mag_parts, tmp_path):
    chunked, graph_json = mag_parts
    g = load_chunked_graph(str(chunked))
    out = tmp_path / "pyg"
    prep("export", os.path.dirname(graph_json), out, "--to", "pyg")
    root = str(out / f"{g.graph_name}-partitions")
    meta = json.load(open(os.path.join(root, "META.json")))
    assert meta["is_hetero"] and meta["node_types"] == list(g.node_types)
    stores = _load_pyg(root, 2)
    edge_offset = np.cumsum([0] + [g.num_edges[e] for e in g.edge_types])
    for i, et in enumerate(g.edge_types):
        src, dst = edges_of(chunked, str(et))
        key = (et.src, et.rel, et.dst)
        row = np.full(len(src), -1, np.int64)
        col = np.full(len(src), -1, np.int64)
        for gs, _ in stores:
            attrs = [a for a in gs.get_all_edge_attrs() if a.edge_type == key]
            ei = gs.get_edge_index(attrs[0]).numpy()
            eid = gs.get_edge_id(key, attrs[0].layout).numpy() - edge_offset[i]
            row[eid], col[eid] = ei[0], ei[1]
        assert (row == src).all() and (col == dst).all(), et
        pb = stores[0][0].edge_pb[key].numpy()
        assert len(pb) == len(src)
    node_offset = dict(zip(meta["node_types"], meta["node_offset"]))
    for t in g.node_types:
        if "feat" not in g.node_data.get(t, {}):
            continue
        feat = node_data_of(chunked, t)
        for p, (gs, fs) in enumerate(stores):
            gids = fs.get_global_id(t)
            x = fs.get_tensor_from_global_id(group_name=t, attr_name="x", index=gids)
            assert np.array_equal(x.numpy(), feat[gids.numpy() - node_offset[t]])
            assert (gs.node_pb[t][gids - node_offset[t]] == p).all()


def test_export_refuses_an_unknown_target_and_is_idempotent(prep, cora_parts, tmp_path):
    out = tmp_path / "pyg"
    prep("export", os.path.dirname(cora_parts), out, "--to", "dgl-v9", code=2)
    assert not out.exists()
    prep("export", os.path.dirname(cora_parts), out, "--to", "pyg")
    before = os.path.getmtime(out / "cora-partitions" / "part_0" / "graph.pt")
    result = prep("export", os.path.dirname(cora_parts), out, "--to", "pyg")
    assert os.path.getmtime(out / "cora-partitions" / "part_0" / "graph.pt") == before
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")], result.output


def test_export_names_a_missing_part_file(prep, cora_parts, tmp_path):
    import shutil
    copy = tmp_path / "d"
    shutil.copytree(os.path.dirname(cora_parts), copy)
    os.remove(copy / "part-1" / "edges" / EdgeType.parse("_N:_E:_N").dirname / "indices.npy")
    result = prep("export", copy, tmp_path / "pyg", "--to", "pyg", code=2)
    assert "indices.npy" in result.output and "missing" in result.output
    assert not (tmp_path / "pyg").exists()
