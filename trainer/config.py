"""The trainer's configuration and its checks, without torch: the launcher validates options
and data paths before any rank (or torch) starts, so a bad value costs a fraction of a second.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import click
import numpy as np

from graphprep.formats.partitioned import SPLIT_MASKS, has_split_masks

from graphprep.trainer.options import INTS, REQUIRED, Hops, Opt, Parser, Range, check_declared

PLACEMENTS = ("cpu", "pinned", "cuda")
DEVICES = ("cpu", "cuda")
TASKS = ("node", "link")
SCORERS = ("dot", "mlp")          # graphprep.trainer.models.scorer's, named here so options check without torch
LINK_MASKS = SPLIT_MASKS
FAIL_MODES = ("raise", "kill", "hang", "nan")
FEATURELESS = ("embed", "constant")   # input of a node type without features

AT_LEAST_1, NOT_NEGATIVE, POSITIVE = Range(1), Range(0), Range(0, min_open=True)


def _model_args(text: str | None) -> dict:
    """``--model-args`` JSON (graphprep.trainer.models.registry's rule): the factory's
    keyword arguments; ValueError without the option's name (the option names it)."""
    from graphprep.trainer.models.registry import ModelError, parse_model_args
    try:
        return parse_model_args(text)
    except ModelError as err:
        # the value may hold ": " itself, so strip the exact prefix
        raise ValueError(str(err).removeprefix("--model-args ")) from None


JSON_OBJECT = Parser(_model_args, lambda value: json.dumps(value) if value else None)


def _opt(help: str, default=REQUIRED, **how):
    """A TrainConfig field declared with its option (graphprep.trainer.options.Opt)."""
    return Opt(help, default, **how).field()


@dataclass
class TrainConfig:
    """Everything a run depends on: the CLI's options, each declared once here with its help,
    default, choices and range (graphprep.trainer.options); the launcher's own options
    (--iface, --threads, --verbose) are graphprep.trainer.cli's."""

    graph: str = _opt("graph.json written by `prep dispatch` (or its folder).", path=True)
    task: str = _opt("node: classify the nodes of --target. link: predict the edges of "
                     "--target-etype (needs `prep split-edges` before dispatch).", "node",
                     choices=TASKS)
    fanouts: list[int] = _opt("Neighbors sampled per hop, from the seeds outward; -1 = all. "
                              "The number of values is the number of model layers "
                              "(spec.num_layers).", factory=lambda: [10, 10], parser=INTS,
                              rule=Hops())
    eval_fanouts: list[int] | None = _opt("Fanouts for validation/test [default: --fanouts].",
                                          None, parser=INTS, rule=Hops())
    batch_size: int = _opt("Seed nodes per training batch, per rank.", 512, rule=AT_LEAST_1)
    eval_batch_size: int = _opt("Seed nodes per evaluation batch.", 2048, rule=AT_LEAST_1)
    epochs: int = _opt("Epochs to train (a resumed run stops here too).", 10, rule=AT_LEAST_1)
    max_batches: int | None = _opt("At most this many training batches per epoch and rank: "
                                   "each epoch then trains on a different shuffled sample of "
                                   "the seeds (link task: training edges), for graphs whose "
                                   "full epoch takes too long [default: all].", None,
                                   type=click.IntRange(min=1))
    lr: float = _opt("Adam learning rate.", 0.005, rule=POSITIVE)
    weight_decay: float = _opt("Adam weight decay.", 5e-4, rule=NOT_NEGATIVE)
    hidden: int = _opt("Hidden width of the model's layers (gat: all heads together).", 128,
                       rule=AT_LEAST_1)
    dropout: float = _opt("Dropout before every layer.", 0.5,
                          rule=Range(0, max=1, max_open=True))
    device: str = _opt("Where the model runs (cuda: GPU LOCAL_RANK mod the GPU count; DDP uses "
                       "nccl, or gloo on CPU and where ranks share a GPU).", "cpu",
                       choices=DEVICES)
    placement: str = _opt("Where the part's graph structure lives and is sampled: cpu "
                          "(memory-mapped), pinned (page-locked host memory, sampled on the "
                          "CPU), cuda (sampling on the GPU).", "cpu", choices=PLACEMENTS)
    ranks_per_part: int = _opt("Ranks serving each part; they split its seeds. World size = "
                               "parts x this.", 1, rule=AT_LEAST_1)
    target: str | None = _opt("Node type to classify [default: the one type with label and "
                              "train_mask].", None)
    target_etype: str | None = _opt("Link task: edge type to predict, src:rel:dst or a unique "
                                    "rel [default: the one type with train/val/test edge "
                                    "masks].", None)
    model: str = _opt("The model: sage (GraphSAGE-mean), gat (multi-head attention), rgcn "
                      "(per-relation weights, heterogeneous graphs), or your own: "
                      "PKG.MODULE:FACTORY or path/to/file.py:FACTORY, a function build(spec: "
                      "graphprep.trainer.ModelSpec, **model_args) -> torch.nn.Module whose "
                      "forward(batch: graphprep.trainer.Batch) returns logits (node task) or "
                      "embeddings (link task); see 'Models' above and docs/models.md. A module "
                      "must import on every rank (e.g. on PYTHONPATH); a file is recorded by "
                      "its absolute path. Examples, importable anywhere: "
                      "graphprep.trainer.examples.pyg_gcn:build, "
                      "graphprep.trainer.examples.pyg_gat:build, "
                      "graphprep.trainer.examples.sparse_sage:build.", "sage")
    model_args: dict = _opt("JSON object of keyword arguments for the model's factory, e.g. "
                            "'{\"heads\": 8}' [default: none].", factory=dict,
                            parser=JSON_OBJECT)
    edge_feat: str | None = _opt("Edge data array given to the model as layer.edge_attr (the "
                                 "sampled edges' rows, returned with the sample: no extra "
                                 "request); gat and rgcn use it [default: none].", None)
    scorer: str = _opt("Link task: edge score from the two end embeddings: dot product, or an "
                       "MLP on their elementwise product.", "mlp", choices=SCORERS)
    neg_ratio: int = _opt("Link task: uniform negative edges per training edge (destinations "
                          "drawn over the whole type).", 1, rule=AT_LEAST_1)
    corrupt_src: bool = _opt("Link task: corrupt the source of every other negative instead "
                             "of the destination.", False, flag=True)
    eval_negatives: int = _opt("Link task: fixed negatives ranked against each "
                               "validation/test edge for MRR and Hits@20/50/100 (the first "
                               "also serves the AUC).", 100, rule=AT_LEAST_1)
    degree_input: bool | None = _opt("Append log(1 + in-degree) to every node's input "
                                     "features (degrees of the graph messages run on) "
                                     "[default: on for --task link, off for node].", None,
                                     pair=True)
    featureless: str = _opt("Input of a node type without `feat`: embed = a learnable row per "
                            "node (--embedding-dim wide), held by the node's owner part (12 B "
                            "per value with Adam's moments) and trained with sparse Adam, "
                            "asynchronously as DistDGL's DistEmbedding (with several ranks a "
                            "run repeats only up to the interleaving of updates), saved with "
                            "the checkpoints; constant = the same value 1.0 for every node.",
                            "embed", choices=FEATURELESS)
    embedding_dim: int = _opt("Width of the learnable rows of --featureless embed.", 64,
                              rule=AT_LEAST_1)
    embedding_lr: float = _opt("Learning rate of the sparse Adam that updates those rows "
                               "(only the rows a batch touched; the model's weights use "
                               "--lr).", 0.01, rule=POSITIVE)
    seed: int = _opt("Seed of model init, shuffling, sampling and dropout: the same seed "
                     "gives the same run.", 0, rule=NOT_NEGATIVE)
    rpc_timeout: float = _opt("Seconds before an RPC or collective to a silent rank fails "
                              "(and ends the job).", 30.0, rule=POSITIVE)
    prefetch: int = _opt("Batches sampled ahead by the background loader.", 2,
                         rule=NOT_NEGATIVE)
    cache_mb: float = _opt("Per rank: cache the input features of the halo nodes its part "
                           "references most, fetched once at start, up to this many MB (0 = "
                           "off).", 64.0, rule=NOT_NEGATIVE)
    remote_store: str | None = _opt("Per rank: keep every remote input row fetched (features "
                                    "and original IDs the halo cache misses) in a memory-"
                                    "mapped file in this folder, so later epochs fetch no row "
                                    "twice. Costs disk where rows are written, up to (nodes "
                                    "not owned) x row bytes per rank, and a byte per such "
                                    "node in memory; the rows sit in the page cache, not in "
                                    "the rank's own memory. The file is unlinked at once: "
                                    "nothing is left behind [default: off].", None, path=True)
    remote_store_fill: bool = _opt("With --remote-store: fetch every halo node's rows into the "
                                   "store at start-up (a block of rows per request), so "
                                   "training asks no owner for a halo row at all; start-up "
                                   "grows with the halo.", False, flag=True)
    checkpoint_dir: str | None = _opt("Folder for the per-epoch checkpoint.pt and best.pt "
                                      "(nothing else in it is touched; the run logs where) "
                                      "[default: checkpoints/<graph name>]. A folder that is "
                                      "neither empty nor a checkpoint folder, or holds another "
                                      "run's checkpoint (other graph, model or options), is "
                                      "refused without --overwrite or --resume.", None,
                                      path=True)
    resume: bool = _opt("Continue from the checkpoint in --checkpoint-dir (refused when it was "
                        "made on another graph or with other model/optimizer options).", False,
                        flag=True)
    verify_data: bool = _opt("Also check every row's structure and the full content hash of "
                             "every file of each rank's part against graph.json (reads the "
                             "whole part; sizes, a bounded sample of the structure and "
                             "sampled hashes are always checked).", False, flag=True)
    metrics_out: str | None = _opt("Write per-epoch metrics (accuracy, time breakdown, RPC "
                                   "bytes) as JSON here (rewritten after each epoch through a "
                                   "partial file renamed into place).", None, path=True)
    overwrite: bool = _opt("Let --checkpoint-dir and --metrics-out replace what is not this "
                           "trainer's own earlier output (refused without it). Never allowed "
                           "when they are, hold or lie inside the graph's or a part's "
                           "folder.", False, flag=True)
    progress: bool = _opt("Progress bar on rank 0 (only when stderr is a terminal and "
                          "TQDM_DISABLE is unset).", True, pair=True)
    # testing: make rank fail_rank fail at epoch fail_epoch, by raising, SIGKILL, hanging,
    # or NaN inputs
    fail_rank: int | None = _opt("", None, type=int, hidden=True)
    fail_mode: str = _opt("", "raise", choices=FAIL_MODES, hidden=True)
    fail_epoch: int = _opt("", 0, hidden=True)

    @property
    def learns_embeddings(self) -> bool:
        """Whether node types without features get learnable input rows."""
        return self.featureless == "embed"

    @property
    def uses_degree_input(self) -> bool:
        """Whether log(1 + in-degree) is appended to the input features."""
        return self.task == "link" if self.degree_input is None else self.degree_input

    def check(self, num_parts: int, world_size: int) -> None:
        """Raise ValueError naming the option that cannot work (one line)."""
        self.check_values()
        if world_size != num_parts * self.ranks_per_part:
            raise ValueError(f"world size {world_size} != {num_parts} parts x "
                             f"--ranks-per-part {self.ranks_per_part}")
        if self.device.startswith("cuda") or self.placement != "cpu":
            import torch  # only here: a CPU run validates without importing torch
            if not torch.cuda.is_available():
                raise ValueError(f"--device {self.device} --placement {self.placement} needs "
                                 "CUDA, and torch sees no GPU here")

    def check_values(self) -> None:
        """Every option's declared choices and range (graphprep.trainer.options; NaN fails
        every range), then the rule between options."""
        check_declared(self)
        if self.eval_fanouts is not None and len(self.eval_fanouts) != len(self.fanouts):
            raise ValueError(f"--eval-fanouts has {len(self.eval_fanouts)} hops, --fanouts "
                             f"{len(self.fanouts)}: the model has one layer per hop")
        if self.remote_store_fill and not self.remote_store:
            raise ValueError("--remote-store-fill fills the store of --remote-store DIR; "
                             "give --remote-store too")


def target_type(graph, wanted: str | None) -> str:
    """The node type to classify: ``wanted``, else the one type with label and train_mask.
    Raises ValueError naming the candidates."""
    labeled = [t for t in graph.node_types
               if {"label", "train_mask"} <= set(graph.node_feats.get(t, {}))]
    if wanted:
        if wanted not in labeled:
            raise ValueError(f"--target {wanted}: not a node type with label and train_mask "
                             f"(those are {labeled})")
        return wanted
    if len(labeled) != 1:
        raise ValueError(f"node types with label and train_mask: {labeled}; pick one with "
                         "--target")
    return labeled[0]


def check_edge_feat(graph, name: str | None) -> None:
    """``--edge-feat NAME``: edge data of at least one edge type (graph.json ``edge_feats``),
    numeric (integer or float) wherever it is: a bool array is a mask, not a feature (and in
    link prediction the split masks would give the held-out edges away). Raises ValueError
    naming the option and what exists (one line)."""
    if name is None:
        return
    have = {n for fields in graph.edge_feats.values() for n in fields}
    typed = [(et, fields[name]) for et, fields in graph.edge_feats.items() if name in fields]
    if not typed:
        raise ValueError(f"--edge-feat {name}: no edge type has edge data {name!r} (the graph's "
                         f"edge data: {', '.join(sorted(have)) or 'none'})")
    for et, spec in typed:
        if np.dtype(spec["dtype"]).kind not in "iuf":
            raise ValueError(f"--edge-feat {name}: edge type {et} stores it as "
                             f"{spec['dtype']}, not as numbers (integer or float)")


def masked_etypes(graph) -> list:
    """Edge types carrying all of train/val/test masks (``prep split-edges``' target type and
    its twins), in ``graph.edge_types`` order."""
    return [et for et in graph.edge_types if has_split_masks(graph.edge_feats.get(et, {}))]


_EMPTY_NOTE = "prep split-edges writes no masks for a type without edges"


def target_etype(graph, wanted: str | None):
    """The edge type to predict links of: ``wanted`` (``src:rel:dst``, or a relation name that
    is unique), else the one type whose edges carry train/val/test masks and whose twin, if
    any, is not it (``prep split-edges`` marks a type and its reverse). Raises ValueError
    naming the candidates."""
    empty = [et for et in graph.edge_types if graph.num_edges.get(et) == 0]
    masked = [et for et in masked_etypes(graph) if et not in empty]
    if wanted:
        named = [et for et in masked if wanted in (str(et), et.rel)]
        hollow = [et for et in empty if wanted in (str(et), et.rel)]
        if hollow and not named:
            raise ValueError(f"--target-etype {wanted}: edge type {hollow[0]} has 0 edges: no "
                             f"links to predict ({_EMPTY_NOTE})")
        if len(named) != 1:
            raise ValueError(f"--target-etype {wanted}: not one edge type with train_mask, "
                             f"val_mask and test_mask (those are {[str(e) for e in masked]}; "
                             "run `prep split-edges` before `prep dispatch`)")
        return named[0]
    # a masked type's reverse twin is masked too: keep one of each pair, the first listed
    chosen = [et for i, et in enumerate(masked)
              if not any(o.src == et.dst and o.dst == et.src and o != et for o in masked[:i])]
    if len(chosen) != 1:
        raise ValueError(f"edge types with train/val/test masks: {[str(e) for e in chosen]}; "
                         "pick one with --target-etype" if chosen else
                         "no edge type has train_mask/val_mask/test_mask: run `prep "
                         "split-edges` on the chunked graph before `prep dispatch`" +
                         (f" (0-edge types, here {', '.join(map(str, empty))}, have no links "
                          f"to predict: {_EMPTY_NOTE})" if empty else ""))
    return chosen[0]


def task_target(graph, cfg: TrainConfig) -> str:
    """What the run predicts, as a string: the node type (``--task node``) or the edge type
    (``--task link``). Raises ValueError as :func:`target_type` / :func:`target_etype`."""
    if cfg.task == "link":
        return str(target_etype(graph, cfg.target_etype))
    return target_type(graph, cfg.target)
