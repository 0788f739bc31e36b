"""The ``prep`` sub-commands: option parsing only; the work lives in the step modules."""

from __future__ import annotations

import logging

import click

from formats import load_chunked_graph, validate_chunked_graph
from formats.validate import NAN_POLICIES
from .cli import cluster_options, prep
from .cluster import ClusterOptions, TaskRunner, dask_client

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 1 << 20

chunk_size_option = click.option(
    "--chunk-size", type=click.IntRange(1), default=DEFAULT_CHUNK, metavar="ROWS",
    help="Rows per output chunk (edges and node data). A task holds about one chunk.")
overwrite_option = click.option(
    "--overwrite", is_flag=True,
    help="Replace OUT if it exists. Without it, a rerun with the same inputs and options "
         "is a no-op and a different one is refused.")
nan_option = click.option(
    "--nan", "nan_policy", type=click.Choice(NAN_POLICIES), default="error",
    help="NaN/inf in float node or edge data: fail, log a warning, or accept silently.")


@prep.command()
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--nodes", type=click.IntRange(2), default=20_000, help="Total nodes.")
@click.option("--edges", type=click.IntRange(1), default=200_000, help="Total directed edges.")
@click.option("--hetero", is_flag=True,
              help="ogbn-mag-shaped graph: paper/author/institution/field_of_study with "
                   "cites/writes/affiliated_with/has_topic (totals split in MAG's proportions).")
@click.option("--num-classes", type=click.IntRange(1), default=8,
              help="Classes = planted communities.")
@click.option("--feat-dim", type=click.IntRange(1), default=32, help="Node feature width.")
@click.option("--homophily", type=click.FloatRange(0, 1), default=0.8,
              help="Fraction of edges drawn inside the source's community.")
@click.option("--exponent", type=click.FloatRange(1, min_open=True), default=2.5,
              help="Power-law exponent of the degree distribution.")
@click.option("--feat-signal", type=click.FloatRange(0), default=0.35,
              help="Scale of the class mean added to N(0,1) features (per-node signal).")
@click.option("--split", default="0.6,0.2,0.2", help="train,val,test fractions.")
@click.option("--seed", type=int, default=0, help="Random seed; output depends only on it.")
@chunk_size_option
@overwrite_option
@cluster_options
def synth(out, nodes, edges, hetero, num_classes, feat_dim, homophily, exponent, feat_signal,
          split, seed, chunk_size, overwrite, cluster: ClusterOptions):
    """Generate a synthetic graph into the chunked format at OUT.

    Degree-corrected block model: power-law degrees, planted communities that are the labels,
    features = class signal + noise, random train/val/test masks. Byte-identical for any
    number of workers; the same edges for any --chunk-size. Each task holds one chunk.
    """
    from .synth import SynthSpec
    from .synth_job import run_synth

    try:
        fractions = tuple(float(x) for x in split.split(","))
        assert len(fractions) == 3
        spec = SynthSpec(nodes, edges, hetero, num_classes, feat_dim, seed, homophily, exponent,
                         feat_signal, fractions)
    except (ValueError, AssertionError) as err:
        raise click.BadParameter(str(err) or "--split needs three fractions") from None
    graph = run_synth(spec, out, chunk_size, cluster, overwrite)
    if graph is not None:
        click.echo(_summary(graph))


@prep.command()
@click.argument("chunked", type=click.Path())
@nan_option
@cluster_options
def validate(chunked, nan_policy, cluster: ClusterOptions):
    """Check the chunked graph CHUNKED: metadata, then every chunk (row counts, dtypes and shapes
    across chunks, node IDs within their type's range, NaN/inf). Exit 2 naming the first problem.
    """
    graph = load_chunked_graph(chunked)
    with dask_client(cluster) as client:
        runner = TaskRunner(client, cluster.progress)
        warnings = validate_chunked_graph(
            graph, nan_policy=nan_policy, runner=lambda fn, items: runner(fn, items, "validate"))
    click.echo(_summary(graph))
    click.echo(f"valid ({len(warnings)} warnings)")


def _summary(graph) -> str:
    lines = [f"{graph.root}: graph {graph.graph_name!r}"]
    for t in graph.node_types:
        data = ", ".join(graph.node_data.get(t, {})) or "no data"
        lines.append(f"  nodes {t}: {graph.num_nodes[t]:,} in {len(graph.node_chunks[t])} "
                     f"chunks ({data})")
    for et in graph.edge_types:
        lines.append(f"  edges {et}: {graph.num_edges[et]:,} in {len(graph.edge_chunks[et])} chunks")
    return "\n".join(lines)
