"""--method multilevel's range tasks read and write a range's CSR in row blocks of at most
``layout.BLOCK_ENTRIES`` entries plus rows: the same files and parts for any block size, and a
task's memory bounded by the block instead of the range (which grows with the graph above
``method.MAX_RANGES`` ranges)."""

import os
import tracemalloc

import numpy as np
import pytest

from conftest import ROOT
from graphprep.formats import load_chunked_graph
from graphprep.pipeline.core.cluster import local_runner
from graphprep.pipeline.partition.base import PartitionOptions
from graphprep.pipeline.partition.multilevel import MultilevelPartitioner, buckets, coarsen, layout
from graphprep.pipeline.partition.multilevel.contract import contract
from graphprep.pipeline.partition.multilevel.jet import jet_apply, jet_propose, new_jet_files
from graphprep.formats.npyio import new_npy
from graphprep.pipeline.partition.multilevel.layout import (CSRWriter, Level, cut_points,
                                                            part_dtype, write_csr)
from graphprep.pipeline.partition.multilevel.refine import (PartsTask, balance_histogram,
                                                  part_loads, refine_apply, refine_histogram)
from graphprep.pipeline.partition.multilevel.symmetric import build_level0


def test_cut_points_keep_every_block_within_the_limit():
    rng = np.random.default_rng(0)
    for limit in (1, 5, 40):
        sizes = rng.integers(0, 12, 300)
        sizes[::37] = 100                                # items over the limit alone
        cost = np.concatenate([[0], np.cumsum(sizes)])
        cuts = cut_points(cost, limit)
        assert cuts[0] == 0 and cuts[-1] == len(sizes) and (np.diff(cuts) > 0).all()
        span = cost[cuts[1:]] - cost[cuts[:-1]]
        assert ((span <= limit) | (np.diff(cuts) == 1)).all()
        # greedy: no block could take the next item too
        nxt = cuts[1:-1] + 1
        assert (cost[nxt] - cost[cuts[:-2]] > limit).all()
    assert cut_points(np.zeros(1, dtype=np.int64), 10).tolist() == [0, 0]


def random_entries(rng, rows, n, hub=None):
    """Sorted distinct (row, neighbour) entries of ``rows`` rows over ``n`` nodes; row
    ``hub`` has n / 2 of them, and a run of rows has none."""
    deg = rng.integers(0, 9, rows)
    deg[rows // 3: rows // 3 + 20] = 0
    if hub is not None:
        deg[hub] = n // 2
    row = np.repeat(np.arange(rows), deg)
    col = rng.integers(0, n, len(row))
    keys = np.unique(row * n + col)
    return keys // n, keys % n


@pytest.mark.parametrize("weights", ["unit", "small", "wide"])
def test_csr_writer_writes_the_bytes_of_write_csr(tmp_path, monkeypatch, weights):
    """Blocks of any size through ``CSRWriter`` give ``write_csr``'s files byte for byte:
    int32 adj, no weight file for unit weights, int32 or int64 weights as they fit (narrowed
    in chunks of ``BLOCK_ENTRIES``)."""
    monkeypatch.setattr(layout, "BLOCK_ENTRIES", 333)
    rng = np.random.default_rng(1)
    n, rows = 5000, 700
    row, col = random_entries(rng, rows, n, hub=500)
    wgt = {"unit": np.ones(len(row), dtype=np.int64),
           "small": rng.integers(1, 1000, len(row)),
           "wide": rng.integers(1, 1 << 40, len(row))}[weights]
    if weights != "unit":
        wgt[: len(wgt) // 2] = 1                        # the first blocks all unit weights
    ref, got = (Level(str(tmp_path / x), n, rows, 1, 1) for x in "ab")
    for lv in (ref, got):
        os.makedirs(lv.folder)
    write_csr(ref, 0, row, col, wgt)
    cuts = np.unique(np.concatenate([[0, rows], rng.integers(0, rows, 9)]))
    writer = CSRWriter(got, 0, len(cuts) - 1)
    for a, b in zip(cuts[:-1], cuts[1:]):
        mine = (row >= a) & (row < b)
        writer.add(row[mine], col[mine], None if weights == "unit" else wgt[mine])
    writer.close()
    assert sorted(os.listdir(ref.folder)) == sorted(os.listdir(got.folder))
    assert (weights == "unit") == (not os.path.exists(ref.csr_path(0, "wgt")))
    for name in os.listdir(ref.folder):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("split_rows", [False, True])
def test_read_csr_blocks_are_the_range(tmp_path, split_rows):
    """Blocks tile the range within the limit, except a row over it: alone, or with
    ``split_rows`` in pieces within the limit, all with the row's ``start``."""
    rng = np.random.default_rng(2)
    n, rows = 3000, 400
    row, col = random_entries(rng, rows, n, hub=100)
    lv = Level(str(tmp_path), n, rows, 1, 1)
    write_csr(lv, 0, row, col, rng.integers(1, 50, len(row)))
    whole = lv.read_csr(0)
    for limit in (1, 30, 10**9):
        blocks = list(lv.read_csr_blocks(0, limit, split_rows))
        assert blocks[0].start == 0 and blocks[-1].stop == rows
        assert all(a.stop == b.start or a.start == b.start for a, b in zip(blocks, blocks[1:]))
        assert all(len(b.adj) + b.stop - b.start <= limit or b.stop - b.start == 1
                   for b in blocks)
        assert all(len(b.adj) <= limit for b in blocks) == (split_rows or limit == 10**9)
        hub = [b for b in blocks if b.start <= 100 < b.stop]
        piece = max(limit // layout.PIECES, 1)
        assert len(hub) == (-(-len(whole.adj[whole.rows() == 100]) // piece)
                            if split_rows and limit < 10**9 else 1)
        assert len(blocks) > (1 if limit < 10**9 else 0)
        np.testing.assert_array_equal(
            np.bincount(np.concatenate([b.rows() + b.start for b in blocks]), minlength=rows),
            np.diff(whole.indptr))
        np.testing.assert_array_equal(np.concatenate([b.adj for b in blocks]), whole.adj)
        np.testing.assert_array_equal(np.concatenate([b.wgt for b in blocks]), whole.wgt)
        np.testing.assert_array_equal(np.concatenate([b.rows() + b.start for b in blocks]),
                                      whole.rows())


@pytest.mark.parametrize("selected", [False, True])
def test_a_row_in_pieces_has_the_connections_of_the_whole_row(tmp_path, selected):
    """Refinement's ``connections`` with rows split in pieces (two hubs over the limit):
    per node, the same (part, summed weight) pairs and own connection as whole."""
    from graphprep.pipeline.partition.multilevel.refine import connections
    rng = np.random.default_rng(6)
    n, rows, k = 3000, 400, 4
    row, col = random_entries(rng, rows, n, hub=100)
    hub2 = np.unique(rng.integers(0, n, 1200))
    keys = np.unique(np.concatenate([row * n + col, 250 * n + hub2]))
    lv = Level(str(tmp_path), n, rows, 1, 1)
    write_csr(lv, 0, keys // n, keys % n, rng.integers(1, 50, len(keys)))
    new_npy(lv.path("vwgt.npy"), (n, 1))
    parts = lv.path("parts.npy")
    new_npy(parts, (n,), part_dtype(k))
    np.load(parts, mmap_mode="r+")[:] = rng.integers(0, k, n)
    task = PartsTask(lv, 0, k, parts)
    select = (lambda own, vw, start: (np.arange(len(own)) + start) % 3 != 0) if selected \
        else None

    def table(limit):
        pairs, own = [], np.zeros(rows, dtype=np.int64)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(layout, "BLOCK_ENTRIES", limit)
            blocks = list(connections(task, select))
        for c in blocks:
            pairs.append(np.stack([c.start + c.row, c.q, c.conn], axis=1))
            own[c.start:c.start + len(c.self_conn)] = c.self_conn
        return np.concatenate(pairs), own, len(blocks)

    whole, own_whole, _ = table(10**9)
    split, own_split, count = table(300)
    assert len(list(lv.read_csr_blocks(0, 300, split_rows=True))) > count + 4 > 9
    np.testing.assert_array_equal(split, whole)
    np.testing.assert_array_equal(own_split, own_whole)
    assert (whole[:, 0] == 100).sum() == k and own_whole[[100, 250]].all()


def test_jet_apply_gains_a_row_in_pieces_as_whole(tmp_path, monkeypatch):
    """A hub whose first pieces hold its neighbours at home and whose later ones hold those
    in its target: moved by the gain of all its pieces, as when read whole."""
    rng = np.random.default_rng(7)
    n, k = 3000, 4
    row, col = random_entries(rng, n, n, hub=100)
    lv = Level(str(tmp_path), n, n, 1, 1)
    write_csr(lv, 0, row, col, rng.integers(1, 50, len(row)))
    new_npy(lv.path("vwgt.npy"), (n, 1))
    np.load(lv.path("vwgt.npy"), mmap_mode="r+")[:] = 1
    parts = lv.path("parts.npy")
    new_npy(parts, (n,), part_dtype(k))
    p = np.where(np.arange(n) < n // 3, 0, 1 + rng.integers(0, k - 1, n) // (k - 1))
    p[100] = 0
    np.load(parts, mmap_mode="r+")[:] = p
    files = new_jet_files(lv, parts, k)
    target = np.where(rng.random(n) < 0.1, (p + 1) % k, -1)
    target[100] = 1
    np.load(files.target, mmap_mode="r+")[:] = target
    priority = rng.integers(0, 1 << 40, n)
    priority[100] = 1 << 50                     # no neighbour moves ahead of the hub
    np.load(files.priority, mmap_mode="r+")[:] = priority
    task = PartsTask(lv, 0, k, parts, target=lv.path("next.npy"))

    def apply(limit):
        monkeypatch.setattr(layout, "BLOCK_ENTRIES", limit)
        new_npy(task.target, (n,), part_dtype(k))
        loads, moved = jet_apply((task, files))
        return loads.tolist(), moved, np.load(task.target)

    whole, split = apply(10**9), apply(300)
    assert len(list(lv.read_csr_blocks(0, 300, split_rows=True))) > \
        len(list(lv.read_csr_blocks(0, 300))) + 2
    assert whole[:2] == split[:2]
    np.testing.assert_array_equal(whole[2], split[2])
    assert whole[2][100] == 1


def test_summed_pieces_concatenate_ordered_pieces_and_sum_the_others():
    from graphprep.pipeline.partition.multilevel.layout import sum_by_key, summed_pieces
    rng = np.random.default_rng(8)
    keys = np.sort(rng.choice(10**6, 5000, replace=False))
    wgt = rng.integers(1, 9, 5000)
    ordered = [(keys[a:a + 700], wgt[a:a + 700]) for a in range(0, 5000, 700)]
    got = summed_pieces(iter(ordered), 1000)
    np.testing.assert_array_equal(got[0], keys)
    np.testing.assert_array_equal(got[1], wgt)
    mixed = [(rng.integers(0, 3000, 700), rng.integers(1, 9, 700)) for _ in range(8)]
    want = sum_by_key(np.concatenate([k for k, _ in mixed]), np.concatenate([w for _, w in mixed]))
    for limit in (100, 10**6):
        got = summed_pieces(iter(mixed), limit)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("order", ["rows", "runs", "none"])
def test_presorted_sums_and_distinct_keys_are_those_of_the_plain_sort(order):
    """``presorted`` picks the sort algorithm only: on CSR rows, sorted runs and keys in no
    order the sums, the distinct keys and their order are the plain sort's."""
    from graphprep.pipeline.core.arrayops import unique_ints
    from graphprep.pipeline.partition.multilevel.layout import sum_by_key
    rng = np.random.default_rng(9)
    if order == "rows":                  # row << 20 | column, rows ascending
        keys = (np.sort(rng.integers(0, 4000, 60000)) << 20) | rng.integers(0, 5000, 60000)
    elif order == "runs":
        keys = np.concatenate([np.sort(rng.integers(0, 10**7, 7000)) for _ in range(9)])
    else:
        keys = rng.integers(0, 10**7, 60000)
    for wgt in (rng.integers(1, 9, len(keys)), np.full(len(keys), 3),
                rng.integers(1, 9, (len(keys), 2))):
        want = sum_by_key(keys, wgt)
        got = sum_by_key(keys, wgt, presorted=True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(unique_ints(keys, presorted=True), unique_ints(keys))
    assert len(want[0]) == len(np.unique(keys))


def test_propose_holds_a_hub_row_within_about_a_block(tmp_path, monkeypatch):
    """Coarsening's propose on a range whose row 7 has 4x a block's entries (a hub
    cluster's coarse node; 2x at level 1 of the planted 10^9 graph), most clusters full so
    that every candidate's room is checked: the same proposals as with the range read
    whole, at under 0.4x its memory (measured 0.28x; the kept connections of the row's
    pieces are held) and under 3x that of the range without the hub."""
    rng = np.random.default_rng(9)
    n, rows, block = 400_000, 3000, 1 << 13
    peaks, outputs = {}, {}
    for hub in (True, False):
        lv = Level(str(tmp_path / str(hub)), n, rows, 3, 1)
        os.makedirs(lv.path("coarsen"))
        deg = rng.integers(1, 5, rows)
        deg[7] = 4 * block if hub else 3
        row = np.repeat(np.arange(rows), deg)
        col = np.concatenate([np.sort(rng.choice(n, d, replace=False)) for d in deg])
        write_csr(lv, 0, row, col, rng.integers(1, 20, len(row)))
        vw = np.ones((n, 3), dtype=np.int64)
        vw[:, 1] = rng.integers(1, 100, n)
        np.save(lv.path("vwgt.npy"), vw)
        files = coarsen.RoundFiles(lv.path("coarsen"), 0)
        np.save(files.state("labels", False), np.arange(n))
        vw[rng.random(n) < 0.7, 1] = 10**6                        # most clusters full
        np.save(files.state("cw", False), vw)
        task = coarsen.RoundTask(lv, 0, files, 1, (10.0, 1000.0, 10.0))
        for limit in (block, 1 << 30):
            monkeypatch.setattr(layout, "BLOCK_ENTRIES", limit)
            monkeypatch.setattr(coarsen, "CANDIDATES", limit // 8)
            _, peaks[hub, limit] = traced(coarsen.propose, task)
            outputs[hub, limit] = open(files.scratch("p00000.bin"), "rb").read()
    assert outputs[True, block] == outputs[True, 1 << 30]
    assert peaks[True, block] < 0.4 * peaks[True, 1 << 30], peaks
    assert peaks[False, block] < peaks[True, block] < 3 * peaks[False, block], peaks


def test_key_blocks_cut_incoming_keys_by_row(tmp_path):
    """Sorted key tables (three per file, as ``append_bucketed`` leaves them), skewed: most
    keys in a few rows, and row 450 alone over the limit. The blocks tile the keys, each
    within the limit: between rows, except that row 450 is cut by column; each span's rows
    of a block are exactly its keys in the block."""
    rng = np.random.default_rng(4)
    n, start, stop, limit = 1000, 200, 900, 500
    spans, tables = [], []
    with open(tmp_path / "k.bin", "wb") as f:
        for t in range(3):
            rows = np.concatenate([rng.integers(start, stop, 400), np.full(300 * t, 450),
                                   rng.integers(600, 610, 600)])
            keys = np.sort(rows * n + rng.integers(0, n, len(rows)))
            base, off = buckets.append_bucketed(f, keys, keys, np.array([start, stop]) * n)
            spans.append(buckets.Span(str(tmp_path / "k.bin"), int(off[0]), int(off[1]),
                                      "int64", base))
            tables.append(keys)
    spans = tuple(spans)
    blocks = buckets.key_blocks(spans, start, stop, n, limit)
    assert len(blocks) > 4
    assert blocks[0][0] == start * n and blocks[-1][1] == stop * n
    assert all(x[1] == y[0] for x, y in zip(blocks, blocks[1:]))
    hub = [(a, b) for a, b, _, _ in blocks if a < 451 * n and b > 450 * n]
    assert len(hub) >= 2                                 # the row over the limit, cut
    assert all(a % n == 0 or a // n == 450 for a, _, _, _ in blocks)
    for a, b, lo, hi in blocks:
        got = buckets.read_spans(buckets.sub_spans(spans, lo, hi))[:, 0]
        want = np.concatenate([k[(k >= a) & (k < b)] for k in tables])
        np.testing.assert_array_equal(np.sort(got), np.sort(want))
        assert len(got) + b // n - a // n <= limit, (a, b, len(got))
    (one,) = buckets.key_blocks(spans, start, stop, n, 10**6)
    assert one[:2] == (start * n, stop * n)
    assert one[2].tolist() == [s.start for s in spans] and one[3].tolist() == [s.stop
                                                                             for s in spans]


def test_summed_spans_bound_a_row_no_block_can_split(tmp_path):
    """One coarse row receiving most entries (the hubs' cluster at 10^9 edges): read and
    summed ``limit`` entries at a time, the same sums as at once, at a fraction of the
    memory."""
    from graphprep.pipeline.partition.multilevel.contract import summed_spans
    rng = np.random.default_rng(6)
    n, spans, tables = 1000, {"k": [], "w": []}, {"k": [], "w": []}
    with open(tmp_path / "k.bin", "wb") as fk, open(tmp_path / "w.bin", "wb") as fw:
        for _ in range(4):
            keys = np.sort(450 * n + rng.integers(0, 300, 50_000))
            wgt = rng.integers(1, 5, len(keys)).astype(np.int32)
            bounds = np.array([0, n]) * n
            for name, f, table, dtype in (("k", fk, keys, "int64"), ("w", fw, wgt, "int32")):
                base, off = buckets.append_bucketed(f, table, keys, bounds)
                spans[name].append(buckets.Span(f.name, int(off[0]), int(off[1]), dtype, base))
                tables[name].append(table)
    want = layout.sum_by_key(np.concatenate(tables["k"]),
                             np.concatenate(tables["w"]).astype(np.int64))
    (got, peak) = traced(summed_spans, tuple(spans["k"]), tuple(spans["w"]), 5_000)
    (at_once, peak_at_once) = traced(summed_spans, tuple(spans["k"]), tuple(spans["w"]),
                                     10**9)
    for out in (got, at_once):
        np.testing.assert_array_equal(out[0], want[0])
        np.testing.assert_array_equal(out[1], want[1])
    assert peak < peak_at_once / 10, (peak, peak_at_once)


def crowded_proposals(rng, n: int, ncon: int) -> np.ndarray:
    """Proposals (``coarsen.FIXED`` columns, then ``ncon`` weights) into ``n`` clusters,
    nine in ten into cluster 7 (a hub's), with ties in gain and some weights zero."""
    rows = 60_000
    target = np.where(rng.random(rows) < 0.9, 7, rng.integers(0, n, rows))
    props = np.zeros((rows, coarsen.FIXED + ncon), dtype=np.int64)
    props[:, 0] = rng.permutation(10 * rows)[:rows]               # nodes, distinct
    props[:, 1] = target
    props[:, 2] = rng.integers(0, 20, rows)                       # gain
    props[:, 3] = rng.integers(0, 1 << 20, rows)                  # tie hash
    props[:, 4] = rng.integers(0, 10 * rows, rows)                # old label
    props[:, coarsen.FIXED:] = rng.integers(0, 4, (rows, ncon)) * (rng.random((rows, 1)) > .1)
    return props


@pytest.mark.parametrize("ncon", [1, 3])
def test_crowded_cluster_is_decided_in_pieces_as_at_once(tmp_path, monkeypatch, ncon):
    """One bucket holding a hub's cluster's proposals (more than ``INBOX_ROWS``) is read a
    piece at a time and narrowed to its candidates: the same accepted moves in the same order
    and the same clusters turning proposals away as deciding every row at once, at a
    fraction of the memory."""
    rng = np.random.default_rng(ncon)
    n = 50
    props = crowded_proposals(rng, n, ncon)
    cw = rng.integers(0, 600, (n, ncon))
    cw[3] = 10_000                                 # over the cap already: zero weights only
    caps = np.full(ncon, 3000.0)
    path = tmp_path / "p.bin"
    props.tofile(path)
    spans = tuple(buckets.Span(str(path), a, min(a + 7000, len(props)))
                  for a in range(0, len(props), 7000))
    want = coarsen._accept_block(props, cw, caps)
    monkeypatch.setattr(coarsen, "INBOX_ROWS", 4096)
    got, peak = traced(coarsen._accept_group, spans, props.shape[1], cw, caps)
    monkeypatch.setattr(coarsen, "INBOX_ROWS", 1 << 30)
    _, peak_at_once = traced(coarsen._accept_group, spans, props.shape[1], cw, caps)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert 7 in want[1] and 0 < (want[0][:, 1] == 7).sum() < (props[:, 1] == 7).sum() / 4
    assert peak < peak_at_once / 3, (peak, peak_at_once)


class Counted:
    """Counts the blocks of ``read_csr_blocks``, the CSR writers and merges of more than one
    block, and the pieces of crowded inbox buckets (``coarsen._candidates``), while patched
    in."""

    def __init__(self, monkeypatch):
        self.reads = self.writers = self.merged = self.pieces = self.row_pieces = 0
        read, init, split = Level.read_csr_blocks, CSRWriter.__init__, buckets.key_blocks
        candidates = coarsen._candidates

        def counting_read(level, r, max_entries=None, split_rows=False):
            last = None
            for csr in read(level, r, max_entries, split_rows):
                self.reads += 1
                self.row_pieces += csr.start == last
                last = csr.start
                yield csr

        def counting_init(writer, level, r, blocks):
            self.writers += blocks > 1
            init(writer, level, r, blocks)

        def counting_split(*args):
            out = split(*args)
            self.merged += len(out) > 1
            return out
        def counting_candidates(*args):
            self.pieces += 1
            return candidates(*args)
        monkeypatch.setattr(coarsen, "_candidates", counting_candidates)
        monkeypatch.setattr(Level, "read_csr_blocks", counting_read)
        monkeypatch.setattr(CSRWriter, "__init__", counting_init)
        for module in ("contract", "symmetric"):
            monkeypatch.setattr(f"graphprep.pipeline.partition.multilevel.{module}.key_blocks",
                                counting_split)


@pytest.mark.parametrize("refinement", ["jet", "lp"])
def test_same_parts_for_any_block_size(homo, tmp_path, monkeypatch, refinement):
    """The same seed gives the same parts with blocks of 1000 entries (a dozen or more per
    range, in every pass that reads or writes a CSR, and the rows of hubs in pieces; propose's
    candidates decided 64 at a time) as with one block per range."""
    g = load_chunked_graph(str(homo))
    opts = PartitionOptions(4, 7, ("train", "edges"), "cut", 0.03, 10_000)

    def run(out):
        ml = MultilevelPartitioner(range_size=4096, refinement=refinement)
        ml.assign(g, opts, local_runner, str(out))
        return np.load(out / "_N.npy"), ml

    one, ml = run(tmp_path / "one")
    assert len(ml.info["levels"]) >= 3
    count = Counted(monkeypatch)
    monkeypatch.setattr(layout, "BLOCK_ENTRIES", 1000)
    monkeypatch.setattr(coarsen, "INBOX_ROWS", 64)
    monkeypatch.setattr(coarsen, "CANDIDATES", 64)
    blocked, _ = run(tmp_path / "blocked")
    ranges = -(-g.num_nodes["_N"] // 4096)
    assert count.reads > 20 * ranges and count.writers >= ranges and count.merged >= 2
    assert count.pieces > 0 and count.row_pieces > 0
    np.testing.assert_array_equal(one, blocked)
    assert len(np.unique(one)) == 4


def traced(fn, *args):
    """``fn(*args)`` and the peak of the memory it allocated (numpy arrays are traced)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = fn(*args)
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def files_of(folder):
    return {name: open(os.path.join(folder, name), "rb").read()
            for name in sorted(os.listdir(folder)) if name.endswith(".npy")}


def test_task_memory_is_bounded_by_the_block(homo, tmp_path, monkeypatch):
    """One range of 20k nodes and ~400k entries: with blocks of 2^13 entries every task that
    holds entries (level 0's CSR, contraction, Jet, refinement, balance) peaks at under a
    third of what it holds with the range as one block, with the same output."""
    g = load_chunked_graph(str(homo))
    k, peaks, outputs = 4, {}, {}
    for limit in (1 << 30, 1 << 13):
        monkeypatch.setattr(layout, "BLOCK_ENTRIES", limit)
        root = tmp_path / str(limit)
        level, peaks["range CSR", limit] = traced(
            build_level0, g, ("edges",), str(root / "L0"), 1 << 20, local_runner)
        assert level.num_ranges == 1 and level.num_entries() > 30 * (1 << 13)
        n = level.num_nodes
        os.makedirs(level.path("coarsen"))                    # as cluster() leaves it
        labels, cw = level.path("coarsen/labels.npy"), level.path("coarsen/cw.npy")
        new_npy(labels, (n,))
        new_npy(cw, (n, level.ncon))
        np.load(labels, mmap_mode="r+")[:] = np.arange(n) // 2 * 2     # pairs
        w = np.load(cw, mmap_mode="r+")
        w[::2] = np.add.reduceat(np.asarray(level.vwgt()), np.arange(0, n, 2))
        w.flush()
        (coarse, _), peaks["contract", limit] = traced(
            contract, level, labels, cw, str(root / "L1"), local_runner)
        parts = level.path("parts.npy")
        new_npy(parts, (n,), part_dtype(k))
        np.load(parts, mmap_mode="r+")[:] = np.random.default_rng(3).integers(0, k, n)
        loads = part_loads(np.load(parts).astype(np.int64), np.asarray(level.vwgt()), k)
        caps = loads.sum(axis=0) / k * np.array([[1.03], [0.99]])      # refine, balance
        task = PartsTask(level, 0, k, parts, target=level.path("next.npy"), round=1, seed=5,
                         room=tuple(map(tuple, (caps[0] - loads).tolist())))
        new_npy(task.target, (n,), part_dtype(k))
        files = new_jet_files(level, parts, k)
        res, peaks["jet", limit] = traced(jet_propose, (task, files, 0.25))
        res2, peaks["jet apply", limit] = traced(jet_apply, (task, files))
        hist, peaks["refine", limit] = traced(refine_histogram, task)
        moves, peaks["refine apply", limit] = traced(
            refine_apply, PartsTask(**{**task.__dict__, "accept": (0,) * k}))
        bal, peaks["balance", limit] = traced(balance_histogram, PartsTask(**{
            **task.__dict__, "round": 0, "caps": tuple(caps[1].tolist()),
            "room": tuple(map(tuple, (caps[1] - loads).tolist()))}))
        outputs[limit] = (res.cut2, res.loads.tolist(), res.keys.tolist(), res2[1],
                          [h.tolist() for h in hist], moves[1], [b.tolist() for b in bal],
                          files_of(level.folder), files_of(coarse.folder))
    one, small = outputs
    assert outputs[one] == outputs[small]
    assert len(outputs[one][6][0]) > 0 and outputs[one][5] > 0      # balance and refine move
    for task in ("range CSR", "contract", "jet", "jet apply", "refine", "balance"):
        assert peaks[task, small] < peaks[task, one] / 3, (task, peaks)


def _task_peaks(graph, cwd, *args) -> dict:
    """``examples/benchmarks/multilevel_task_peaks.py GRAPH --parts 2 ARGS``'s JSON."""
    import json
    import subprocess
    import sys
    script = os.path.join(ROOT, "examples", "benchmarks",
                          "multilevel_task_peaks.py")
    return json.loads(subprocess.run([sys.executable, script, str(graph), "--parts", "2", *args],
                                     cwd=cwd, capture_output=True, text=True,
                                     check=True).stdout)


def test_task_peaks_diagnostic_names_every_pass(homo, tmp_path):
    """``examples/benchmarks/multilevel_task_peaks.py``, as a user runs it: the largest task
    of each pass, contraction and coarsening among them, with a positive traced peak."""
    r = _task_peaks(homo, tmp_path)
    peaks = r["largest_task_per_pass"]
    assert {"multilevel: contract", "multilevel: coarsen propose"} <= set(peaks)
    assert all(p["mb"] >= 0 and 0 <= p["task"] < p["tasks"] for p in peaks.values())
    assert max(p["mb"] for p in peaks.values()) > 0 and r["levels"][0]["edges"] > 0
    assert os.listdir(tmp_path) == []            # its scratch folder is removed


def test_task_peaks_diagnostic_on_workers_samples_each_pass(homo, tmp_path):
    """``--workers 1``: the passes' largest sampled worker peaks, each at least what its
    worker held when the task began, and that at least a Python worker's own memory, of which
    glibc's free heap is a part."""
    r = _task_peaks(homo, tmp_path, "--workers", "1")
    peaks = r["largest_worker_peak_per_pass"]
    assert {"multilevel: contract", "multilevel: coarsen propose"} <= set(peaks)
    assert all(10 < p["held_mb"] <= p["mb"] for p in peaks.values()), peaks
    assert all(p["held_free_heap_mb"] is None or 0 <= p["held_free_heap_mb"] < p["held_mb"]
               for p in peaks.values()), peaks
    assert r["levels"][0]["edges"] > 0 and os.listdir(tmp_path) == []


def _freed_large_array_leaves_mb() -> float:
    """RssAnon (MB) a 16 MB array still holds after it is freed, once a 24 MB array was freed
    first (which, under glibc's adaptive threshold, moves arrays up to 24 MB onto the heap)."""
    def anon_mb():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("RssAnon")) / 1024

    big = np.ones(3 << 20)                 # 24 MB
    del big
    before = anon_mb()
    held = np.ones(2 << 20)                # 16 MB, touched
    del held
    return anon_mb() - before


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's RssAnon")
def test_multilevel_workers_return_freed_large_arrays_to_the_os(homo, tmp_path):
    """--method multilevel fixes its workers' mmap threshold (cluster.fix_mmap_threshold): an
    array over it leaves nothing resident once freed, even after a larger one was freed, which
    under glibc's adaptive threshold (the workers' start) keeps it on the heap."""
    from distributed import Client

    from graphprep.pipeline.api import partition
    from graphprep.pipeline.core.cluster import MMAP_THRESHOLD, local_cluster

    assert MMAP_THRESHOLD < 16 << 20
    with local_cluster(1) as cluster, Client(cluster) as client:
        before = client.run(_freed_large_array_leaves_mb)
        partition(str(homo), str(tmp_path / "a"), num_parts=2, method="multilevel",
                  client=client)
        after = client.run(_freed_large_array_leaves_mb)
    assert all(mb > 10 for mb in before.values()), before
    assert all(mb < 4 for mb in after.values()), after
