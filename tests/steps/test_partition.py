"""prep partition: balance, determinism, METIS quality and constraints, exact statistics."""

import filecmp
import json
import os

import numpy as np
import pymetis
import pytest

from conftest import edges_of, node_data_of, shared_data
from graphprep.formats import FormatError, load_chunked_graph
from graphprep.formats.assignment import load_assignment


@pytest.fixture(scope="module")
def homo(tmp_path_factory, scheduler):
    from click.testing import CliRunner
    from graphprep.pipeline.cli import prep as cli
    out = tmp_path_factory.mktemp("g") / "homo"
    r = CliRunner().invoke(cli, ["synth", str(out), "--nodes", "6000", "--edges", "60000",
                                 "--num-classes", "4", "--homophily", "0.9", "--chunk-size",
                                 "20000", "--no-progress", "--scheduler", scheduler])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def hetero(tmp_path_factory, scheduler):
    from click.testing import CliRunner
    from graphprep.pipeline.cli import prep as cli
    out = tmp_path_factory.mktemp("g") / "hetero"
    r = CliRunner().invoke(cli, ["synth", str(out), "--hetero", "--nodes", "8000", "--edges",
                                 "40000", "--chunk-size", "10000", "--no-progress",
                                 "--scheduler", scheduler])
    assert r.exit_code == 0, r.output
    return out


def parts_of(folder, ntype="_N"):
    return np.load(os.path.join(folder, f"{ntype}.npy"))


def meta_of(folder):
    return json.loads(open(os.path.join(folder, "partition_meta.json")).read())


def test_random_exactly_balanced_and_deterministic(tmp_path, prep, hetero):
    for workers in (1, 2):
        prep("partition", hetero, tmp_path / f"w{workers}", "-p", 3, "--seed", 5,
             "--workers", workers, cluster=False)
    g = load_chunked_graph(str(hetero))
    for t in g.node_types:
        parts = parts_of(tmp_path / "w1", t)
        assert parts.dtype == np.int32 and len(parts) == g.num_nodes[t]
        counts = np.bincount(parts, minlength=3)
        assert counts.max() - counts.min() <= 1 and counts.min() >= 1
    files = sorted(os.listdir(tmp_path / "w1"))
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "w1", tmp_path / "w2", files, shallow=False)
    assert not mismatch and not errors
    prep("partition", hetero, tmp_path / "s6", "-p", 3, "--seed", 6)
    assert not np.array_equal(parts_of(tmp_path / "w1", "paper"), parts_of(tmp_path / "s6", "paper"))
    assert meta_of(tmp_path / "w1")["algo_name"] == "random"


def test_random_gives_every_part_a_node_of_each_type(tmp_path, prep):
    (tmp_path / "e.csv").write_text("src,dst\n0,1\n1,2\n2,3\n3,4\n")
    prep("chunk", tmp_path / "e.csv", tmp_path / "g")
    prep("partition", tmp_path / "g", tmp_path / "a", "-p", 5)
    assert sorted(parts_of(tmp_path / "a")) == [0, 1, 2, 3, 4]


def test_metis_cut_far_below_random_on_planted_graph(tmp_path, prep, homo):
    prep("partition", homo, tmp_path / "r", "-p", 4)
    prep("partition", homo, tmp_path / "m", "-p", 4, "--method", "metis")
    random_cut = meta_of(tmp_path / "r")["stats"]["cut_ratio"]
    metis_cut = meta_of(tmp_path / "m")["stats"]["cut_ratio"]
    assert random_cut > 0.7                   # 1 - 1/4 expected for random
    assert metis_cut < 0.5 * random_cut
    assert meta_of(tmp_path / "m")["stats"]["imbalance"]["nodes"] <= 1.031
    # same seed, same METIS output
    prep("partition", homo, tmp_path / "m2", "-p", 4, "--method", "metis")
    assert np.array_equal(parts_of(tmp_path / "m"), parts_of(tmp_path / "m2"))


def test_metis_cut_on_cora_matches_direct_pymetis(tmp_path, prep):
    prep("chunk", shared_data("planetoid"), tmp_path / "cora", "--name", "cora")
    # node counts only, as the direct call balances (the default also balances edges and train)
    prep("partition", tmp_path / "cora", tmp_path / "m", "-p", 4, "--method", "metis",
         "--balance", "ntypes")
    src, dst = edges_of(tmp_path / "cora")
    n = 2708
    keys = np.unique(np.concatenate([src * n + dst, dst * n + src]))
    row, col = keys // n, keys % n
    xadj = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=n))])
    # graphprep's defaults: seed 0, 3% imbalance (ufactor 30)
    _, direct = pymetis.part_graph(4, adjacency=pymetis.CSRAdjacency(xadj, col),
                                   options=pymetis.Options(seed=0, ufactor=30))
    direct = np.asarray(direct)
    direct_cut = int((direct[src] != direct[dst]).sum())
    ours = meta_of(tmp_path / "m")["stats"]["edge_cut"]
    assert abs(ours - direct_cut) <= 0.05 * direct_cut, (ours, direct_cut)


def test_balance_train_keeps_train_within_tolerance(tmp_path, prep, homo):
    # Train nodes concentrated in one community: a cut-only METIS piles them into few parts.
    g = tmp_path / "g"
    import shutil
    shutil.copytree(homo, g)
    label = node_data_of(g, name="label")
    train = (label == 0)
    np.save(g / "node_data/_N/train_mask/part-00000.npy", train)
    prep("partition", g, tmp_path / "plain", "-p", 4, "--method", "metis", "--balance",
         "ntypes")
    prep("partition", g, tmp_path / "bal", "-p", 4, "--method", "metis", "--balance", "train",
         "--imbalance", 0.05)
    plain = meta_of(tmp_path / "plain")["stats"]["imbalance"]["train"]
    balanced = meta_of(tmp_path / "bal")["stats"]["imbalance"]
    assert plain > 1.5
    assert balanced["train"] <= 1.05 and balanced["nodes"] <= 1.05


def test_hetero_metis_balances_every_type(tmp_path, prep, hetero):
    prep("partition", hetero, tmp_path / "m", "-p", 2, "--method", "metis", "--balance",
         "ntypes", "--imbalance", 0.05)
    imb = meta_of(tmp_path / "m")["stats"]["imbalance"]
    for t in ("paper", "author", "institution", "field_of_study"):
        assert imb[f"nodes[{t}]"] <= 1.05 + 1e-9, imb


@pytest.mark.parametrize("method", ["random", "metis"])
def test_stats_equal_brute_force(tmp_path, prep, hetero, method):
    prep("partition", hetero, tmp_path / "a", "-p", 3, "--method", method)
    stats = meta_of(tmp_path / "a")["stats"]
    g = load_chunked_graph(str(hetero))
    parts = {t: parts_of(tmp_path / "a", t) for t in g.node_types}
    cut, owned = 0, np.zeros(3, int)
    halo = {t: set() for t in g.node_types}
    for et in g.edge_types:
        src, dst = edges_of(hetero, str(et))
        ps, pd = parts[et.src][src], parts[et.dst][dst]
        cut += int((ps != pd).sum())
        owned += np.bincount(pd, minlength=3)
        halo[et.src] |= set(zip(pd[ps != pd].tolist(), src[ps != pd].tolist()))
    assert stats["edge_cut"] == cut and stats["edges_per_part"] == owned.tolist()
    assert stats["num_edges"] == sum(g.num_edges.values())
    for t in g.node_types:
        assert stats["nodes_per_part"][t] == np.bincount(parts[t], minlength=3).tolist()
        expect = np.bincount([p for p, _ in halo[t]], minlength=3).tolist()
        assert stats["halo_per_part"][t] == expect
    train = node_data_of(hetero, "paper", "train_mask")
    assert stats["train_per_part"] == np.bincount(parts["paper"][train], minlength=3).tolist()


def test_metis_balance_train_without_mask_is_exit_2(tmp_path, prep):
    (tmp_path / "e.csv").write_text("src,dst\n0,1\n1,2\n2,3\n3,0\n")
    prep("chunk", tmp_path / "e.csv", tmp_path / "g")
    r = prep("partition", tmp_path / "g", tmp_path / "a", "-p", 2, "--method", "metis",
             "--balance", "train", code=2)
    assert "train_mask" in r.output
    assert not (tmp_path / "a").exists()
    r = prep("partition", tmp_path / "g", tmp_path / "a", "-p", 2, "--balance", "edges", code=2)
    assert "--balance" in r.output


def test_dgl_txt_assignment_stats_and_compat(tmp_path, prep, homo):
    prep("partition", homo, tmp_path / "a", "-p", 2, "--dgl-compat")
    txt = np.loadtxt(tmp_path / "a" / "_N.txt", dtype=int)
    assert np.array_equal(txt, parts_of(tmp_path / "a"))
    dgl = tmp_path / "dgl"
    dgl.mkdir()
    (dgl / "partition_meta.json").write_text(json.dumps({"num_parts": 2, "algo_name": "metis",
                                                         "version": "1.0.0"}))
    (dgl / "_N.txt").write_text((tmp_path / "a" / "_N.txt").read_text())
    r = prep("partition", homo, "--stats", dgl)
    assert "edge cut" in r.output
    assert meta_of(dgl)["stats"]["edge_cut"] == meta_of(tmp_path / "a")["stats"]["edge_cut"]


def test_dgl_compat_multilevel_names_an_algorithm_dgl_accepts(tmp_path, prep, homo):
    """DGL's dispatch takes algo_name 'random' or 'metis' only; the real method stays known."""
    prep("partition", homo, tmp_path / "a", "-p", 2, "--method", "multilevel",
         "--coarse-edges", 1000, "--dgl-compat")
    meta = meta_of(tmp_path / "a")
    assert (meta["algo_name"], meta["method"]) == ("metis", "multilevel")
    assert load_assignment(str(tmp_path / "a")).meta.method_name == "multilevel"
    from click.testing import CliRunner
    from graphprep.pipeline.cli import prep as cli
    assert "multilevel" in CliRunner().invoke(cli, ["inspect", str(tmp_path / "a")]).output


def test_assignment_validation_names_file_and_row(tmp_path, prep, homo):
    prep("partition", homo, tmp_path / "a", "-p", 2)
    g = load_chunked_graph(str(homo))
    parts = parts_of(tmp_path / "a")
    parts[17] = 2
    np.save(tmp_path / "a" / "_N.npy", parts)
    with pytest.raises(FormatError, match=r"_N.npy, row 17: partition id 2 out of range \[0, 2\)"):
        load_assignment(str(tmp_path / "a"), g)
    np.save(tmp_path / "a" / "_N.npy", parts[:100])
    with pytest.raises(FormatError, match="has 100 entries"):
        load_assignment(str(tmp_path / "a"), g)
    r = prep("partition", homo, "--stats", tmp_path / "a", code=2)
    assert "_N.npy" in r.output
