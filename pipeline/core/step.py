"""What every step that writes a folder shares: rerun semantics and the finishing checks.

A rerun of a step whose output exists with the same manifest (same step, inputs, options and
seed) does nothing; an output made differently is refused unless ``overwrite``.
"""

from __future__ import annotations

import logging
import os
import shutil

from graphprep.formats import FormatError, load_chunked_graph, validate_chunked_graph
from graphprep.formats.output import MANIFEST, read_manifest, same_work, side_paths, write_json
from graphprep.formats.schema import METADATA, ChunkedGraph

log = logging.getLogger(__name__)


def up_to_date(out: str, manifest: dict, overwrite: bool) -> bool:
    """True when ``out`` already holds this exact work; raises when it holds other work."""
    if not os.path.exists(out):
        return False
    if not overwrite and same_work(read_manifest(out), manifest):
        log.info("%s is up to date (same inputs and options); nothing to do", out)
        shutil.rmtree(side_paths(out)[0], ignore_errors=True)   # debris of a killed rerun
        return True
    if not overwrite:
        raise FormatError("output folder exists and was not made by this exact command; "
                          "pass --overwrite to replace it", file=out)
    return False


def finish_chunked(graph: ChunkedGraph, tmp: str, manifest: dict, runner,
                   nan_policy: str = "error") -> ChunkedGraph:
    """Write metadata and manifest into ``tmp`` and validate what was written (metadata, then
    every chunk as one task each). Returns the graph as loaded back from ``tmp``."""
    write_json(os.path.join(tmp, METADATA), graph.to_json())
    written = load_chunked_graph(tmp)
    validate_chunked_graph(written, nan_policy=nan_policy,
                           runner=lambda fn, items: runner(fn, items, "validate"))
    write_json(os.path.join(tmp, MANIFEST), manifest)
    return written
