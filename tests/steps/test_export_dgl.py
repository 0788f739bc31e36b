"""``prep export --to dgl``: every part loads with ``dgl.distributed.load_partition``, and
through the written original-ID maps every edge, feature and label row matches the input."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from graphprep.formats import load_chunked_graph
from tests.conftest import (dispatched, edge_data_of, edges_of, node_data_of, run_prep,
                            synth_partitioned)

os.environ.setdefault("DGLBACKEND", "pytorch")     # no ~/.dgl/config.json, no notice
dgl = pytest.importorskip("dgl")
from dgl.data.utils import load_tensors  # noqa: E402

ET = "_N:_E:_N"
MASKS = ("train_mask", "val_mask", "test_mask")


@pytest.fixture(scope="module")
def cora_split(scheduler, cora_chunked, tmp_path_factory):
    """Cora with edge data (split-edges' masks), 3 parts by metis: (chunked, graph.json)."""
    root = tmp_path_factory.mktemp("exdgl")
    run_prep(scheduler, "split-edges", cora_chunked, root / "s", "--etype", ET, "--val", 0.1,
             "--test", 0.1, "--seed", 1)
    return root / "s", dispatched(scheduler, root / "s", root / "d", 3, "--method", "metis")


@pytest.fixture(scope="module")
def mag3(scheduler, tmp_path_factory):
    """A small heterogeneous synth graph in 3 random parts: (chunked, graph.json). With 3
    parts a part's halo mixes types and owners whose homogeneous ranges interleave."""
    root = synth_partitioned(scheduler, tmp_path_factory.mktemp("mag3"), "--hetero",
                             "--nodes", 4000, "--edges", 20000, "--seed", 5, parts=3)
    return root / "G", str(root / "D" / "graph.json")


def _part_maps(out, parts: int, name: str) -> list[dict[str, np.ndarray]]:
    """Each part's ``orig_nids.dgl`` / ``orig_eids.dgl``."""
    return [{k: v.numpy() for k, v in load_tensors(os.path.join(out, f"part{p}", name)).items()}
            for p in range(parts)]


def _concat(per_part: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """DGL per-type ID -> original ID: the parts' maps concatenated in part order (what
    partition_graph(return_mapping=True) returns)."""
    return {k: np.concatenate([m[k] for m in per_part]) for k in per_part[0]}


def check_export(out: str, chunked, parts: int, monkeypatch) -> None:
    """Load every part of the export at ``out`` and compare it with ``chunked`` by original
    ID: each node inner in exactly one part, the one the partition book says; each edge
    exactly once with its original endpoints; every node and edge data row."""
    g = load_chunked_graph(str(chunked))
    config = os.path.join(out, f"{g.graph_name}.json")
    meta = json.load(open(config))
    assert meta["num_parts"] == parts and meta["halo_hops"] == 1
    assert meta["num_nodes"] == sum(g.num_nodes.values())
    monkeypatch.setenv("DGL_DIST_DEBUG", "1")        # load_partition's own ID checks
    nids, eids = _part_maps(out, parts, "orig_nids.dgl"), _part_maps(out, parts, "orig_eids.dgl")
    orig_n, orig_e = _concat(nids), _concat(eids)
    for t in g.node_types:
        assert np.array_equal(np.sort(orig_n[t]), np.arange(g.num_nodes[t])), t
    edata = {(str(et), f): edge_data_of(chunked, str(et), f)
             for et in g.edge_types for f in g.edge_data.get(et, {})}
    found = {str(et): np.full((3, g.num_edges[et]), -1, np.int64) for et in g.edge_types}
    degrees = _degrees(chunked, g)
    for rows in found.values():
        rows[2] = 0                                       # times seen
    for p in range(parts):
        pg, nfeat, efeat, gpb, name, ntypes, etypes = dgl.distributed.load_partition(config, p)
        assert name == g.graph_name and sorted(ntypes) == sorted(g.node_types)
        assert sorted(efeat) == sorted(f"{et}/{f}" for et, f in edata)
        local_orig = _check_nodes(pg, gpb, p, ntypes, orig_n, nids[p], len(g.node_types) > 1)
        types = gpb.map_to_per_ntype(pg.ndata[dgl.NID])[0].numpy()
        inner = pg.ndata["inner_node"].numpy() == 1
        assert sorted(nfeat) == sorted(f"{t}/{f}" for t in g.node_types
                                       for f in g.node_data.get(t, {}))
        for ti, t in enumerate(ntypes):
            for field in g.node_data.get(t, {}):
                got = nfeat[f"{t}/{field}"].numpy()
                want = node_data_of(chunked, t, field)[local_orig[inner & (types == ti)]]
                assert np.array_equal(got, want.astype(got.dtype)), (t, field)
        _collect_edges(pg, gpb, etypes, local_orig, orig_e, eids[p], efeat, edata, found)
        _check_degrees(pg, ntypes, types, local_orig, degrees)
    _check_outer(found, chunked, g, orig_n, nids)
    for et in g.edge_types:
        src, dst = edges_of(chunked, str(et))
        row, col, seen = found[str(et)]
        assert (seen == 1).all(), et                        # every edge exactly once
        assert np.array_equal(row, src) and np.array_equal(col, dst), et


def _check_nodes(pg, gpb, p, ntypes, orig_n, part_nids, hetero) -> np.ndarray:
    """Checks part ``p``'s nodes against the partition book; returns the original per-type ID
    of every local node (halo ones through their owners' maps)."""
    nid = pg.ndata[dgl.NID].numpy()
    inner = pg.ndata["inner_node"].numpy() == 1
    assert inner[:inner.sum()].all()                          # inner nodes first ...
    assert np.array_equal(nid[inner], np.arange(nid[0], nid[0] + inner.sum()))  # ... in order
    owner = gpb.nid2partid(pg.ndata[dgl.NID]).numpy()
    assert (owner[inner] == p).all() and (owner[~inner] != p).all()
    assert np.array_equal(pg.ndata["part_id"].numpy(), owner)
    types, per_type = (a.numpy() for a in gpb.map_to_per_ntype(pg.ndata[dgl.NID]))
    if hetero:
        assert np.array_equal(pg.ndata[dgl.NTYPE].numpy(), types)
    local_orig = np.empty(len(nid), np.int64)
    for ti, t in enumerate(ntypes):
        sel = types == ti
        local_orig[sel] = orig_n[t][per_type[sel]]
        assert (gpb.nid2partid(per_type[sel & inner], t).numpy() == p).all()
        assert np.array_equal(local_orig[sel & inner], part_nids[t])
    return local_orig


def _collect_edges(pg, gpb, etypes, local_orig, orig_e, part_eids, efeat, edata,
                   found) -> None:
    """Part's inner edges into ``found[etype] = (src, dst, times seen)`` by original edge ID;
    checks its edge data rows and its outer edges (other parts' edges from its inner nodes:
    real edges, each stored once here, all of them, as partition_graph keeps them)."""
    inner = pg.edata["inner_edge"].numpy() == 1
    assert inner[:inner.sum()].all()                          # inner edges first
    inner_node = pg.ndata["inner_node"].numpy() == 1
    src, dst = (a.numpy() for a in pg.edges())
    types, per_type = (a.numpy() for a in gpb.map_to_per_etype(pg.edata[dgl.EID]))
    owner = gpb.eid2partid(pg.edata[dgl.EID]).numpy()
    p = gpb.partid
    assert (owner[inner] == p).all() and (owner[~inner] != p).all()
    assert inner_node[src[~inner]].all() and not inner_node[dst[~inner]].any()
    if dgl.ETYPE in pg.edata:
        assert np.array_equal(pg.edata[dgl.ETYPE].numpy(), types)
    for ei, et in enumerate(etypes):
        key = ":".join(et)
        sel, out = inner & (types == ei), ~inner & (types == ei)
        ids = orig_e[key][per_type[sel]]
        assert np.array_equal(ids, part_eids[key])
        row, col, seen = found[key]
        row[ids], col[ids] = local_orig[src[sel]], local_orig[dst[sel]]
        np.add.at(seen, ids, 1)
        for (etype, field), want in edata.items():
            if etype == key:
                got = efeat[f"{key}/{field}"].numpy()
                assert np.array_equal(got, want[ids].astype(got.dtype)), (key, field)
        found.setdefault(("outer", key), []).append(
            (orig_e[key][per_type[out]], local_orig[src[out]], local_orig[dst[out]]))


def _degrees(chunked, g) -> dict[str, np.ndarray]:
    """``{ntype: [in, out] degree over all edge types, by original ID]}``."""
    deg = {t: np.zeros((2, g.num_nodes[t]), np.int64) for t in g.node_types}
    for et in g.edge_types:
        src, dst = edges_of(chunked, str(et))
        deg[et.dst][0] += np.bincount(dst, minlength=g.num_nodes[et.dst])
        deg[et.src][1] += np.bincount(src, minlength=g.num_nodes[et.src])
    return deg


def _check_degrees(pg, ntypes, types, local_orig, degrees) -> None:
    """Inner nodes' in- and out-degrees in the local graph are their whole graph's (what
    DistGraph.in_degrees/out_degrees read from the owner's part)."""
    inner = pg.ndata["inner_node"].numpy() == 1
    got = np.stack([pg.in_degrees().numpy(), pg.out_degrees().numpy()])
    for ti, t in enumerate(ntypes):
        sel = inner & (types == ti)
        assert np.array_equal(got[:, sel], degrees[t][:, local_orig[sel]]), t


def _check_outer(found, chunked, g, orig_n, nids) -> None:
    """Every edge whose endpoints have different owners is an outer edge of its source's
    part, exactly once, with its original endpoints."""
    owner = {t: np.concatenate([np.full(len(m[t]), p) for p, m in enumerate(nids)])[
        np.argsort(orig_n[t])] for t in g.node_types}           # by original ID
    for et in g.edge_types:
        src, dst = edges_of(chunked, str(et))
        cut = owner[et.src][src] != owner[et.dst][dst]
        ids, osrc, odst = (np.concatenate(a) for a in zip(*found[("outer", str(et))]))
        assert np.array_equal(np.sort(ids), np.flatnonzero(cut)), et
        assert np.array_equal(osrc, src[ids]) and np.array_equal(odst, dst[ids]), et


def test_dgl_export_of_cora_loads_and_matches_the_input(prep, cora_split, tmp_path,
                                                        monkeypatch):
    chunked, graph_json = cora_split
    out = tmp_path / "dgl"
    prep("export", os.path.dirname(graph_json), out, "--to", "dgl")
    meta = json.load(open(out / "cora.json"))
    assert meta["ntypes"] == {"_N": 0} and meta["etypes"] == {ET: 0}
    assert meta["part-2"] == {"node_feats": "part2/node_feat.dgl",
                              "edge_feats": "part2/edge_feat.dgl",
                              "part_graph": "part2/graph.dgl"}
    graphs = [dgl.load_graphs(str(out / f"part{p}" / "graph.dgl"))[0][0] for p in range(3)]
    assert set(graphs[0].ndata) == {dgl.NID, "inner_node", "part_id"}   # as partition_graph
    assert set(graphs[0].edata) == {dgl.EID, "inner_edge"}
    assert sum((pg.ndata["inner_node"] == 0).sum().item() for pg in graphs) > 0   # halo
    check_export(str(out), chunked, 3, monkeypatch)
    g = load_chunked_graph(str(chunked))
    assert set(g.edge_data[next(iter(g.edge_types))]) >= set(MASKS)    # edge data was checked


def test_dgl_export_of_a_heterogeneous_graph(prep, mag_parts, tmp_path, monkeypatch):
    chunked, graph_json = mag_parts
    g = load_chunked_graph(str(chunked))
    out = tmp_path / "dgl"
    prep("export", os.path.dirname(graph_json), out, "--to", "dgl")
    config = str(out / f"{g.graph_name}.json")
    meta = json.load(open(config))
    assert list(meta["ntypes"]) == sorted(g.node_types)             # DGL's type order
    assert list(meta["etypes"]) == sorted(str(e) for e in g.edge_types)
    gpb, _, _, _ = dgl.distributed.load_partition_book(config, 1)
    assert all(gpb._num_nodes(t) == g.num_nodes[t] for t in g.node_types)
    pg = dgl.load_graphs(str(out / "part0" / "graph.dgl"))[0][0]
    assert pg.ndata[dgl.NTYPE].dtype == pg.edata[dgl.ETYPE].dtype == dgl.backend.int32
    check_export(str(out), chunked, 2, monkeypatch)


def test_dgl_export_without_dgl_says_how_to_install_it(prep, mag_parts, tmp_path,
                                                       monkeypatch):
    _, graph_json = mag_parts
    monkeypatch.setitem(sys.modules, "dgl", None)        # find_spec("dgl") is None now
    result = prep("export", os.path.dirname(graph_json), tmp_path / "dgl", "--to", "dgl",
                  code=2)
    assert "pip install 'dgl==1.1.3' packaging" in result.output
    assert not os.listdir(tmp_path)


def test_dgl_export_of_a_heterogeneous_graph_in_three_parts(prep, mag3, tmp_path, monkeypatch):
    chunked, graph_json = mag3
    out = tmp_path / "dgl"
    prep("export", os.path.dirname(graph_json), out, "--to", "dgl")
    pg = dgl.load_graphs(str(out / "part1" / "graph.dgl"))[0][0]
    halo = pg.ndata["inner_node"].numpy() == 0
    assert len(set(pg.ndata["part_id"].numpy()[halo])) == 2        # halo from both others
    assert (np.diff(pg.ndata[dgl.NID].numpy()[halo]) > 0).all()      # in homogeneous order
    check_export(str(out), chunked, 3, monkeypatch)
