"""What `prep` and the trainer show on the terminal: one log format, progress bars only where
someone watches them.

Shared by both (no torch, no Dask here), so their logs interleave readably in one file.
"""

from __future__ import annotations

import logging
import os
import sys

LOG_FORMAT = "%(asctime)s [{tag}] %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def setup_logging(level: int, tag: str) -> None:
    """Log to stderr with timestamps, tagged ``[prep]``, ``[launcher]``, ``[rank N]``."""
    logging.basicConfig(level=level, stream=sys.stderr, format=LOG_FORMAT.format(tag=tag),
                        datefmt=DATE_FORMAT, force=True)


def show_progress(requested: bool = True) -> bool:
    """Progress bars only when asked for, stderr is a terminal, and ``TQDM_DISABLE`` is unset:
    redirected logs stay free of carriage-return bar updates."""
    if not requested or os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes"):
        return False
    return sys.stderr.isatty()
