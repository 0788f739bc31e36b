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

from graphprep.trainer.config import TrainConfig, check_edge_feat, task_target
from graphprep.trainer.options import Opt, Range, click_options, declared
from graphprep.trainer.runtime.netif import IFACE_HELP, configure_rank

log = logging.getLogger("graphprep.trainer")

# Past 8 intra-op threads a rank's small GNN batches stop gaining, and they lose badly while the
# loader thread runs its own torch ops beside them: one rank with 16 threads on a 16-core
# machine was several times slower in forward/backward than with 8 (examples/benchmarks/
# RESULTS.md, "The GPU paths again, on a lent NVIDIA H200, and one rank's CPU threads").
MAX_DEFAULT_THREADS = 8


def default_threads(cores: int, ranks_here: int) -> int:
    """torch intra-op threads for one of ``ranks_here`` ranks on a host with ``cores`` cores:
    an equal share of the cores, at least 1 and at most ``MAX_DEFAULT_THREADS``."""
    return max(1, min(MAX_DEFAULT_THREADS, cores // ranks_here))


class OneLineErrors(OneLineErrorsMixin, click.Command):
    """Usage errors as one line ``Error: ...`` (exit 2), without click's usage block."""


class BadInput(click.ClickException):
    """A path or file the command cannot use (graph.json, checkpoint, an output): exit 2."""

    exit_code = 2


# the launcher's own options, shared with `trainer embed` (the run's are TrainConfig's fields)
IFACE = Opt(IFACE_HELP, None)
THREADS = Opt("torch threads per rank; 0 = this machine's cores divided by its ranks, at most "
              f"{MAX_DEFAULT_THREADS}.", 0, rule=Range(0))
VERBOSE = Opt("Log every rank, not only rank 0.", False, flag=True, short="-v")
# where they show in --help: after these of TrainConfig's
_LAUNCHER_AFTER = {"rpc_timeout": ("iface", IFACE), "overwrite": ("threads", THREADS),
                   "progress": ("verbose", VERBOSE)}


def train_options():
    """``(name, Opt)`` of every option of the train command: TrainConfig's, with the
    launcher's."""
    for name, spec in declared(TrainConfig).items():
        yield name, spec
        if name in _LAUNCHER_AFTER:
            yield _LAUNCHER_AFTER[name]


COMMAND_SETTINGS = {"help_option_names": ["-h", "--help"], "show_default": True,
                    "max_content_width": 100}


@click.command(cls=OneLineErrors, context_settings=COMMAND_SETTINGS)
@click_options(train_options())
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
    from graphprep.trainer.runtime.checkpoint import (CheckpointInfo, check_fresh, check_resume,
                                                      check_writable)
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
    log.info("rank %d: part %d checked in %.2f s (sizes; %s structure and hashes)", rank,
             p, time.perf_counter() - start, "full" if verify_data else "sampled")


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
