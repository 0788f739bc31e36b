# %% [markdown]
# # graphprep from Python
# The `prep` steps as functions (`graphprep.pipeline.api`), on one Dask client you own. Run it as a
# script (`python examples/api_walkthrough.py [WORKDIR]`) or open it as a notebook
# (`jupytext --to notebook`: the cells are `# %%` blocks; in a notebook, run the body of
# `main` cell by cell). Dask starts worker processes by importing this file again, so the
# work sits in `main` behind the `__main__` guard.

# %%
import os
import sys
import tempfile

from distributed import Client

from graphprep.pipeline import api
from graphprep.pipeline.core.cluster import local_cluster


def main(work: str) -> None:
    cluster = local_cluster(2)          # or Client("tcp://scheduler:8786") for a real cluster
    client = Client(cluster)

    # %% [markdown]
    # A synthetic graph with planted communities, features, labels and splits.

    # %%
    g = api.synth(os.path.join(work, "g"), nodes=20_000, edges=200_000, seed=1, client=client)
    print(g.path, g.graph.num_nodes, g.graph.num_edges)

    # %% [markdown]
    # METIS with train-node balance; the statistics come back as a dict.

    # %%
    a = api.partition(g.path, os.path.join(work, "a"), num_parts=2, method="metis",
                      balance=("train",), client=client)
    print(a.method, f"edge cut {a.stats['edge_cut']:,} ({a.stats['cut_ratio']:.1%})")

    # %% [markdown]
    # Per-part data, then the check that every edge and feature survived.

    # %%
    d = api.dispatch(g.path, a.path, os.path.join(work, "d"), client=client)
    checked = api.verify(g.path, d.path, client=client)
    print(d.graph.num_parts, "parts;", f"verified {checked.edges:,} edges, {checked.nodes:,} nodes")

    # %% [markdown]
    # A rerun of the same step is a no-op that returns the existing output.

    # %%
    again = api.partition(g.path, a.path, num_parts=2, method="metis", balance=("train",),
                          client=client)
    print("reused:", again.reused)

    # %% [markdown]
    # PyG's partition layout, loaded with PyG's own stores when torch_geometric is installed.

    # %%
    pyg = api.export(d.path, os.path.join(work, "pyg"), to="pyg", client=client)
    try:
        from torch_geometric.distributed import LocalGraphStore
    except ImportError:
        print("torch_geometric not installed; PyG layout at", pyg.root)
    else:
        store = LocalGraphStore.from_partition(pyg.root, 0)
        (attr,) = store.get_all_edge_attrs()
        print("PyG part 0:", store.get_edge_index(attr).shape[1], "edges")

    # %%
    client.close()
    cluster.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="graphprep-api-"))
