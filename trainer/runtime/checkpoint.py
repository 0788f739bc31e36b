"""Per-epoch checkpoints: model, optimizer, the epochs' metrics, and what they belong to.

``DIR/checkpoint.pt`` is replaced after each epoch (written to ``DIR/.checkpoint.pt.partial``
first), so a run killed at any moment resumes from its last finished epoch; ``DIR/best.pt`` is
the same state after the epoch with the best validation accuracy so far (earliest on ties, as
the summary picks it). Each records the graph's fingerprint and the options that shape the run
(:class:`CheckpointInfo`): ``--resume`` against another graph or with other such options is
refused, naming every difference. torch is imported only by the functions that need it, so the
launcher checks a run without it.

Learnable embeddings (``--featureless embed``) are part of the model but live with their parts:
each part's first rank writes its table and its sparse optimizer's state beside the checkpoint
as ``checkpoint.embeddings-part<p>.pt`` (``best.embeddings-part<p>.pt`` beside ``best.pt``, a
hard link to it where the file system has them), recording the epoch, before rank 0 writes the
checkpoint itself; the previous one is kept as ``...part<p>.prev.pt``, so whichever moment a run
dies, one of the two matches the checkpoint's epoch. Each is ``3 x rows x dim x 4 B`` (rows and
Adam moments). A shard missing, or of another epoch than its checkpoint, is refused naming the
part.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from dataclasses import dataclass

from graphprep.formats.integrity import manifest_digest
from graphprep.formats.output import replacing_file

log = logging.getLogger("graphprep.trainer")

NAME = "checkpoint.pt"
BEST = "best.pt"
# options a resumed run must share with the checkpoint: the model's shape and what makes the
# continuation exact (seeds, batches, optimizer settings)
RESUME_KEYS = ("target", "task", "hidden", "fanouts", "dropout", "lr", "weight_decay",
               "batch_size", "seed", "scorer", "neg_ratio", "corrupt_src", "degree_input",
               "model", "model_args", "edge_feat", "featureless", "embedding_dim",
               "embedding_lr")


STATE_KEYS = ("model", "optimizer", "history", "config")


class CheckpointRefused(ValueError):
    """A checkpoint that cannot serve: unreadable, or ``--resume``/``trainer embed`` on another
    graph or with incompatible options."""


@dataclass(frozen=True)
class CheckpointInfo:
    """Identity of a run: the graph's fingerprint and the options listed in RESUME_KEYS."""

    graph: dict
    options: dict

    @classmethod
    def of(cls, cfg, graph, target: str) -> "CheckpointInfo":
        """For options ``cfg`` (target resolved to ``target``) on the partitioned ``graph``."""
        options = {k: getattr(cfg, k) for k in RESUME_KEYS if k != "target"}
        return cls(graph_fingerprint(graph), {"target": target, **options})


def graph_fingerprint(graph) -> dict:
    """What identifies the data: name, sizes, the dispatch id and each part's manifest digest
    (the full hashes of its files). graph.json files without manifests fall back on the input
    fingerprints recorded at dispatch."""
    fp = {"graph_name": graph.graph_name, "num_parts": graph.num_parts,
          "dispatch_id": graph.dispatch_id, "num_nodes": dict(graph.num_nodes),
          "num_edges": {str(e): n for e, n in graph.num_edges.items()}}
    fp.update({f"part {p}": manifest_digest(info.manifest) if info.manifest else ""
               for p, info in enumerate(graph.parts)})
    if not graph.dispatch_id:
        fp["source"] = dict(graph.source)
    return fp


def differences(saved: CheckpointInfo, now: CheckpointInfo) -> list[str]:
    """``key: checkpoint X, now Y`` for every graph fingerprint entry and option that differs."""
    out = []
    for prefix, a, b in (("graph ", saved.graph, now.graph), ("--", saved.options, now.options)):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                flag = key.replace("_", "-") if prefix == "--" else key
                out.append(f"{prefix}{flag}: checkpoint {_short(a.get(key))}, now "
                           f"{_short(b.get(key))}")
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_writable(folder: str) -> None:
    """Create ``folder`` and write and remove a probe file in it, before any epoch runs.
    Raises ValueError naming the folder."""
    probe = os.path.join(folder, f".write-probe-{os.getpid()}")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"probe")
        os.remove(probe)
    except OSError as err:
        raise ValueError(f"--checkpoint-dir {folder}: cannot write there "
                         f"({type(err).__name__}: {err.strerror or err})") from None


def check_fresh(folder: str, now: CheckpointInfo) -> None:
    """Before a run that starts afresh (no ``--resume``, no ``--overwrite``) in ``folder``:
    a checkpoint there must be of this same run (graph and options, as ``--resume`` compares
    them), since its epochs replace it. Raises CheckpointRefused naming each difference, or
    why the checkpoint cannot be compared, and the way out (one line)."""
    path = os.path.join(folder, NAME)
    if not os.path.isfile(path):
        return
    way_out = (f"pass --overwrite to replace it, --resume to continue it, or choose another "
               f"--checkpoint-dir: {folder}")
    try:
        state = _read(path, "--checkpoint-dir", mmap=True)
    except CheckpointRefused as err:     # half-written by hand, or another program's file
        raise CheckpointRefused(f"{err}; pass --overwrite to replace it or choose another "
                                f"--checkpoint-dir: {folder}") from None
    if "graph" not in state or "resume" not in state:
        raise CheckpointRefused(f"--checkpoint-dir: {path} was written by an older trainer "
                                f"(no graph fingerprint); {way_out}")
    diff = differences(CheckpointInfo(state["graph"], state["resume"]), now)
    if diff:
        raise CheckpointRefused(f"--checkpoint-dir: {path} holds another run's checkpoint ("
                                + "; ".join(diff) + f"); {way_out}")


def check_resume(folder: str, now: CheckpointInfo) -> int | None:
    """Before ``--resume``: epochs done by the checkpoint in ``folder`` (None: there is none).
    Raises CheckpointRefused naming each difference of graph or options (one line)."""
    path = os.path.join(folder, NAME)
    if not os.path.exists(path):
        return None
    state = _read(path)
    if "graph" not in state or "resume" not in state:
        raise CheckpointRefused(f"--resume: {path} records no graph fingerprint (written by an "
                            "older trainer); choose another --checkpoint-dir to start afresh")
    diff = differences(CheckpointInfo(state["graph"], state["resume"]), now)
    if diff:
        raise CheckpointRefused(f"--resume: {path} belongs to another run: " + "; ".join(diff))
    check_shards(path, state, "--resume")
    return len(state["history"])


def _read(path: str, flag: str = "--resume", mmap: bool = False) -> dict:
    import torch
    try:   # mmap: the weights stay on disk until read (a check reads the options only)
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    except Exception as err:  # noqa: BLE001 - any unreadable checkpoint is refused alike
        raise CheckpointRefused(f"{flag}: {path} is unreadable, not a checkpoint of this trainer "
                            f"({type(err).__name__}: {_short(str(err))})") from None
    missing = [k for k in STATE_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointRefused(f"{flag}: {path} is not a checkpoint of this trainer (no "
                            f"{', '.join(missing)})")
    return state


def check_for_embed(path: str, graph) -> None:
    """Before ``trainer embed`` starts ranks: ``path`` is a readable checkpoint of this
    ``graph`` (fingerprint, as ``--resume`` compares it) whose task and target this graph
    has. Raises CheckpointRefused naming each difference (one line). Holds the checkpoint."""
    from graphprep.trainer.config import TrainConfig, task_target
    state = _read(path, "--checkpoint")
    if "graph" not in state or "resume" not in state:
        raise CheckpointRefused(f"--checkpoint: {path} records no graph fingerprint (written by an "
                            "older trainer), so it cannot be matched to this graph")
    try:
        cfg = TrainConfig(**embed_config(state, graph.root))
    except TypeError as err:
        raise CheckpointRefused(f"--checkpoint: {path} was written by another version of this "
                                f"trainer ({err})") from None
    try:
        target = task_target(graph, cfg)
    except ValueError as err:
        raise CheckpointRefused(f"--checkpoint: {path} does not fit this graph: its --task "
                            f"{state['config'].get('task')!r} needs what the graph lacks: "
                            f"{err}") from None
    diff = differences(CheckpointInfo(state["graph"], state["resume"]),
                       CheckpointInfo.of(cfg, graph, target))
    if diff:
        raise CheckpointRefused(f"--checkpoint: {path} was trained on another graph or task: "
                            + "; ".join(diff))
    check_shards(path, state, "--checkpoint")


def embed_config(state: dict, graph: str, **runtime) -> dict:
    """The checkpoint's training options as ``TrainConfig`` keywords for inference on
    ``graph``: what shaped the model kept, what only training does switched off."""
    saved = dict(state["config"])
    saved.update(graph=graph, placement="cpu", ranks_per_part=1, resume=False,
                 checkpoint_dir=None, metrics_out=None, fail_rank=None, **runtime)
    return saved


def save_checkpoint(folder: str, model, optimizer, history: list[dict], config: dict,
                    info: CheckpointInfo, best: bool, embedding_parts: int = 0) -> None:
    """Write the state after epoch ``len(history) - 1``; also as ``best.pt`` when ``best``.
    ``embedding_parts``: the number of parts whose learnable-embedding shards belong to it
    (written before it), so that they are checked before any rank starts."""
    import torch
    with replacing_file(os.path.join(folder, NAME)) as tmp:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "history": history, "config": config, "graph": info.graph,
                    "resume": info.options, "embedding_parts": embedding_parts}, tmp)
    if best:
        with replacing_file(os.path.join(folder, BEST)) as tmp_best:
            shutil.copyfile(os.path.join(folder, NAME), tmp_best)


def load_checkpoint(folder: str | None, model, optimizer) -> dict | None:
    """Restore model and optimizer from ``folder``; returns the checkpoint (its ``history``
    says how many epochs are done), or None when there is none to resume from. Compatibility
    was checked before the ranks started (:func:`check_resume`)."""
    path = os.path.join(folder, NAME) if folder else None
    if not path or not os.path.exists(path):
        log.warning("--resume: no checkpoint at %s; starting from epoch 0", path)
        return None
    state = _read(path)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as err:
        raise ValueError(f"{path}: the checkpoint's model does not match these options "
                         f"(--hidden, --fanouts, graph): {err}") from None
    optimizer.load_state_dict(state["optimizer"])
    return state


# ---------------------------------------------------------------- learnable embeddings

SHARD = "{stem}.embeddings-part{part}.pt"
PREVIOUS = "{stem}.embeddings-part{part}.prev.pt"


def shard_paths(checkpoint: str, part: int) -> tuple[str, str]:
    """``(current, previous)`` embedding shard files of ``part`` beside ``checkpoint`` (a
    ``.pt`` file: ``best.pt`` has ``best.embeddings-part<p>.pt``)."""
    folder, name = os.path.split(checkpoint)
    stem = name[:-3] if name.endswith(".pt") else name
    return tuple(os.path.join(folder, f.format(stem=stem, part=part))
                 for f in (SHARD, PREVIOUS))


def is_shard_name(name: str) -> bool:
    """Whether ``name`` is an embedding shard (or its partial file) this module writes."""
    return re.fullmatch(r"\.?(checkpoint|best)\.embeddings-part\d+(\.prev)?\.pt(\.partial)?",
                        name) is not None


def save_embedding_shard(checkpoint: str, part: int, epoch: int, state: dict,
                         best: str | None = None) -> None:
    """Write ``part``'s table ``state`` after ``epoch`` beside ``checkpoint`` (and, when
    ``best`` names another checkpoint file, the same shard beside it: a hard link, the file is
    never changed in place), keeping the previous shards (see the module docstring); atomic."""
    import torch
    current = _rotate(checkpoint, part)
    with replacing_file(current) as tmp:
        torch.save({"epoch": epoch, "part": part, **state}, tmp)
    if best:
        with replacing_file(_rotate(best, part)) as tmp:
            try:
                os.link(current, tmp)
            except OSError:         # a file system without hard links
                shutil.copyfile(current, tmp)


def _rotate(checkpoint: str, part: int) -> str:
    """Move ``part``'s current shard beside ``checkpoint`` to the previous one's name; returns
    the current one's path."""
    current, previous = shard_paths(checkpoint, part)
    if os.path.exists(current):
        os.replace(current, previous)
    return current


def check_shards(checkpoint: str, state: dict, flag: str) -> None:
    """Every part's learnable-embedding shard that the checkpoint ``state`` (read from
    ``checkpoint``) records is there, of its epoch (reads each shard's header only). Raises
    CheckpointRefused naming the first part that fails."""
    epoch = state["history"][-1]["epoch"] if state["history"] else -1
    for p in range(state.get("embedding_parts", 0)):
        load_embedding_shard(checkpoint, p, epoch, flag)


def load_embedding_shard(checkpoint: str, part: int, epoch: int, flag: str) -> dict:
    """The table state of ``part`` saved with ``checkpoint`` after ``epoch``. Raises
    CheckpointRefused naming the part, the files and what they hold when none matches."""
    import torch
    found = []
    for path in shard_paths(checkpoint, part):
        if not os.path.exists(path):
            continue
        try:   # mmap: reading the epoch does not read the rows
            state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        except Exception as err:  # noqa: BLE001 - an unreadable shard is refused alike
            found.append(f"{os.path.basename(path)} unreadable ({type(err).__name__})")
            continue
        if state.get("epoch") == epoch and state.get("part") == part:
            return state
        found.append(f"{os.path.basename(path)} of epoch {state.get('epoch')}")
    current = shard_paths(checkpoint, part)[0]
    raise CheckpointRefused(
        f"{flag}: {checkpoint} (epoch {epoch}) has learnable embeddings, but part {part}'s "
        f"shard {current} " + (f"does not match it ({', '.join(found)})" if found else
                               "is missing") + ": it is written by that part's first rank")

