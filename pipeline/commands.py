"""The ``prep`` sub-commands: option parsing only; the work lives in the step modules."""

from __future__ import annotations

import functools
import logging
import os

import click

from graphprep.formats import load_chunked_graph, validate_chunked_graph
from graphprep.pipeline.core.cli_types import FiniteFloat
from graphprep.formats.finite import NAN_POLICIES
from graphprep.pipeline import api
from graphprep.pipeline.rmat import MAX_SCALE
from graphprep.pipeline.synth import GENERATORS, PLANTED_DEFAULTS, RMAT_DEFAULTS
from graphprep.pipeline.core.console import setup_logging, show_progress
from graphprep.pipeline.core.cluster import (LOST_WORKER_TIMEOUT_KEY, LOST_WORKER_TIMEOUT_S,
                                             ClusterOptions, TaskRunner, dask_client, tls_security)
from graphprep.pipeline.core.recycle import AUTO_RECYCLE_MB, RECYCLE_MB_KEY

log = logging.getLogger(__name__)

# The sub-commands, in definition order; pipeline/cli.py adds them to its ``prep`` group (this
# module never imports cli.py, so the import graph has no cycle).
COMMANDS: list[click.Command] = []


def command(name: str | None = None):
    """Like ``@prep.command(name)``: a click command, added to ``prep`` by pipeline/cli.py."""
    def register(fn) -> click.Command:
        cmd = click.command(name)(fn)
        COMMANDS.append(cmd)
        return cmd
    return register


def _recycle_mb(ctx, param, value):
    if value == "auto":
        return value
    try:
        mb = int(value)
    except ValueError:
        mb = -1
    if mb < 0:
        raise click.BadParameter(f"{value!r}: a number of MB (0: never) or 'auto'")
    return mb


def cluster_options(fn):
    """The options every Dask step shares; passes ``cluster: ClusterOptions``."""
    @click.option("--scheduler", metavar="ADDR", default=None,
                  help="Address of an existing Dask scheduler (tcp://HOST:PORT, or tls://HOST:PORT "
                       "with the --tls-* options). Default: start an embedded local cluster on "
                       "127.0.0.1.")
    @click.option("--tls-ca-file", type=click.Path(dir_okay=False), default=None,
                  help="With a tls:// --scheduler: the CA certificate (PEM) that signed the "
                       "scheduler's and workers' certificates [default: Dask's configuration, "
                       "distributed.comm.tls.ca-file].")
    @click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
                  help="With a tls:// --scheduler: this client's certificate (PEM), signed by "
                       "that CA [default: Dask's configuration].")
    @click.option("--tls-key", type=click.Path(dir_okay=False), default=None,
                  help="The private key of --tls-cert (PEM) [default: in the --tls-cert file].")
    @click.option("--workers", type=click.IntRange(1), default=2, show_default=True,
                  help="Worker processes of the embedded cluster (1 thread each).")
    @click.option("--memory-limit", default="auto", show_default=True,
                  help="Memory limit per embedded worker, e.g. 4GiB; 'auto' splits system memory.")
    @click.option("--progress/--no-progress", default=True, show_default=True,
                  help="Show progress bars on stderr (only when it is a terminal and "
                       "TQDM_DISABLE is unset).")
    @click.option("--lost-worker-timeout", type=FiniteFloat(1), default=LOST_WORKER_TIMEOUT_S,
                  metavar="SECONDS",
                  help="A worker that left the cluster while tasks pinned to it (a --machines "
                       "name) or all work waited for it: fail naming it after this long. "
                       "Unpinned tasks of a lost worker are rerun elsewhere at once.")
    @click.option("--recycle-mb", default="auto", show_default=True, callback=_recycle_mb,
                  metavar="MB|auto",
                  help="Restart a worker between two passes of a step when it holds more than "
                       "this much anonymous memory: freed heap that its next tasks would only "
                       "fragment further (passes share files, so nothing is lost; ~1 s a "
                       f"restart). auto: {AUTO_RECYCLE_MB} on the embedded cluster, never on a "
                       "--scheduler cluster, whose workers may serve others (a restart needs "
                       "their nannies). 0: never.")
    @click.option("-v", "--verbose", count=True,
                  help="More log output (-v info and tracebacks of failures, -vv debug).")
    @functools.wraps(fn)
    def wrapper(*args, scheduler, tls_ca_file, tls_cert, tls_key, workers, memory_limit,
                progress, lost_worker_timeout, recycle_mb, verbose, **kwargs):
        import dask

        _setup_logging(verbose)
        security = tls_security(scheduler, tls_ca_file, tls_cert, tls_key)
        cluster = ClusterOptions(scheduler, workers, memory_limit, show_progress(progress),
                                 security=security)
        with dask.config.set({LOST_WORKER_TIMEOUT_KEY: lost_worker_timeout,
                              RECYCLE_MB_KEY: recycle_mb}):
            return fn(*args, cluster=cluster, **kwargs)
    return wrapper


def local_path(ctx, param, value):
    """Click callback: a local path made absolute (Dask workers do not share our working
    directory); URLs and None unchanged."""
    if value is None or "://" in str(value):
        return value
    return os.path.abspath(value)


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    setup_logging(level, "prep")


DEFAULT_CHUNK = api.DEFAULT_CHUNK

chunk_size_option = click.option(
    "--chunk-size", type=click.IntRange(1), default=DEFAULT_CHUNK, metavar="ROWS",
    help="Rows per output chunk (edges and node data). A task holds about one chunk.")
overwrite_option = click.option(
    "--overwrite", is_flag=True,
    help="Replace OUT if it exists: the new output is built beside it and swapped in only "
         "when complete, so a failed run leaves the old one. Without it, a rerun with the "
         "same inputs and options is a no-op and a different one is refused. Never allowed "
         "when OUT is, contains or lies inside an input.")
dry_run_option = click.option(
    "--dry-run", is_flag=True,
    help="Print the estimated peak memory per worker and the disk the step needs, from the "
         "metadata alone (no cluster is started, nothing is written), and exit.")
nan_option = click.option(
    "--nan", "nan_policy", type=click.Choice(NAN_POLICIES), default="error",
    help="NaN/inf in float node or edge data: fail, log a warning, or accept silently.")


@command()
@click.argument("out", type=click.Path(file_okay=False), callback=local_path)
@click.option("--generator", type=click.Choice(GENERATORS), default="planted",
              help="planted: degree-corrected block model with planted communities (the "
                   "labels), sized by --nodes/--edges. rmat: Graph500's Kronecker/R-MAT "
                   "generator, sized by --scale/--edge-factor: no communities, many isolated "
                   "nodes, a few huge hubs -- the hard case for partitioners.")
@click.option("--nodes", type=click.IntRange(2), default=PLANTED_DEFAULTS["nodes"],
              help="Total nodes (planted only).")
@click.option("--edges", type=click.IntRange(1), default=PLANTED_DEFAULTS["edges"],
              help="Total directed edges (planted only).")
@click.option("--hetero", is_flag=True,
              help="ogbn-mag-shaped graph: paper/author/institution/field_of_study with "
                   "cites/writes/affiliated_with/has_topic (totals split in MAG's proportions; "
                   "planted only).")
@click.option("--num-classes", type=click.IntRange(1), default=8,
              help="Classes. planted: the planted communities. rmat: class floor(C * i / "
                   "2^scale) of the node's R-MAT index i (its top bits before the ID "
                   "permutation; these classes differ in degree, and R-MAT has no "
                   "communities, so the features carry most of the signal).")
@click.option("--feat-dim", type=click.IntRange(1), default=32, help="Node feature width.")
@click.option("--homophily", type=FiniteFloat(0, 1), default=PLANTED_DEFAULTS["homophily"],
              help="Fraction of edges drawn inside the source's community (planted only).")
@click.option("--exponent", type=FiniteFloat(1, min_open=True),
              default=PLANTED_DEFAULTS["exponent"],
              help="Power-law exponent of the degree distribution (planted only).")
@click.option("--scale", type=click.IntRange(1, MAX_SCALE), default=RMAT_DEFAULTS["scale"],
              help="rmat only: 2^SCALE nodes (Graph500's SCALE).")
@click.option("--edge-factor", type=click.IntRange(1), default=RMAT_DEFAULTS["edge_factor"],
              help="rmat only: EDGE_FACTOR * 2^SCALE directed edges (Graph500's edgefactor). "
                   "Self-loops and repeated edges are kept, as Graph500 generates them "
                   "(at scale 20, edge factor 16: 4.1% of edges repeat an earlier one, "
                   "0.007% are self-loops; at scale 14: 13% and 0.12%); 'prep chunk OUT OUT2 "
                   "--from dgl --dedupe --drop-self-loops' removes them.")
@click.option("--rmat-abc", default=",".join(map(str, RMAT_DEFAULTS["rmat_abc"])),
              metavar="A,B,C",
              help="rmat only: initiator probabilities of the four quadrants a (both ends' "
                   "bit 0), b, c and d = 1-a-b-c (both 1), Graph500's; finite, > 0, "
                   "a+b+c < 1.")
@click.option("--feat-signal", type=FiniteFloat(0), default=0.35,
              help="Scale of the class mean added to N(0,1) features (per-node signal).")
@click.option("--split", default="0.6,0.2,0.2", help="train,val,test fractions.")
@click.option("--seed", type=int, default=0, help="Random seed; output depends only on it.")
@chunk_size_option
@click.option("--dry-run", is_flag=True,
              help="Print the disk at OUT, the memory per worker and in this process that the "
                   "arguments need (nothing is started or written), and exit. Without it the "
                   "same check refuses, before any work, a run that cannot fit.")
@overwrite_option
@cluster_options
@click.pass_context
def synth(ctx, out, generator, nodes, edges, hetero, num_classes, feat_dim, homophily, exponent,
          scale, edge_factor, rmat_abc, feat_signal, split, seed, chunk_size, dry_run, overwrite,
          cluster: ClusterOptions):
    """Generate a synthetic graph into the chunked format at OUT.

    planted (default): degree-corrected block model: power-law degrees, planted communities
    that are the labels. rmat: Graph500's R-MAT (a, b, c = 0.57, 0.19, 0.19), node IDs
    permuted with the seed so hubs are spread; see --num-classes for its labels. Both:
    features = class signal + noise, random train/val/test masks. Byte-identical for any
    number of workers; the same edges for any --chunk-size. Each task holds one chunk.
    """
    try:
        fractions = tuple(FiniteFloat(0, 1).convert(x, None, None) for x in split.split(","))
    except click.BadParameter:
        raise click.BadParameter(f"{split!r}: three fractions in [0, 1], e.g. 0.6,0.2,0.2",
                                 param_hint="--split") from None
    given = {name: value if _given(ctx, name) else None for name, value in
             (("nodes", nodes), ("edges", edges), ("homophily", homophily),
              ("exponent", exponent), ("scale", scale), ("edge_factor", edge_factor),
              ("rmat_abc", rmat_abc))}
    if dry_run:
        from graphprep.pipeline.synth import make_spec
        from graphprep.pipeline.synth_job import dry_run as synth_dry_run
        spec = make_spec(generator, hetero=hetero, num_classes=num_classes, feat_dim=feat_dim,
                         feat_signal=feat_signal, split=fractions, seed=seed, **given)
        click.echo(synth_dry_run(spec, out, chunk_size, cluster))
        return
    result = api.synth(out, generator=generator, hetero=hetero, num_classes=num_classes,
                       feat_dim=feat_dim, feat_signal=feat_signal, split=fractions, seed=seed,
                       chunk_size=chunk_size, overwrite=overwrite, **given, **_on(cluster))
    if not result.reused:
        click.echo(_summary(result.graph))


# chunk options a tables config decides itself: what to set in the config instead
CONFIG_DECIDES = {
    "delimiter": ("--delimiter", "csv: {delimiter: ...} on each table"),
    "header": ("--header/--no-header", "csv: {header: false} on each headerless table"),
    "src_col": ("--src-col", "src: on each edge table"),
    "dst_col": ("--dst-col", "dst: on each edge table"),
    "num_nodes": ("--num-nodes", "node tables (a type has its table's rows; dangling: add "
                                 "adds the keys only edges name)"),
    "node_data": ("--node-data", "features:, label:, split: on a node table"),
    "map_keys": ("--map-keys", "nothing: a config's keys are always mapped"),
    "split_name": ("--split-name", "split: on a node table"),
    "name": ("--name", "name: at the config's top level"),
}


def _refuse_config_overrides(ctx: click.Context, config: str) -> None:
    """A chunk option that a tables config decides, given with a config: exit 2 naming the
    option and the config key to use (it would otherwise be ignored without a word)."""
    from graphprep.formats import FormatError
    for param, (flag, instead) in CONFIG_DECIDES.items():
        if _given(ctx, param):
            raise FormatError(f"the tables config decides this, not {flag}: use {instead} "
                              f"(docs/tables-config.md)", file=config, field=flag)


def _given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was set by the user (command line or environment)."""
    from click.core import ParameterSource
    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT,
                                                  ParameterSource.DEFAULT_MAP)


@command()
@click.argument("chunked", type=click.Path(), callback=local_path)
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


def _worker_bytes(cluster: ClusterOptions) -> int | None:
    """A worker's memory limit without starting one: --memory-limit, else (auto) this
    machine's memory split among --workers, as the embedded cluster splits it."""
    if cluster.memory_limit != "auto":
        from dask.utils import parse_bytes
        return parse_bytes(cluster.memory_limit)
    import psutil
    return psutil.virtual_memory().total // max(cluster.workers, 1)


def _on(cluster: ClusterOptions) -> dict:
    """The API's cluster keywords for the CLI's ``ClusterOptions``."""
    return dict(scheduler=cluster.scheduler, workers=cluster.workers,
                memory_limit=cluster.memory_limit, progress=cluster.progress,
                security=cluster.security)


def _summary(graph) -> str:
    lines = [f"{graph.root}: graph {graph.graph_name!r}"]
    for t in graph.node_types:
        data = ", ".join(graph.node_data.get(t, {})) or "no data"
        lines.append(f"  nodes {t}: {graph.num_nodes[t]:,} in {len(graph.node_chunks[t])} "
                     f"chunks ({data})")
    for et in graph.edge_types:
        lines.append(f"  edges {et}: {graph.num_edges[et]:,} in {len(graph.edge_chunks[et])} chunks")
    return "\n".join(lines)


def _parse_pairs(values, what: str, *, integer: bool) -> dict:
    """``KEY=VALUE`` options (a bare VALUE means the only node type: key "")."""
    out = {}
    for v in values:
        key, sep, value = v.rpartition("=")
        if integer:
            try:
                value = int(value)
            except ValueError:
                raise click.BadParameter(f"{v!r}: expected [TYPE=]N", param_hint=what) from None
        elif not sep:
            raise click.BadParameter(f"{v!r}: expected NAME=FILE", param_hint=what)
        else:
            value = local_path(None, None, value)
        out[key] = value
    return out


@command()
@click.argument("input", type=click.Path(exists=True), callback=local_path)
@click.argument("out", type=click.Path(file_okay=False), callback=local_path)
@click.option("--from", "kind", type=click.Choice(["auto", "tables", "csv", "parquet", "npy",
                                                     "ogb", "planetoid", "pyg", "dgl"]),
              default="auto", help="Input kind; auto looks at what INPUT holds.")
@chunk_size_option
@click.option("--add-reverse-edges", is_flag=True,
              help="Add every edge reversed: into the same type for a homogeneous graph, as "
                   "dst:rev-<rel>:src types for a heterogeneous one. A self loop is its own "
                   "reverse: it stays single (the count is logged). A tables config says it "
                   "per edge table instead (reverse: true).")
@click.option("--dedupe", is_flag=True,
              help="Keep one copy of each (src, dst) per edge type (out-of-core bucket shuffle).")
@click.option("--drop-self-loops", is_flag=True,
              help="Drop edges u->u (types whose source and destination types are equal).")
@click.option("--delimiter", default=None,
              help="CSV delimiter. Default: tab for .tsv, comma otherwise.")
@click.option("--header/--no-header", default=None,
              help="Whether edge CSVs start with a header line. Default: detect.")
@click.option("--src-col", default=None, help="Source column (name or 0-based index). "
              "Default: 'src' if the header has it, else column 0.")
@click.option("--dst-col", default=None, help="Destination column. Default: 'dst' or column 1.")
@click.option("--num-nodes", multiple=True, metavar="[TYPE=]N",
              help="Node count (per type). Default: rows of node data, else largest ID + 1.")
@click.option("--node-data", multiple=True, metavar="[TYPE/]NAME=FILE",
              help="Node data file (.npy, .parquet or headerless .csv) for edge-list inputs, "
                   "e.g. feat=x.npy, label=y.csv, train_mask=train.npy.")
@click.option("--name", default=None,
              help="Graph name (default: from INPUT). Planetoid: which dataset (cora, ...).")
@click.option("--split-name", default=None,
              help="OGB: the folder under split/ to read masks from (default: the only one).")
@click.option("--map-keys", is_flag=True,
              help="Edge lists: treat integer endpoints as keys and number them 0..N-1 "
                   "(sparse IDs such as 2^62 cost no rows). String endpoints are always "
                   "mapped. The maps are saved under OUT/keys/. Default: integers are IDs.")
@click.option("--dangling", type=click.Choice(["error", "drop", "add"]), default="error",
              show_default=True,
              help="An edge whose key is not in its node type's table: stop naming file, row "
                   "and key; drop the edge; or add the key as a node (counts are logged).")
@nan_option
@overwrite_option
@cluster_options
@click.pass_context
def chunk(ctx, input, out, kind, chunk_size, add_reverse_edges, dedupe, drop_self_loops,
          delimiter, header, src_col, dst_col, num_nodes, node_data, name, split_name, map_keys,
          dangling, nan_policy, overwrite, cluster: ClusterOptions):
    """Convert raw graph INPUT into the chunked graph format at OUT.

    \b
    INPUT kinds:
      tables       a YAML/JSON config naming node and edge tables (CSV/Parquet files,
                   folders, globs or URLs) with key, feature, categorical, label and
                   split columns; keys of any type are mapped out of core
                   (docs/tables.md, examples/tables/)
      csv/parquet  an edge-list file (src,dst per row), or a folder with
                   edges/<src>__<rel>__<dst>.<ext> and nodes/<ntype>/<name>.<ext>;
                   endpoints that are strings (or, with --map-keys, any integers) are
                   keys: numbered out of core, the maps saved under OUT/keys/
      npy          .npz or folder of .npy: edge_index (or src, dst), x/feat, y/label, masks
      ogb          OGB node-property dataset folder (raw/*.csv.gz, split/<name>/)
      planetoid    folder with ind.<name>.* (Cora, CiteSeer, PubMed)
      pyg          torch.save'd torch_geometric Data / HeteroData (.pt)
      dgl          DGL's chunked graph format (metadata.json), validated and re-chunked
    The result is validated before it is moved into place; on error nothing is written.
    """
    from graphprep.pipeline.tables.config import is_config
    if kind == "tables" or (kind == "auto" and is_config(input)):
        _refuse_config_overrides(ctx, input)
    result = api.chunk(
        input, out, kind=kind, chunk_size=chunk_size, add_reverse_edges=add_reverse_edges,
        dedupe=dedupe, drop_self_loops=drop_self_loops,
        delimiter=delimiter.encode().decode("unicode_escape") if delimiter else None,
        header=header, src_col=src_col, dst_col=dst_col,
        num_nodes=_parse_pairs(num_nodes, "--num-nodes", integer=True),
        node_data=_parse_pairs(node_data, "--node-data", integer=False), name=name,
        split_name=split_name, map_keys=map_keys, dangling=dangling, nan_policy=nan_policy,
        overwrite=overwrite, **_on(cluster))
    if not result.reused:
        click.echo(_summary(result.graph))


@command()
@click.argument("chunked", type=click.Path(exists=True, file_okay=False), callback=local_path)
@click.argument("out", type=click.Path(file_okay=False), required=False, callback=local_path)
@click.option("-p", "--num-parts", type=click.IntRange(1), default=None,
              help="Number of partitions (required unless --stats).")
@click.option("--method",
              type=click.Choice(["random", "metis", "multilevel", "kaminpar", "auto"]),
              default="random",
              help="random: seeded, exactly balanced per node type, chunk by chunk. metis: "
                   "pymetis on the whole graph in one task (holds its CSR: see docs). "
                   "multilevel: coarsen range by range, METIS on the coarse graph, Jet "
                   "refinement back up (never holds the graph). kaminpar: KaMinPar (pip "
                   "install kaminpar) on the whole graph in one task like metis, given one "
                   "weight combining the --balance constraints, then each constraint enforced "
                   "as after METIS. auto (use it for big "
                   "graphs): metis when its estimated peak (~270 B per edge, plus a little per "
                   "node for each --balance constraint) fits in 60% of the smallest worker "
                   "memory limit, else multilevel; the choice is logged and stored in the "
                   "statistics. metis, multilevel, kaminpar and auto balance edges and "
                   "training nodes by default (--balance).")
@click.option("--coarse-edges", type=click.IntRange(1), default=None, metavar="EDGES",
              help="multilevel: coarsen until at most EDGES edges are left. Default: derived "
                   "from memory (a quarter of what --method metis would need, at most 10^6 so "
                   "the worker peak stays flat, within half the worker memory limit); logged.")
@click.option("--balance", default=None, metavar="ntypes,train,edges|ntypes+edges",
              help="metis/multilevel/kaminpar/auto: what each part gets an even share of, "
                   "within --imbalance (METIS multi-constraint vertex weights). ntypes: nodes (of "
                   "each type); edges: edges (a part keeps every edge with its destination, "
                   "so a node weighs its in-degree); train: train_mask nodes. Default: "
                   "ntypes,edges, plus train where the graph has training nodes, because a "
                   "part's work in sampling and training is its edges and its training "
                   "seeds, not its node count: on a power-law graph, nodes alone leave one "
                   "part most of the edges. --balance ntypes balances nodes only (the "
                   "default before). Keys joined by '+' are one combined weight, each "
                   "node's share of each key's total summed (ntypes+edges: the one weight "
                   "KaMinPar balances): a part may hold more of one key where it holds less "
                   "of another, for a lower cut (R-MAT at 10^8 edges: 14% fewer cut edges "
                   "than ntypes,train,edges). random takes none: it deals out nodes evenly.")
@click.option("--objective", type=click.Choice(["cut", "vol"]), default="cut",
              help="METIS objective: edge cut or communication volume.")
@click.option("--imbalance", type=FiniteFloat(0.001, 1.0), default=0.03,
              help="metis, multilevel, kaminpar: allowed imbalance per constraint (0.03 = "
                   "parts up to 3% over even).")
@click.option("--seed", type=int, default=0,
              help="Random seed (random, METIS, multilevel and KaMinPar).")
@click.option("--stats", "stats_of", type=click.Path(exists=True, file_okay=False), default=None,
              metavar="ASSIGNMENT",
              callback=local_path,
              help="Only compute the statistics of an existing assignment (graphprep's or "
                   "DGL's <ntype>.txt) on CHUNKED and store them in its partition_meta.json.")
@click.option("--dgl-compat", is_flag=True,
              help="Also write DGL's <ntype>.txt assignment files, and an algo_name DGL's "
                   "tools accept ('metis' for multilevel; the method is kept in 'method').")
@dry_run_option
@overwrite_option
@cluster_options
def partition(chunked, out, num_parts, method, coarse_edges, balance, objective, imbalance, seed,
              stats_of, dgl_compat, dry_run, overwrite, cluster: ClusterOptions):
    """Partition the chunked graph CHUNKED into the assignment folder OUT: a partition id per
    node of every type, plus statistics (edge cut, per-part nodes/edges/splits/halo, imbalance)
    printed as a table and stored in OUT/partition_meta.json.

    Whatever the method, a part holding more than 1.5x the mean of the edges or of the
    training nodes is warned about (at default verbosity, and in the statistics that prep
    inspect and prep report show), with the option that fixes it.
    """
    from graphprep.pipeline.partition import format_table, run_stats

    if stats_of:
        click.echo(format_table(run_stats(chunked, stats_of, cluster)))
        return
    if out is None or num_parts is None:
        raise click.UsageError("OUT and --num-parts are required (unless --stats)")
    if dry_run:
        from graphprep.pipeline.partition.estimate import estimate_partition
        click.echo(estimate_partition(
            load_chunked_graph(chunked), method, num_parts,
            api.balance_constraints(balance, method), coarse_edges,
            _worker_bytes(cluster)).describe())
        return
    result = api.partition(chunked, out, num_parts=num_parts, method=method,
                           coarse_edges=coarse_edges, balance=balance, objective=objective,
                           imbalance=imbalance, seed=seed, dgl_compat=dgl_compat,
                           overwrite=overwrite, **_on(cluster))
    if not result.reused:
        click.echo(f"{out}: {result.method}, {result.num_parts} parts")
        click.echo(format_table(result.stats))


@command()
@click.argument("chunked", type=click.Path(exists=True, file_okay=False), callback=local_path)
@click.argument("assignment", type=click.Path(exists=True, file_okay=False), callback=local_path)
@click.argument("out", callback=local_path)
@click.option("--machines", default="", metavar="NAME,...",
              help="Deliver part p to the Dask worker named NAME[p mod M], which builds and "
                   "writes it under OUT/NAME/ on its own machine. The embedded cluster starts "
                   "one worker per name (simulated machines). Default: all parts in OUT.")
@click.option("--range-size", type=click.IntRange(1), default=1 << 17, metavar="NODES",
              help="Nodes per relabel task and per destination sub-range when building a "
                   "part: a task holds one range of rows or the in-edges of one sub-range.")
@nan_option
@dry_run_option
@overwrite_option
@cluster_options
def dispatch(chunked, assignment, out, machines, range_size, nan_policy, dry_run, overwrite,
             cluster: ClusterOptions):
    """Build the partitioned graph at OUT (a folder, or an fsspec URL such as s3://bucket/g)
    from the chunked graph CHUNKED and the partition ASSIGNMENT: new contiguous IDs per part,
    CSC per edge type, 1-hop halo, features, labels, masks, original-ID maps, graph.json.

    Out of core: edges are bucketed by owner part on disk and a part is built one destination
    sub-range at a time; no task holds all edges. Built in .OUT.partial beside OUT and swapped
    in when complete (on each machine, for its parts). Resumable: rerun the same command after
    a kill to finish the job with the same bytes; it says how many tasks were done already.
    """
    if dry_run:
        from graphprep.formats.assignment import load_assignment
        from graphprep.dispatch.estimate import estimate_dispatch
        click.echo(estimate_dispatch(load_chunked_graph(chunked),
                                     load_assignment(assignment).meta.num_parts,
                                     range_size).describe())
        return
    result = api.dispatch(chunked, assignment, out,
                          machines=tuple(m for m in machines.split(",") if m),
                          range_size=range_size, nan_policy=nan_policy, overwrite=overwrite,
                          **_on(cluster))
    graph = result.graph
    if not result.reused:
        click.echo(f"{out}: {graph.num_parts} parts of graph {graph.graph_name!r}")
        for p, info in enumerate(graph.parts):
            nodes = ", ".join(f"{t} {r[p][1] - r[p][0]:,}" for t, r in graph.node_map.items())
            edges = sum(r[p][1] - r[p][0] for r in graph.edge_map.values())
            where = f" on {info.machine}" if info.machine else ""
            click.echo(f"  part {p}{where}: nodes {nodes}; edges {edges:,} -> {info.path}")


class VerifyFailed(click.ClickException):
    exit_code = 1


@command()
@click.argument("chunked", type=click.Path(exists=True, file_okay=False), callback=local_path)
@click.argument("partitioned", callback=local_path)
@nan_option
@click.option("--tables", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="CONFIG", help="Also check CHUNKED against the tables it was made from "
              "(the CONFIG given to `prep chunk`), row by row by key, both ways: every node "
              "row's fields and every edge's endpoints and fields, and no graph node or edge "
              "that no row holds; as the graph was chunked (reversed edges, --dangling, "
              "--drop-self-loops: read from its metadata.json). Default: no tables check.")
@cluster_options
def verify(chunked, partitioned, nan_policy, tables, cluster: ClusterOptions):
    """Check that the partitioned graph PARTITIONED (its folder or graph.json) holds exactly the
    chunked graph CHUNKED: every edge once with its original endpoints and edge data, every node
    once with its features, labels and masks, consistent partition book, exact halo lists.
    Streaming, chunk by chunk. Exit 1 naming the first mismatch (part, type, original ID; with
    --tables, the table file and key).
    """
    from graphprep.dispatch.verify import VerifyError

    try:
        counts = api.verify(chunked, partitioned, nan_policy=nan_policy, tables=tables,
                            **_on(cluster))
    except VerifyError as err:
        raise VerifyFailed(f"verify failed: {err}") from None
    if counts.tables is not None:
        click.echo(f"tables: {counts.tables['rows']:,} node rows and "
                   f"{counts.tables['edges']:,} edges match the chunked graph by key")
    click.echo(f"verified: {counts.edges:,} edges and {counts.nodes:,} nodes match the input")


@command("split-edges")
@click.argument("chunked", type=click.Path(exists=True, file_okay=False), callback=local_path)
@click.argument("out", type=click.Path(file_okay=False), callback=local_path)
@click.option("--etype", required=True, metavar="SRC:REL:DST",
              help="Edge type to split (the only type of a homogeneous graph: _N:_E:_N).")
@click.option("--val", type=FiniteFloat(0, 1, max_open=True), default=0.05,
              help="Fraction of the type's edges held out for validation (--val + --test < 1).")
@click.option("--test", type=FiniteFloat(0, 1, max_open=True), default=0.1,
              help="Fraction of the type's edges held out for testing.")
@click.option("--twin", multiple=True, metavar="DST:REL:SRC",
              help="Edge type holding the reversed edges, split with them. Default: the type "
                   "named rev-REL (or rev_REL) between the same node types, if any.")
@click.option("--seed", type=int, default=0, help="Seed of the split.")
@overwrite_option
@cluster_options
def split_edges(chunked, out, etype, val, test, twin, seed, overwrite, cluster: ClusterOptions):
    """Hold out validation and test edges of one edge type of CHUNKED for link prediction;
    write the graph with edge data train_mask/val_mask/test_mask to OUT.

    Each edge's split comes from a keyed hash of its undirected endpoint pair: deterministic for
    any number of workers and any chunking, duplicates share a split, and both directions of an
    edge (and its twin in the reverse type) are held out together. Input files are hard-linked
    into OUT (copied across file systems); one task per edge chunk writes its masks.
    """
    if val + test >= 1:
        raise click.BadParameter(f"--val {val} + --test {test} = {val + test:g}: must be below 1 "
                                 "(something must be left to train on)", param_hint="--val")
    result = api.split_edges(chunked, out, etype=etype, val=val, test=test, twin=tuple(twin),
                             seed=seed, overwrite=overwrite, **_on(cluster))
    if not result.reused:
        click.echo(_summary(result.graph))
        for et, (tr, va, te) in result.split_counts.items():
            click.echo(f"  split {et}: train {tr:,}, val {va:,}, test {te:,}" +
                       ("" if tr + va + te else " (0 edges: no masks written)"))


@command("inspect")
@click.argument("path", type=click.Path(), callback=local_path)
@click.option("--json", "as_json", is_flag=True, default=False,
              help="Print one JSON object instead of the text summary: the same content with "
                   "stable keys and \"kind\": chunked, assignment, partitioned or metrics "
                   "(byte counts as integers, NaN as null). Default: text with aligned tables.")
def inspect_cmd(path, as_json):
    """Say what PATH holds, reading metadata only (no Dask cluster, no data loaded).

    \b
    PATH is one of graphprep's outputs:
      chunked graph      folder with metadata.json: node/edge types with counts, chunks,
                         data fields (dtype, shape from headers), size per section, manifest
      assignment         folder with partition_meta.json: method, parts, edge cut,
                         imbalance, per-part nodes/edges/train/halo, multilevel levels
      partitioned graph  graph.json or its folder: types, per-part owned/halo nodes, edges,
                         feature files, bytes, dispatch id, integrity manifest, part.json
      metrics            a trainer --metrics-out JSON: task, best epoch, best and final
                         metrics, per-rank time breakdown
    Counts come from the metadata, dtypes and shapes from .npy headers and Parquet footers,
    sizes from the file system: instant at any graph size. Anything else: exit 2 naming PATH.
    """
    from graphprep.pipeline.inspect import describe, render_json, render_text

    info = describe(path)
    click.echo(render_json(info) if as_json else render_text(info))


@command()
@click.argument("partitioned", type=click.Path(exists=True, file_okay=False),
                callback=local_path)
@click.argument("out", type=click.Path(file_okay=False), callback=local_path)
@click.option("--to", "to", type=click.Choice(["pyg", "dgl", "dgl-chunked"]), required=True,
              help="Target layout. pyg: torch_geometric.distributed.Partitioner's "
                   "(OUT/<name>-partitions, loaded by LocalGraphStore/LocalFeatureStore"
                   ".from_partition), with labels in OUT/<name>-label/label.pt and each "
                   "part's train/val/test nodes in OUT/<name>-<split>-partitions/"
                   "partition<i>.pt, as PyG's distributed examples read them. Needs torch "
                   "on the workers (not torch_geometric). dgl: dgl.distributed."
                   "partition_graph's (OUT/<name>.json, read by dgl.distributed."
                   "load_partition; OUT/part<i>/graph.dgl, node_feat.dgl, edge_feat.dgl, and "
                   "orig_nids.dgl/orig_eids.dgl mapping inner nodes/edges to original IDs); "
                   "DGL renumbers nodes and edges into one ID space per part and type "
                   "(FORMATS.md). Needs DGL here and on the workers: dgl 1.1.3 works with "
                   "torch 2.13 (pip install 'dgl==1.1.3' packaging; not setuptools<70, which "
                   "torch 2.13 refuses). dgl-chunked: takes a CHUNKED graph (prep synth/chunk "
                   "output) instead of a partitioned one and writes DGL's chunked graph format "
                   "(OUT/metadata.json; edges as space-delimited CSV, data as .npy; the same "
                   "chunks), the input of DGL's tools/partition_algo and tools/dispatch_data.py; "
                   "one task per chunk, no DGL needed.")
@overwrite_option
@cluster_options
def export(partitioned, out, to, overwrite, cluster: ClusterOptions):
    """Export PARTITIONED (the output of `prep dispatch`) to OUT in a peer library's
    partition layout, one task per part (--to dgl-chunked: a chunked graph to DGL's chunked
    format, one task per chunk). Parts stay as they are (every edge with the owner of
    its destination); IDs are the original ones. A task holds one part's arrays; per-ID maps
    (part of every node and edge, labels) are filled in memory-mapped scratch files."""
    result = api.export(partitioned, out, to=to, overwrite=overwrite, **_on(cluster))
    if not result.reused:
        click.echo(f"{out}: {to} layout ({result.root})")


@command()
@click.argument("paths", nargs=-1, required=True, callback=lambda c, p, v: tuple(
    local_path(c, p, x) for x in v))
@click.option("--out", default="report.html", show_default=True, type=click.Path(),
              help="The HTML file to write (self-contained: plots are inlined PNGs). Never one "
                   "of PATHS or inside one; an existing file that is not a prep report is "
                   "refused without --overwrite. Written beside and renamed into place.")
@click.option("--overwrite", is_flag=True,
              help="Replace --out even when it is not a report written by prep report (a "
                   "report is replaced without it).")
@cluster_options
def report(paths, out, overwrite, cluster: ClusterOptions):
    """One HTML page with tables and plots about each of PATHS: a partitioned graph (in-degree
    distribution per edge type, per-part nodes/edges/train/halo bars, edge-cut matrix between
    parts; one task per part), a partition assignment (per-part bars from its statistics), a
    trainer metrics file (loss and accuracy/AUC curves, time per phase per epoch) or a chunked
    graph (its tables). Needs matplotlib."""
    from graphprep.pipeline.report import run_report

    click.echo(f"wrote {run_report(list(paths), out, cluster, overwrite)}")
