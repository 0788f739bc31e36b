"""``python -m graphprep.trainer``: distributed GraphSAGE node classification or link prediction on a
partitioned graph (``python -m graphprep.trainer embed``: inference, in ``graphprep.trainer.tasks.embed``).

Without ``RANK`` in the environment it launches one rank per part (``--ranks-per-part`` R: R per
part) on this machine; under ``torchrun`` (or any launcher setting ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``) it runs as that rank.

Before anything starts, the options, ``--target``, the checkpoint folder (writable) and a
``--resume`` (same graph, compatible options) are checked: exit 2 with a one-line message. Each
rank then checks its part (``graphprep.formats.part_checks``) before importing torch: a damaged part
exits 1 naming rank, part and file.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
import warnings

import click

from graphprep.pipeline.core.cli_types import OneLineErrors as OneLineErrorsMixin
from graphprep.pipeline.core.console import setup_logging
from graphprep.formats.errors import FormatError
from graphprep.formats.partitioned import load_partitioned

from graphprep.trainer.config import (FAIL_MODES, FEATURELESS, SCORERS, TASKS, TrainConfig, check_edge_feat,
                     task_target)
from graphprep.trainer.runtime.netif import IFACE_HELP, configure_rank

log = logging.getLogger("graphprep.trainer")

# Past 8 intra-op threads a rank's small GNN batches stop gaining, and they lose badly while the
# loader thread runs its own torch ops beside them: one rank with 16 threads on a 16-core
# machine took 4.7x the forward/backward time of 8 (RESULTS.md, the lent GPU machine's CPU).
MAX_DEFAULT_THREADS = 8


def default_threads(cores: int, ranks_here: int) -> int:
    """torch intra-op threads for one of ``ranks_here`` ranks on a host with ``cores`` cores:
    an equal share of the cores, at least 1 and at most ``MAX_DEFAULT_THREADS``."""
    return max(1, min(MAX_DEFAULT_THREADS, cores // ranks_here))


def _ints(ctx, param, value):
    if value is None:
        return None
    try:
        return [int(v) for v in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: comma-separated integers, e.g. 15,10,5") from None


def _model_args(ctx, param, value):
    from graphprep.trainer.models.registry import ModelError, parse_model_args
    try:
        return parse_model_args(value)
    except ModelError as err:
        # the message names the option and the value; click names the option already (the
        # value may hold ": " itself, so strip the exact prefix)
        raise click.BadParameter(str(err).removeprefix("--model-args ")) from None


class OneLineErrors(OneLineErrorsMixin, click.Command):
    """Usage errors as one line ``Error: ...`` (exit 2), without click's usage block."""


class BadInput(click.ClickException):
    """A path or file the command cannot use (graph.json, checkpoint, an output): exit 2."""

    exit_code = 2


@click.command(cls=OneLineErrors,
               context_settings={"help_option_names": ["-h", "--help"],
                                 "show_default": True, "max_content_width": 100})
@click.option("--graph", required=True, type=click.Path(),
              help="graph.json written by `prep dispatch` (or its folder).")
@click.option("--task", default="node", type=click.Choice(TASKS),
              help="node: classify the nodes of --target. link: predict the edges of "
                   "--target-etype (needs `prep split-edges` before dispatch).")
@click.option("--fanouts", default="10,10", callback=_ints,
              help="Neighbors sampled per hop, from the seeds outward; -1 = all. The number "
                   "of values is the number of model layers (spec.num_layers).")
@click.option("--eval-fanouts", default=None, callback=_ints,
              help="Fanouts for validation/test [default: --fanouts].")
@click.option("--batch-size", default=512, help="Seed nodes per training batch, per rank.")
@click.option("--eval-batch-size", default=2048, help="Seed nodes per evaluation batch.")
@click.option("--epochs", default=10, help="Epochs to train (a resumed run stops here too).")
@click.option("--lr", default=0.005, help="Adam learning rate.")
@click.option("--weight-decay", default=5e-4, help="Adam weight decay.")
@click.option("--hidden", default=128,
              help="Hidden width of the model's layers (gat: all heads together).")
@click.option("--dropout", default=0.5, help="Dropout before every layer.")
@click.option("--device", default="cpu", type=click.Choice(["cpu", "cuda"]),
              help="Where the model runs (cuda: GPU LOCAL_RANK mod the GPU count; DDP uses "
                   "nccl, or gloo on CPU and where ranks share a GPU).")
@click.option("--placement", default="cpu", type=click.Choice(["cpu", "pinned", "cuda"]),
              help="Where the part's graph structure lives and is sampled: cpu (memory-mapped), "
                   "pinned (page-locked host memory, sampled on the CPU), cuda (sampling on the "
                   "GPU).")
@click.option("--ranks-per-part", default=1, help="Ranks serving each part; they split its "
                                                  "seeds. World size = parts x this.")
@click.option("--target", default=None,
              help="Node type to classify [default: the one type with label and train_mask].")
@click.option("--target-etype", default=None,
              help="Link task: edge type to predict, src:rel:dst or a unique rel [default: "
                   "the one type with train/val/test edge masks].")
@click.option("--model", default="sage", show_default=True,
              help="The model: sage (GraphSAGE-mean), gat (multi-head attention), rgcn "
                   "(per-relation weights, heterogeneous graphs), or your own: "
                   "PKG.MODULE:FACTORY or path/to/file.py:FACTORY, a function build(spec: "
                   "graphprep.trainer.ModelSpec, **model_args) -> torch.nn.Module whose forward(batch: "
                   "graphprep.trainer.Batch) returns logits (node task) or embeddings (link task); see "
                   "'Models' above and docs/models.md. A module must import on every rank "
                   "(e.g. on PYTHONPATH); a file is recorded by its absolute path. Examples, "
                   "importable anywhere: graphprep.trainer.examples.pyg_gcn:build, "
                   "graphprep.trainer.examples.pyg_gat:build, graphprep.trainer.examples.sparse_sage:build.")
@click.option("--model-args", default=None, callback=_model_args,
              help="JSON object of keyword arguments for the model's factory, e.g. "
                   "'{\"heads\": 8}' [default: none].")
@click.option("--edge-feat", default=None,
              help="Edge data array given to the model as layer.edge_attr (the sampled "
                   "edges' rows, returned with the sample: no extra request); gat and rgcn "
                   "use it [default: none].")
@click.option("--scorer", default="mlp", type=click.Choice(SCORERS),
              help="Link task: edge score from the two end embeddings: dot product, or an MLP "
                   "on their elementwise product.")
@click.option("--neg-ratio", default=1, help="Link task: uniform negative edges per training "
                                             "edge (destinations drawn over the whole type).")
@click.option("--corrupt-src", is_flag=True,
              help="Link task: corrupt the source of every other negative instead of the "
                   "destination.")
@click.option("--eval-negatives", default=100,
              help="Link task: fixed negatives ranked against each validation/test edge for "
                   "MRR and Hits@20/50/100 (the first also serves the AUC).")
@click.option("--degree-input/--no-degree-input", default=None,
              help="Append log(1 + in-degree) to every node's input features (degrees of "
                   "the graph messages run on) [default: on for --task link, off for node].")
@click.option("--featureless", default="embed", type=click.Choice(FEATURELESS),
              help="Input of a node type without `feat`: embed = a learnable row per node "
                   "(--embedding-dim wide), held by the node's owner part (12 B per value "
                   "with Adam's moments) and trained with sparse Adam, asynchronously as "
                   "DistDGL's DistEmbedding (with several ranks a run repeats only up to the "
                   "interleaving of updates), saved with the checkpoints; constant = the same "
                   "value 1.0 for every node.")
@click.option("--embedding-dim", default=64, type=click.IntRange(1),
              help="Width of the learnable rows of --featureless embed.")
@click.option("--embedding-lr", default=0.01, type=click.FloatRange(0, min_open=True),
              help="Learning rate of the sparse Adam that updates those rows (only the rows a "
                   "batch touched; the model's weights use --lr).")
@click.option("--seed", default=0, help="Seed of model init, shuffling, sampling and dropout: "
                                        "the same seed gives the same run.")
@click.option("--rpc-timeout", default=30.0, help="Seconds before an RPC or collective to a "
                                                  "silent rank fails (and ends the job).")
@click.option("--iface", default=None, help=IFACE_HELP)
@click.option("--prefetch", default=2, help="Batches sampled ahead by the background loader.")
@click.option("--cache-mb", default=64.0,
              help="Per rank: cache the input features of the halo nodes its part references "
                   "most, fetched once at start, up to this many MB (0 = off).")
@click.option("--checkpoint-dir", default=None, type=click.Path(),
              help="Folder for the per-epoch checkpoint.pt and best.pt (nothing else in it is "
                   "touched; the run logs where) [default: checkpoints/<graph name>]. A folder "
                   "that is neither empty nor a checkpoint folder, or holds another run's "
                   "checkpoint (other graph, model or options), is refused without "
                   "--overwrite or --resume.")
@click.option("--resume", is_flag=True,
              help="Continue from the checkpoint in --checkpoint-dir (refused when it was made "
                   "on another graph or with other model/optimizer options).")
@click.option("--verify-data", is_flag=True,
              help="Also check the full content hash of every file of each rank's part "
                   "against graph.json (reads the whole part; sizes, structure and sampled "
                   "hashes are always checked).")
@click.option("--metrics-out", default=None, type=click.Path(),
              help="Write per-epoch metrics (accuracy, time breakdown, RPC bytes) as JSON here "
                   "(rewritten after each epoch through a partial file renamed into place).")
@click.option("--overwrite", is_flag=True,
              help="Let --checkpoint-dir and --metrics-out replace what is not this trainer's "
                   "own earlier output (refused without it). Never allowed when they are, hold "
                   "or lie inside the graph's or a part's folder.")
@click.option("--threads", default=0, help="torch threads per rank; 0 = this machine's cores "
                                           "divided by its ranks, at most "
                                           f"{MAX_DEFAULT_THREADS}.")
@click.option("--progress/--no-progress", default=True, help="Progress bar on rank 0 (only when stderr is a terminal and TQDM_DISABLE is "
                   "unset).")
@click.option("-v", "--verbose", is_flag=True, help="Log every rank, not only rank 0.")
@click.option("--fail-rank", default=None, type=int, hidden=True)
@click.option("--fail-mode", default="raise", type=click.Choice(FAIL_MODES), hidden=True)
@click.option("--fail-epoch", default=0, hidden=True)
def main(graph, threads, verbose, iface, **options):
    """Train a GNN on the parts made by `prep dispatch`: node classification or link
    prediction; DDP for gradients, torch.distributed.rpc for remote sampling and features.
    The model is a built-in (--model sage|gat|rgcn) or your own torch module.

    \b
    Examples:
      python -m graphprep.trainer --graph parts/graph.json --fanouts 15,10,5 --epochs 20
      python -m graphprep.trainer --graph parts/graph.json --model gat --model-args '{"heads": 8}'
      python -m graphprep.trainer --graph parts/graph.json --task link --scorer mlp --epochs 20
      python -m graphprep.trainer --graph parts/graph.json --model my_models:build
      python -m graphprep.trainer --graph parts/graph.json --model path/to/my_model.py:build

    \b
    Models (--model PKG.MODULE:FACTORY or path/to/file.py:FACTORY):
      build(spec: graphprep.trainer.ModelSpec, **model_args) -> torch.nn.Module, imported on every
      rank. spec: in_dims (per node type), out_dim (classes, or --hidden for links), hidden,
      num_layers (= len(--fanouts)), dropout, node_types, edge_types ((src, rel, dst)),
      metadata (PyG's), edge_dims (--edge-feat), target, task.
      module(batch) gets a graphprep.trainer.Batch (PyG field names):
        batch.layers[i]: input layer first; edge_index [2, E] (row 0 source, row 1
          destination position), num_src, num_dst (destinations = the sources' prefix),
          edge_attr; so h = conv((h, h[:layer.num_dst]), layer.edge_index)
        batch.x, batch.n_id, batch.orig_id, batch.batch_size (seeds = first rows), batch.y
        batch.edge_index, num_sampled_nodes, num_sampled_edges: the whole subgraph in
          NeighborLoader's layout: model(batch.x, batch.edge_index)[:batch.batch_size]
        heterogeneous graphs: every field's *_dict form; batch.to_pyg() -> Data/HeteroData
      Node task: return logits, seeds' rows first ([>= batch_size, classes]); an optional
      module.loss(out, batch) replaces cross-entropy. Link task: return node embeddings
      (--hidden wide, a dict per type on heterogeneous graphs); the trainer scores pairs.
      An optional module.layer(i, layer, h) makes `trainer embed` exact layer-wise.
      sparse_input = True on the module: a sparse (CSR) feature arrives as
      graphprep.trainer.SparseRows (first layer: graphprep.trainer.sparse_matmul), else densified per batch.
      find_unused_parameters = True/False on the module overrides DDP's flag (default:
      decided on the first batch).
    """
    rank, meta = start_command(graph, verbose)
    cfg = TrainConfig(graph=graph, **options)
    if cfg.checkpoint_dir is None:
        cfg.checkpoint_dir = os.path.join("checkpoints", meta.graph_name)
    world = meta.num_parts * cfg.ranks_per_part
    try:
        from graphprep.trainer.models.registry import canonical
        cfg.model = canonical(cfg.model)     # a model file by its absolute path
        cfg.check(meta.num_parts, int(os.environ.get("WORLD_SIZE", world)))
        target = task_target(meta, cfg)
        check_edge_feat(meta, cfg.edge_feat)
        _check_outputs(cfg, meta, target, rank)
        _check_model(cfg, meta, rank)
    except FormatError as err:
        raise BadInput(str(err)) from None
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    if rank is None:
        from graphprep.trainer.runtime.launch import launch_local
        from graphprep.trainer.runtime.outputs import remove_partials
        log.info("launching %d ranks: %d parts x %d", world, meta.num_parts, cfg.ranks_per_part)
        code = launch_local(sys.argv[1:], world)
        remove_partials(cfg)
        sys.exit(code)
    _run_as_rank(cfg, meta, int(rank), threads, iface, verbose)
    # a rank whose work is done ends here: a thread the model's module left running (not a
    # daemon) would keep it, and so the launcher, alive forever
    end_process(0)


def end_process(code: int) -> None:
    """Flush the output and end this process with ``code`` at once, without waiting for
    threads (a user's module may have started some that never end) or atexit hooks (RPC and
    the process group are shut down already)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def start_command(graph: str, verbose: bool):
    """``(RANK or None, graph.json loaded)`` for a trainer command: logging set up for the
    launcher or this rank; an unreadable graph.json is a one-line usage error."""
    rank = os.environ.get("RANK")
    _setup_logging(rank, verbose)
    try:
        return rank, load_partitioned(graph)
    except FormatError as err:
        raise BadInput(f"--graph {err}{_graph_hint(graph, err)}") from None


def _graph_hint(graph: str, err: FormatError) -> str:
    """What the user gave instead of a partitioned graph, or what was expected when the file
    is missing or not JSON (a graph.json with bad fields is named by ``err`` itself)."""
    from graphprep.formats.assignment import META as ASSIGNMENT_META
    from graphprep.formats.schema import METADATA
    folder = graph if os.path.isdir(graph) else os.path.dirname(graph)
    if os.path.basename(graph) == METADATA or os.path.isfile(os.path.join(folder, METADATA)):
        return (" (this is a chunked graph, the output of prep synth/chunk: partition and "
                "dispatch it, then pass the graph.json that prep dispatch writes)")
    if os.path.isfile(os.path.join(folder, ASSIGNMENT_META)):
        return (" (this is a partition assignment: prep dispatch it with its chunked graph, "
                "then pass the graph.json that prep dispatch writes)")
    if err.field is None:
        return " (expected graph.json written by prep dispatch, or its folder)"
    return ""


def _check_outputs(cfg, meta, target: str, rank: str | None) -> None:
    """Before any epoch: what rank 0 writes passes the output rule (graphprep.trainer.runtime.outputs) and the
    checkpoint folder is writable; a --resume matches this graph and these options. Ranks of
    our launcher skip what it checked already."""
    from graphprep.trainer.runtime.launch import LAUNCHER_ENV
    if rank is not None and LAUNCHER_ENV in os.environ:
        return
    from graphprep.trainer.runtime.checkpoint import CheckpointInfo, check_fresh, check_resume, check_writable
    from graphprep.trainer.runtime.outputs import check_train_outputs
    if rank in (None, "0"):
        check_train_outputs(cfg, meta)
        if not cfg.resume and not cfg.overwrite:
            check_fresh(cfg.checkpoint_dir, CheckpointInfo.of(cfg, meta, target))
        check_writable(cfg.checkpoint_dir)
    if cfg.resume:
        done = check_resume(cfg.checkpoint_dir, CheckpointInfo.of(cfg, meta, target))
        if done is not None and rank in (None, "0"):
            log.info("resuming from %s: %d epochs done", cfg.checkpoint_dir, done)


def _check_model(cfg, meta, rank: str | None) -> None:
    """Before any rank starts: ``--model`` names a module that imports, a factory that exists
    and accepts ``--model-args`` on this graph's spec (ModelError, exit 2). Ranks of our
    launcher skip what it checked; the default sage without arguments needs no check (and no
    torch import)."""
    from graphprep.trainer.runtime.launch import LAUNCHER_ENV
    from graphprep.trainer.models.registry import check_in_child, model_path
    model_path(cfg.model)
    if (rank is not None and LAUNCHER_ENV in os.environ) or \
            (cfg.model == "sage" and not cfg.model_args):
        return
    from graphprep.trainer.config import target_etype, target_type
    from graphprep.trainer.models.spec import model_spec
    if cfg.task == "link":
        ntype, out_dim = target_etype(meta, cfg.target_etype).dst, cfg.hidden
    else:
        ntype = target_type(meta, cfg.target)
        # graph.json records the class count at dispatch; where it does not, the ranks read it
        # from the labels, and any width serves to check that the factory accepts its args
        out_dim = meta.num_classes.get(ntype, 2)
    # in a child process: the factory is the user's code, and whatever it does to its
    # process (exit, threads, torch's global settings) must not happen to the launcher
    check_in_child(cfg.model, cfg.model_args, model_spec(meta, cfg, ntype, out_dim))


def _check_data(meta, p: int, rank: int, verify_data: bool) -> None:
    """This rank's part, before torch loads (see graphprep.formats.part_checks); exit 1 naming
    rank, part and file on failure."""
    from graphprep.formats.part_checks import check_part
    start = time.perf_counter()
    try:
        report = check_part(meta, p, verify_data=verify_data)
    except (FormatError, OSError) as err:
        line = f"rank {rank} failed: part {p}: damaged or inconsistent data: {err}"
        log.error("%s", line)
        sys.stderr.flush()
        _tell_launcher(line)
        sys.exit(1)
    for warning in report.warnings:
        log.warning("rank %d: %s", rank, warning)
    log.info("rank %d: part %d checked in %.2f s (sizes, structure, %s hashes)", rank, p,
             time.perf_counter() - start, "full" if verify_data else "sampled")


def run_as_rank(work, meta, *, rank: int, part: int, device: str, iface: str | None,
                threads: int, verify_data: bool, rpc_timeout: float, verbose: bool = False):
    """Run ``work()`` as this rank: watch the launcher, pick the network interface and GPU,
    check the part (exit 1 naming it), then torch. Any failure of ``work`` ends the rank with
    one logged line (tracebacks for unexpected errors) and exit 1. A collective or RPC that
    timed out is one line naming the ranks that went silent and the step this rank waited in
    (``graphprep.trainer.runtime.health``; the traceback only with ``verbose``). Under torchrun the line also
    replaces "To enable traceback see ..." in its failure summary. Returns what ``work``
    returns."""
    from graphprep.trainer.runtime.launch import watch_launcher
    watch_launcher(rank)
    configure_rank(iface, device)
    _check_data(meta, part, rank, verify_data)
    import torch
    # torch's own DDP setup calls a deprecated path (Backend as ProcessGroup): not ours to fix
    warnings.filterwarnings("ignore", message="You are using a Backend")
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    torch.set_num_threads(threads or default_threads(os.cpu_count() or 1, local))
    try:
        return work()
    except BaseException as err:  # noqa: BLE001 - any failure ends the rank, loudly
        from graphprep.trainer.runtime.health import is_timeout, timeout_message
        if is_timeout(err):     # gloo's and RPC's own text names no peer: the heartbeats do
            line = timeout_message(rank, rpc_timeout, err)
            detail = traceback.format_exc() if verbose else ""
        else:
            line = f"rank {rank} failed: {type(err).__name__}: {err}"
            # a ValueError is bad input, and a peer gone is the peer's failure (the launcher
            # names it): neither is a bug of this rank to show a traceback for
            quiet = isinstance(err, ValueError) or (peer_gone(err) and not verbose)
            detail = traceback.format_exc() if not quiet else ""
        log.error("%s%s", line, "\n" + detail if detail else "")
        sys.stderr.flush()
        _tell_launcher(line)
        from graphprep.trainer.models.registry import ModelError
        # skip RPC shutdown: it would wait for the ranks this one is leaving; a model that
        # does not fit (its output's shape) is bad input, exit 2 as before the start
        os._exit(2 if isinstance(err, ModelError) else 1)


# what RPC (tensorpipe) and gloo say when the other end of a connection has exited
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
             "eof (this error originated at tensorpipe")


def peer_gone(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) says another rank's process went away."""
    from graphprep.trainer.sampling.service import RequestFailed
    seen = 0
    while err is not None and seen < 8:
        if isinstance(err, RequestFailed) or any(w in str(err) for w in PEER_GONE):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def _tell_launcher(line: str) -> None:
    """``line``, why this rank failed, where its launcher reads it: under ours its error
    file (``GRAPHPREP_ERROR_FILE``: the launcher repeats the line last, after its own);
    under torchrun the rank's error file, so that the agent's failure summary shows it (as
    its "traceback") instead of "To enable traceback see ..."."""
    from graphprep.trainer.runtime.launch import ERROR_FILE_ENV
    ours = os.environ.get(ERROR_FILE_ENV)
    if ours:
        try:
            with open(ours, "w") as f:
                f.write(line)
        except OSError:
            pass     # the log has the line already
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    record = {"message": {"message": line, "extraInfo": {
        "py_callstack": line, "timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w") as f:
            json.dump(record, f)
    except OSError:
        pass     # the log has the line already


def _train(cfg) -> dict:
    from graphprep.trainer.runtime.rendezvous import RankEnv
    from graphprep.trainer.train import run_rank
    return run_rank(cfg, RankEnv.from_env())


def _run_as_rank(cfg, meta, rank: int, threads: int, iface: str | None,
                 verbose: bool) -> None:
    summary = run_as_rank(lambda: _train(cfg), meta, rank=rank,
                          part=rank // cfg.ranks_per_part, device=cfg.device, iface=iface,
                          threads=threads, verify_data=cfg.verify_data,
                          rpc_timeout=cfg.rpc_timeout, verbose=verbose)
    if rank == 0 and cfg.task == "link":
        print(f"test AUC {summary['test_auc']:.4f} MRR {summary['test_mrr']:.4f} hits@50 "
              f"{summary['test_hits@50']:.4f} (epoch {summary['best_epoch']}, best validation "
              f"AUC {summary['val_auc']:.4f}); final epoch AUC {summary['final_test_auc']:.4f}; "
              f"{summary['mean_epoch_s']:.2f} s/epoch", flush=True)
    elif rank == 0:
        print(f"test accuracy {summary['test_acc']:.4f} (epoch {summary['best_epoch']}, best "
              f"validation {summary['val_acc']:.4f}); final epoch {summary['final_test_acc']:.4f}"
              f"; {summary['mean_epoch_s']:.2f} s/epoch", flush=True)


def _setup_logging(rank: str | None, verbose: bool) -> None:
    tag = "launcher" if rank is None else f"rank {rank}"
    level = logging.INFO if rank in (None, "0") or verbose else logging.WARNING
    setup_logging(level, tag)
