"""prep chunk of PyG inputs made by PyG itself (issue 16, items 7-8): every node- and
edge-level tensor carried under its name (PyG's is_node_attr/is_edge_attr decide), edge data
following edge rows through chunking, what is not carried named in one log line, and
InMemoryDataset processed files (Planetoid's real data.pt, a dataset saved by
InMemoryDataset.save, OGB's older (Data, slices) layout) read the way PyG reads them."""

import logging
import shutil

import numpy as np
import pytest

from conftest import shared_data
from graphprep.formats import EdgeType, load_chunked_graph, read_array_chunk, read_edge_chunk

torch = pytest.importorskip("torch")
tgd = pytest.importorskip("torch_geometric.data", reason="torch_geometric not installed")

NODE_NAMES = {"x": "feat", "y": "label"}
EDGE_NAMES = {"edge_attr": "feat"}


# ----------------------------------------------------------------------------- helpers

@pytest.fixture
def pyg_log():
    """Messages of the PyG reader's logger (the CLI's basicConfig(force=True) would drop a
    root handler such as caplog's, so the handler sits on the reader's own logger)."""
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("graphprep.pipeline.convert.pyg")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def _np(t):
    return t.detach().cpu().numpy()


def assert_same_array(got, want, what):
    """Same dtype, shape and every row."""
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.array_equal(got, want), what


def chunked_edges(g, et):
    """Per edge chunk: (src, dst, {name: rows of that chunk's edge data file})."""
    out = []
    for i, f in enumerate(g.edges[et].files):
        src, dst = read_edge_chunk(g.path(f), g.edges[et])
        data = {name: np.asarray(read_array_chunk(g.path(files.files[i]), files))
                for name, files in g.edge_data.get(et, {}).items()}
        out.append((src, dst, data))
    return out


def check_edges(g, et, edge_index, want_data):
    """Edges of ``et`` equal ``edge_index`` in order, and chunk by chunk every edge data file
    holds exactly the rows of its edge chunk; no field more, none less."""
    assert set(g.edge_data.get(et, {})) == set(want_data), et
    ei = _np(edge_index)
    start = 0
    chunks = chunked_edges(g, et)
    assert len(chunks) == len(g.edge_chunks[et])
    for (src, dst, data), rows in zip(chunks, g.edge_chunks[et]):
        assert len(src) == rows
        stop = start + rows
        assert np.array_equal(src, ei[0, start:stop]) and np.array_equal(dst, ei[1, start:stop])
        for name, want in want_data.items():
            assert_same_array(data[name], want[start:stop], f"{et}.{name} rows {start}:{stop}")
        start = stop
    assert start == ei.shape[1]


def check_nodes(g, ntype, want_data):
    """Node data of ``ntype``: exactly the fields of ``want_data``, every row."""
    assert set(g.node_data.get(ntype, {})) == set(want_data), ntype
    for name, want in want_data.items():
        files = g.node_data[ntype][name]
        got = np.concatenate([np.asarray(read_array_chunk(g.path(f), files))
                              for f in files.files])
        assert_same_array(got, want, f"{ntype}.{name}")


def check_data(out, data, node_keys, edge_keys):
    """A chunked graph against a homogeneous ``Data``: ``node_keys``/``edge_keys`` are the
    PyG keys that must be carried (under our names), and nothing else is."""
    g = load_chunked_graph(str(out))
    et = EdgeType("_N", "_E", "_N")
    assert g.num_nodes == {"_N": data.num_nodes}
    check_nodes(g, "_N", {NODE_NAMES.get(k, k): _np(data[k]) for k in node_keys})
    check_edges(g, et, data.edge_index, {EDGE_NAMES.get(k, k): _np(data[k]) for k in edge_keys})
    return g


def check_hetero(out, h, node_keys, edge_keys):
    """A chunked graph against a ``HeteroData``: ``node_keys[ntype]``/``edge_keys[etype]``."""
    g = load_chunked_graph(str(out))
    assert g.num_nodes == {t: h[t].num_nodes for t in h.node_types}
    for t in h.node_types:
        check_nodes(g, t, {NODE_NAMES.get(k, k): _np(h[t][k]) for k in node_keys.get(t, ())})
    assert set(g.edge_types) == {EdgeType(*et) for et in h.edge_types}
    for et in h.edge_types:
        store = h[et]
        check_edges(g, EdgeType(*et), store.edge_index,
                    {EDGE_NAMES.get(k, k): _np(store[k]) for k in edge_keys.get(et, ())})
    return g


def one_line(records, *names):
    """The one 'not carried' line, naming each of ``names``."""
    lines = [r for r in records if "not carried" in r]
    assert len(lines) == 1, records
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------- Data

def cora_shaped(seed=0):
    """Cora's counts with every kind of attribute a PyG user puts on a Data."""
    gen = torch.Generator().manual_seed(seed)
    n, e = 2708, 10556
    d = tgd.Data(x=torch.randn(n, 16, generator=gen), edge_index=torch.randint(0, n, (2, e),
                 generator=gen), y=torch.randint(0, 7, (n,), generator=gen))
    d.train_mask = torch.rand(n, generator=gen) < 0.1
    d.val_mask = torch.rand(n, generator=gen) < 0.2
    d.node_year = torch.randint(1990, 2020, (n,), generator=gen, dtype=torch.int16)
    d.edge_attr = torch.randn(e, 3, generator=gen, dtype=torch.float64)
    d.edge_weight = torch.rand(e, generator=gen)
    d.edge_type = torch.randint(0, 4, (e,), generator=gen)
    d.time = torch.randint(0, 10**9, (e,), generator=gen)
    d.edge_label = torch.randint(0, 2, (e,), generator=gen, dtype=torch.uint8)
    d.train_edge_mask = torch.rand(e, generator=gen) < 0.8
    d.val_edge_mask = ~d.train_edge_mask
    d.edge_label_index = torch.randint(0, n, (2, e), generator=gen)   # edge-level, not per edge
    d.num_classes = 7                                                  # graph-level
    d.graph_feat = torch.randn(1, 5, generator=gen)                    # graph-level
    return d


def test_cora_shaped_data_every_attribute(tmp_path, prep, pyg_log):
    d = cora_shaped()
    torch.save(d, tmp_path / "cora.pt")
    prep("chunk", tmp_path / "cora.pt", tmp_path / "out", "--chunk-size", 3000)
    g = check_data(tmp_path / "out", d,
                   node_keys=("x", "y", "train_mask", "val_mask", "node_year"),
                   edge_keys=("edge_attr", "edge_weight", "edge_type", "time", "edge_label",
                              "train_edge_mask", "val_edge_mask"))
    assert g.edge_chunks[EdgeType("_N", "_E", "_N")] == (3000, 3000, 3000, 1556)
    line = one_line(pyg_log, "edge_label_index", "num_classes", "graph_feat")
    assert "cora.pt" in line and "time" not in line.replace("not carried", "")


def test_edge_tensor_as_long_as_the_node_count_lands_on_edges(tmp_path, prep, pyg_log):
    """500 nodes and 500 edges: PyG decides by the key ('edge' in it: edge-level), where a
    guess by length would have put edge_weight and edge_mask on the nodes."""
    gen = torch.Generator().manual_seed(1)
    n = 500
    d = tgd.Data(x=torch.randn(n, 4, generator=gen), edge_index=torch.randint(0, n, (2, n),
                 generator=gen), edge_weight=torch.rand(n, generator=gen),
                 edge_mask=torch.rand(n, generator=gen) < 0.5,
                 score=torch.rand(n, generator=gen))
    assert d.is_edge_attr("edge_weight") and d.is_node_attr("score")
    torch.save(d, tmp_path / "square.pt")
    prep("chunk", tmp_path / "square.pt", tmp_path / "out", "--chunk-size", 128)
    check_data(tmp_path / "out", d, node_keys=("x", "score"),
               edge_keys=("edge_weight", "edge_mask"))
    assert not [r for r in pyg_log if "not carried" in r]      # nothing to report


def test_data_name_clash_is_refused(tmp_path, prep):
    d = tgd.Data(x=torch.randn(10, 2), feat=torch.randn(10, 2),
                 edge_index=torch.randint(0, 10, (2, 30)))
    torch.save(d, tmp_path / "clash.pt")
    r = prep("chunk", tmp_path / "clash.pt", tmp_path / "out", code=2)
    assert "clash.pt" in r.output and "would be node field 'feat'" in r.output, r.output


# ----------------------------------------------------------------------------- HeteroData

def test_heterodata_per_type_edge_attributes(tmp_path, prep, pyg_log):
    from torch_geometric.datasets import FakeHeteroDataset

    torch.manual_seed(3)
    h = FakeHeteroDataset(num_graphs=1, num_node_types=3, num_edge_types=4, avg_num_nodes=300,
                          avg_degree=5, avg_num_channels=8, edge_dim=2)[0]
    gen = torch.Generator().manual_seed(4)
    edge_keys = {}
    for et in h.edge_types:
        e = h[et].num_edges
        h[et].edge_weight = torch.rand(e, generator=gen)
        h[et].time = torch.randint(0, 1000, (e,), generator=gen)
        h[et].edge_label_index = torch.randint(0, 10, (2, e), generator=gen)   # not per edge
        edge_keys[et] = ("edge_attr", "edge_weight", "time")
    first = h.node_types[0]
    n0 = h[first].num_nodes
    loop = (first, "follows", first)                        # as many edges as nodes
    h[loop].edge_index = torch.randint(0, n0, (2, n0), generator=gen)
    h[loop].edge_score = torch.rand(n0, generator=gen)
    h[loop].train_mask = torch.rand(n0, generator=gen) < 0.5
    edge_keys[loop] = ("edge_score", "train_mask")
    h[first].prototype = torch.randn(1, 3, generator=gen)   # in a node store, not per node
    h.num_classes = 10                                       # graph-level (global store)
    torch.save(h, tmp_path / "fake.pt")
    prep("chunk", tmp_path / "fake.pt", tmp_path / "out", "--chunk-size", 400)
    node_keys = {t: tuple(k for k in h[t].keys() if k != "num_nodes") for t in h.node_types}
    node_keys[first] = tuple(k for k in node_keys[first] if k != "prototype")
    check_hetero(tmp_path / "out", h, node_keys, edge_keys)
    one_line(pyg_log, "num_classes", f"{first}.prototype",
             *(f"{EdgeType(*et)}.edge_label_index" for et in h.edge_types if et != loop))


# ----------------------------------------------------------------------------- processed files

class OneOrMore(tgd.InMemoryDataset):
    """A tiny InMemoryDataset whose process() saves ``graphs`` (PyG's own save/collate)."""

    def __init__(self, root, graphs):
        self.graphs = graphs
        super().__init__(root)
        self.load(self.processed_paths[0], type(graphs[0]))

    @property
    def raw_file_names(self):
        return []

    @property
    def processed_file_names(self):
        return ["data.pt"]

    def process(self):
        self.save(self.graphs, self.processed_paths[0])


def small_data(seed, n=120, e=900):
    gen = torch.Generator().manual_seed(seed)
    return tgd.Data(x=torch.randn(n, 5, generator=gen), y=torch.randint(0, 3, (n,), generator=gen),
                    edge_index=torch.randint(0, n, (2, e), generator=gen),
                    edge_weight=torch.rand(e, generator=gen),
                    edge_type=torch.randint(0, 3, (e,), generator=gen), tag=torch.tensor([seed]))


def test_planetoid_processed_folder(tmp_path, prep):
    """PyG's Planetoid built from the vendored raw files: its processed/data.pt, given as the
    dataset folder <root>/Cora (found by auto-detection), reads as ds[0]."""
    from torch_geometric.datasets import Planetoid

    raw = tmp_path / "root" / "Cora" / "raw"
    raw.mkdir(parents=True)
    src = shared_data("planetoid")
    for name in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"):
        shutil.copy(f"{src}/ind.cora.{name}", raw)
    ds = Planetoid(str(tmp_path / "root"), "Cora")
    data = ds[0]
    prep("chunk", tmp_path / "root" / "Cora", tmp_path / "out", "--chunk-size", 4000)
    g = check_data(tmp_path / "out", data,
                   node_keys=("x", "y", "train_mask", "val_mask", "test_mask"), edge_keys=())
    assert g.graph_name == "Cora" and g.num_nodes == {"_N": 2708}
    assert g.edge_chunks[EdgeType("_N", "_E", "_N")] == (4000, 4000, 2556)


def test_in_memory_dataset_file_and_processed_folder(tmp_path, prep, pyg_log):
    """A dataset saved by InMemoryDataset.save ((dict, slices, class)), given as the file and
    as the processed/ folder; the OGB wrappers' (Data, slices) file too."""
    data = small_data(5)
    ds = OneOrMore(str(tmp_path / "ds"), [data])
    assert len(ds) == 1
    keys = dict(node_keys=("x", "y"), edge_keys=("edge_weight", "edge_type"))
    prep("chunk", tmp_path / "ds" / "processed" / "data.pt", tmp_path / "a", "--chunk-size", 256)
    check_data(tmp_path / "a", ds[0], **keys)
    one_line(pyg_log, "tag")
    prep("chunk", tmp_path / "ds" / "processed", tmp_path / "b", "--from", "pyg")
    assert load_chunked_graph(str(tmp_path / "b")).graph_name == "ds"
    check_data(tmp_path / "b", data, **keys)

    ogb = tmp_path / "ogbn_fake" / "processed"
    ogb.mkdir(parents=True)
    torch.save(tgd.InMemoryDataset.collate([data]), ogb / "geometric_data_processed.pt")
    (ogb / "pre_transform.pt").write_bytes(b"")
    prep("chunk", tmp_path / "ogbn_fake", tmp_path / "c")
    check_data(tmp_path / "c", data, **keys)

    legacy = tgd.Data.__new__(tgd.Data)      # as PyG 1.x pickled it: no _store, one graph
    legacy.__dict__.update({**data.to_dict(), "face": None, "__num_nodes__": None})
    slices = {k: torch.tensor([0, v.size(-1 if k == "edge_index" else 0)])
              for k, v in data.to_dict().items()}
    torch.save((legacy, slices), tmp_path / "legacy.pt")
    prep("chunk", tmp_path / "legacy.pt", tmp_path / "d", "--chunk-size", 256)
    check_data(tmp_path / "d", data, **keys)


def test_heterodata_processed_file(tmp_path, prep):
    h = tgd.HeteroData()
    h["paper"].x = torch.randn(50, 3)
    h["author"].num_nodes = 20
    h["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 20, (80,)), torch.randint(0, 50, (80,))])
    h["author", "writes", "paper"].time = torch.arange(80)
    OneOrMore(str(tmp_path / "hds"), [h])
    prep("chunk", tmp_path / "hds", tmp_path / "out", "--chunk-size", 30)
    check_hetero(tmp_path / "out", h, {"paper": ("x",)}, {("author", "writes", "paper"): ("time",)})


def test_multi_graph_dataset_is_refused(tmp_path, prep):
    OneOrMore(str(tmp_path / "three"), [small_data(i) for i in range(3)])
    r = prep("chunk", tmp_path / "three", tmp_path / "out", code=2)
    assert "three/processed/data.pt" in r.output and "3 graphs" in r.output, r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("obj, found", [({"edge_index": [[0], [1]]}, "found dict"),
                                        ((1, 2), "found tuple of (int, int)"),
                                        ("text", "found str")])
def test_neither_graph_nor_dataset_is_refused(tmp_path, prep, obj, found):
    torch.save(obj, tmp_path / "other.pt")
    r = prep("chunk", tmp_path / "other.pt", tmp_path / "out", code=2)
    assert "other.pt" in r.output and found in r.output, r.output


def test_folder_without_processed_file_is_refused(tmp_path, prep):
    (tmp_path / "empty").mkdir()
    r = prep("chunk", tmp_path / "empty", tmp_path / "out", "--from", "pyg", code=2)
    assert "empty" in r.output and "processed/data.pt" in r.output, r.output
