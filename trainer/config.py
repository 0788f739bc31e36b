"""The trainer's configuration and its checks, without torch: the launcher validates options
and data paths before any rank (or torch) starts, so a bad value costs a fraction of a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

PLACEMENTS = ("cpu", "pinned", "cuda")
TASKS = ("node", "link")
SCORERS = ("dot", "mlp")          # graphprep.trainer.models.scorer's, named here so options check without torch
LINK_MASKS = ("train_mask", "val_mask", "test_mask")
FAIL_MODES = ("raise", "kill", "hang", "nan")
FEATURELESS = ("embed", "constant")   # input of a node type without features


@dataclass
class TrainConfig:
    """Everything a run depends on (the CLI's options)."""

    graph: str
    task: str = "node"
    fanouts: list[int] = field(default_factory=lambda: [10, 10])
    eval_fanouts: list[int] | None = None
    batch_size: int = 512
    eval_batch_size: int = 2048
    epochs: int = 10
    lr: float = 0.005
    weight_decay: float = 5e-4
    hidden: int = 128
    dropout: float = 0.5
    device: str = "cpu"
    placement: str = "cpu"
    ranks_per_part: int = 1
    seed: int = 0
    rpc_timeout: float = 30.0
    prefetch: int = 2
    cache_mb: float = 64.0
    target: str | None = None
    target_etype: str | None = None     # link: the edge type to predict
    scorer: str = "mlp"
    model: str = "sage"                 # a built-in, or PKG.MODULE:FACTORY
    model_args: dict = field(default_factory=dict)   # the factory's keyword arguments
    edge_feat: str | None = None        # edge data given to the model as layer.edge_attr
    neg_ratio: int = 1
    corrupt_src: bool = False
    eval_negatives: int = 100
    degree_input: bool | None = None    # None: on for the link task, off for the node task
    featureless: str = "embed"          # a type without features: learnable rows, or constant
    embedding_dim: int = 64             # width of those learnable rows
    embedding_lr: float = 0.01          # their sparse Adam learning rate (graphprep.trainer.data.embeddings)
    checkpoint_dir: str | None = None
    resume: bool = False
    verify_data: bool = False
    metrics_out: str | None = None
    overwrite: bool = False             # --checkpoint-dir/--metrics-out may replace others' files
    progress: bool = True
    fail_rank: int | None = None        # testing: make this rank fail ...
    fail_mode: str = "raise"            # ... by raising, SIGKILL, hanging, or NaN inputs
    fail_epoch: int = 0

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
        """Ranges of the numeric options (NaN fails every comparison, so it is refused)."""
        rules = [("--batch-size", self.batch_size, self.batch_size >= 1, "at least 1"),
                 ("--eval-batch-size", self.eval_batch_size, self.eval_batch_size >= 1,
                  "at least 1"),
                 ("--epochs", self.epochs, self.epochs >= 1, "at least 1"),
                 ("--lr", self.lr, self.lr > 0 and math.isfinite(self.lr), "positive"),
                 ("--weight-decay", self.weight_decay,
                  self.weight_decay >= 0 and math.isfinite(self.weight_decay), ">= 0"),
                 ("--hidden", self.hidden, self.hidden >= 1, "at least 1"),
                 ("--dropout", self.dropout, 0 <= self.dropout < 1, "in [0, 1)"),
                 ("--ranks-per-part", self.ranks_per_part, self.ranks_per_part >= 1,
                  "at least 1"),
                 ("--seed", self.seed, self.seed >= 0, ">= 0"),
                 ("--rpc-timeout", self.rpc_timeout,
                  self.rpc_timeout > 0 and math.isfinite(self.rpc_timeout), "positive"),
                 ("--prefetch", self.prefetch, self.prefetch >= 0, ">= 0"),
                 ("--cache-mb", self.cache_mb, self.cache_mb >= 0 and
                  math.isfinite(self.cache_mb), ">= 0"),
                 ("--neg-ratio", self.neg_ratio, self.neg_ratio >= 1, "at least 1"),
                 ("--eval-negatives", self.eval_negatives, self.eval_negatives >= 1,
                  "at least 1"),
                 ("--embedding-dim", self.embedding_dim, self.embedding_dim >= 1, "at least 1"),
                 ("--embedding-lr", self.embedding_lr,
                  self.embedding_lr > 0 and math.isfinite(self.embedding_lr), "positive")]
        for flag, value, ok, rule in rules:
            if not ok:
                raise ValueError(f"{flag} {value}: must be {rule}")
        if self.task not in TASKS:
            raise ValueError(f"--task must be one of {TASKS}")
        if self.featureless not in FEATURELESS:
            raise ValueError(f"--featureless must be one of {FEATURELESS}")
        if self.scorer not in SCORERS:
            raise ValueError(f"--scorer must be one of {SCORERS}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"--placement must be one of {PLACEMENTS}")
        if not self.fanouts:
            raise ValueError("--fanouts: give at least one hop")
        if any(f == 0 or f < -1 for f in self.fanouts + (self.eval_fanouts or [])):
            raise ValueError("fanouts are positive, or -1 for all neighbors")
        if self.eval_fanouts is not None and len(self.eval_fanouts) != len(self.fanouts):
            raise ValueError(f"--eval-fanouts has {len(self.eval_fanouts)} hops, --fanouts "
                             f"{len(self.fanouts)}: the model has one layer per hop")


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
    return [et for et in graph.edge_types
            if set(LINK_MASKS) <= set(graph.edge_feats.get(et, {}))]


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
