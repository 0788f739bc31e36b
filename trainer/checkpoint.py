"""Per-epoch checkpoints: model, optimizer and the epochs' metrics, written atomically.

``DIR/checkpoint.pt`` is replaced after each epoch (written to ``DIR/.checkpoint.pt.partial``
first), so a run killed at any moment resumes from its last finished epoch.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger("trainer")

NAME = "checkpoint.pt"


def save_checkpoint(folder: str, model, optimizer, history: list[dict], config: dict) -> None:
    """Write the state after epoch ``len(history) - 1``."""
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{NAME}.partial")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "history": history, "config": config}, tmp)
    os.replace(tmp, os.path.join(folder, NAME))


def load_checkpoint(folder: str | None, model, optimizer) -> dict | None:
    """Restore model and optimizer from ``folder``; returns the checkpoint (its ``history``
    says how many epochs are done), or None when there is none to resume from."""
    path = os.path.join(folder, NAME) if folder else None
    if not path or not os.path.exists(path):
        log.warning("--resume: no checkpoint at %s; starting from epoch 0", path)
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as err:
        raise ValueError(f"{path}: the checkpoint's model does not match these options "
                         f"(--hidden, --fanouts, graph): {err}") from None
    optimizer.load_state_dict(state["optimizer"])
    return state
