"""What the trainer writes, and the rule that guards it (``graphprep.formats.guard.check_output``, the
one ``prep`` applies too), checked by the launcher before any rank starts. No torch here.

* ``--checkpoint-dir``: a folder the run writes ``checkpoint.pt`` and ``best.pt`` into, and
  with learnable embeddings each part's shards beside them (``checkpoint.embeddings-part<p>.pt``
  and the like, :mod:`graphprep.trainer.runtime.checkpoint`); nothing else there is touched. Its own:
  empty, holding a torch archive ``checkpoint.pt``, or holding only such files (a run that
  died before its first checkpoint leaves shards alone).
* ``--metrics-out``: one JSON file, rewritten after every epoch. Its own: a JSON object with
  ``config``, ``epochs`` and ``summary``.
* ``trainer embed --out``: a folder, built beside and swapped in. Its own: empty, or holding
  ``embed.json``.

None of them may be, contain or lie inside the graph's folder, a part folder, or (embed) the
checkpoint read. Another tool's file or folder is replaced only with ``--overwrite``. A run
that fails leaves no ``.partial`` beside them: the launcher removes its ranks' leftovers, and
the next run removes those of a rank killed under another launcher.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile

from graphprep.formats.errors import FormatError
from graphprep.formats.guard import check_output
from graphprep.formats.output import replacing_file, side_paths
from graphprep.formats.partitioned import PartitionedGraph

CHECKPOINT_FILES = ("checkpoint.pt", "best.pt")
EMBED_JSON = "embed.json"


def graph_inputs(graph: PartitionedGraph) -> list[str]:
    """The folders a run reads: the graph's (graph.json) and every local part folder."""
    return [graph.root] + [graph.part_path(p) for p in range(graph.num_parts)]


def is_checkpoint_folder(folder: str) -> bool:
    """Whether ``folder`` holds a checkpoint this trainer wrote (a torch archive), or only
    files this trainer's checkpoints are made of."""
    from graphprep.trainer.runtime.checkpoint import is_shard_name
    path = os.path.join(folder, CHECKPOINT_FILES[0])
    if os.path.isfile(path) and zipfile.is_zipfile(path):
        return True
    ours = set(CHECKPOINT_FILES) | {f".{n}.partial" for n in CHECKPOINT_FILES}
    names = os.listdir(folder)
    return bool(names) and all(n in ours or is_shard_name(n) for n in names)


def is_metrics_file(path: str) -> bool:
    """Whether ``path`` is a ``--metrics-out`` file (config, epochs and summary)."""
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and {"config", "epochs", "summary"} <= set(obj)


def is_embed_folder(folder: str) -> bool:
    """Whether ``folder`` was written by ``trainer embed`` (it holds ``embed.json``)."""
    return os.path.isfile(os.path.join(folder, EMBED_JSON))


def check_train_outputs(cfg, graph: PartitionedGraph) -> None:
    """``--checkpoint-dir`` and ``--metrics-out`` of a training run (FormatError naming the
    option and path; removes a previous run's partial files)."""
    inputs = graph_inputs(graph)
    check_output(cfg.checkpoint_dir, inputs, flag="--checkpoint-dir", folder=True,
                 ours=is_checkpoint_folder, what="a checkpoint folder of this trainer",
                 overwrite=cfg.overwrite)
    if cfg.metrics_out:
        if cfg.metrics_out.endswith(("/", os.sep)):
            raise FormatError("--metrics-out names one JSON file, not a folder (e.g. "
                              f"{os.path.join(cfg.metrics_out, 'metrics.json')})",
                              file=cfg.metrics_out)
        written = {os.path.realpath(os.path.join(cfg.checkpoint_dir, n)) for n in CHECKPOINT_FILES}
        metrics, folder = os.path.realpath(cfg.metrics_out), os.path.realpath(cfg.checkpoint_dir)
        if metrics in written:
            raise FormatError("--metrics-out is a file --checkpoint-dir writes; choose another "
                              "path", file=cfg.metrics_out)
        check_output(cfg.metrics_out, inputs, flag="--metrics-out", folder=False,
                     ours=is_metrics_file, what="a metrics file written by the trainer",
                     overwrite=cfg.overwrite)
        if metrics == folder or folder.startswith(metrics + os.sep):
            # neither exists yet on a first run: the folder would be made, then the metrics
            # file could not be written over it after the first epoch
            raise FormatError("--metrics-out is --checkpoint-dir (or a folder above it): one is "
                              "a file, the other a folder; give them different paths",
                              file=cfg.metrics_out)
    remove_partials(cfg)


def check_embed_out(out: str, graph: PartitionedGraph, checkpoint: str,
                    overwrite: bool) -> None:
    """``trainer embed --out`` (FormatError naming it; removes a previous run's partial)."""
    check_output(out, graph_inputs(graph) + [checkpoint], flag="--out", folder=True,
                 ours=is_embed_folder, what="an output of trainer embed", overwrite=overwrite)
    shutil.rmtree(side_paths(out)[0], ignore_errors=True)


def remove_partials(cfg) -> None:
    """The partial files a failed or killed run of ``cfg`` left (its outputs stay as they
    were: every write is renamed into place)."""
    leftovers = []
    if cfg.checkpoint_dir:
        from graphprep.trainer.runtime.checkpoint import is_shard_name
        leftovers += [os.path.join(cfg.checkpoint_dir, f".{n}.partial")
                      for n in CHECKPOINT_FILES]
        if os.path.isdir(cfg.checkpoint_dir):
            leftovers += [os.path.join(cfg.checkpoint_dir, n)
                          for n in os.listdir(cfg.checkpoint_dir)
                          if n.endswith(".partial") and is_shard_name(n)]
    if cfg.metrics_out:
        leftovers.append(side_paths(cfg.metrics_out)[0])
    for path in leftovers:
        if os.path.isfile(path):
            os.remove(path)


def write_json_atomic(path: str, obj) -> None:
    """Write JSON to ``path`` through a partial file renamed into place (a failure leaves the
    previous file)."""
    with replacing_file(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
