"""``prep export``: a graphprep output into a peer's layout. ``pyg`` and ``dgl`` take a
partitioned graph (FORMATS.md §3), one Dask task per part; ``dgl-chunked`` takes a chunked
graph (§1), one task per chunk file. The exporters import torch (and DGL) inside their tasks
only: ``prep`` itself never imports them.

Before ``pyg``/``dgl`` write anything, every part gets the trainer's check
(:func:`graphprep.formats.part_checks.check_part`: sizes, structure, sampled hashes), one task per part:
the exporters index per-ID arrays with the parts' IDs, so a damaged part must stop the export
with a FormatError naming its file (exit 2), not an IndexError in a task or a wrong output."""

from __future__ import annotations

import logging
import os

from graphprep.formats import ChunkedGraph, FormatError, load_chunked_graph
from graphprep.formats.output import link_files, write_json
from graphprep.formats.partitioned import GRAPH_JSON, load_partitioned
from graphprep.formats.schema import METADATA
from graphprep.formats.storage import is_url
from graphprep.pipeline.core.cluster import ClusterOptions
from graphprep.pipeline.core.step import Work, run_step

log = logging.getLogger(__name__)

TARGETS = ("pyg", "dgl", "dgl-chunked")
CHUNKED_TARGETS = ("dgl-chunked",)     # these read a chunked graph, the others a partitioned one


def run_export(source: str, out: str, to: str, cluster: ClusterOptions,
               overwrite: bool = False) -> dict | None:
    """Export ``source`` to ``out`` in the layout of ``to`` (one of ``TARGETS``): a
    partitioned graph for ``pyg``/``dgl``, a chunked graph for ``dgl-chunked``. The output
    appears only when complete. Returns the exporter's counts (None when ``out`` is up to
    date)."""
    if to not in TARGETS:
        raise FormatError(f"unknown export target {to!r} (one of {', '.join(TARGETS)})",
                          field="--to")
    if to == "dgl":
        from graphprep.pipeline.export.dgl import require_dgl
        require_dgl()                  # before anything is read, started or written
    if to == "pyg":
        from graphprep.pipeline.export.pyg import require_torch
        require_torch()
    if is_url(source):
        kind = "chunked" if to in CHUNKED_TARGETS else "partitioned"
        raise FormatError(f"export reads a local {kind} graph; copy it first", file=source)
    check_input_kind(source, to)
    graph = load_chunked_graph(source) if to in CHUNKED_TARGETS else _load_parts(source)

    def check(run) -> None:                   # before OUT's side folder is even made
        if to not in CHUNKED_TARGETS:
            check_parts(graph, run)

    def body(work: Work) -> dict:
        result = _exporter(to)(graph, work.tmp, work.run)
        _carry_keys(graph, work.tmp)
        result["root"] = os.path.normpath(
            os.path.join(work.final, os.path.relpath(result["root"], work.tmp)))
        return result

    return run_step("export", out, cluster, body, options={"to": to}, inputs=[source],
                    overwrite=overwrite, check=check)


def _carry_keys(graph, out: str) -> None:
    """A keyed graph's key maps (in original-ID order) and vocabularies, linked into the
    export beside the peer's layout, with ``keys.json`` naming them (FORMATS.md §5): the
    peers' node IDs are our original IDs, so row i of a type's keys is node i's key."""
    keys = ({t: m.by_id_json() for t, m in graph.keys.items()}
            if isinstance(graph, ChunkedGraph) else dict(graph.keys))
    if not keys:
        return
    vocab = {o: dict(d) for o, d in graph.vocab.items()}
    link_files(graph.root, [f for k in keys.values() for f in k["by_id"]] +
               [f for d in vocab.values() for f in d.values()], out)
    write_json(os.path.join(out, "keys.json"), {"keys": keys, "vocab": vocab})


def _check_part(task) -> list[str]:
    """Task: the trainer's check of one part (FormatError naming the file); its warnings."""
    from graphprep.formats.part_checks import check_part

    graph, p = task
    return check_part(graph, p, verify_data=False).warnings


def check_parts(graph, runner) -> None:
    """Every part of ``graph`` checked as the trainer checks it, one task per part; raises
    the first part's FormatError (naming the damaged file), logs the warnings."""
    reports = runner(_check_part, [(graph, p) for p in range(graph.num_parts)], "check parts")
    for warning in (w for ws in reports for w in ws):
        log.warning("%s", warning)


def check_input_kind(source: str, to: str) -> None:
    """A :class:`FormatError` naming the file that ``to`` needs when ``source`` is the other
    kind of graph (a chunked graph given to ``pyg``/``dgl``, a partitioned one to
    ``dgl-chunked``). Anything else is left to the loaders' own messages."""
    folder = os.path.dirname(source) if source.endswith(".json") else source
    has_chunked = os.path.exists(os.path.join(folder, METADATA))
    has_parts = os.path.exists(os.path.join(folder, GRAPH_JSON))
    if to in CHUNKED_TARGETS and not has_chunked and (has_parts or source.endswith(".json")):
        raise FormatError(f"not found: --to {to} exports a chunked graph (the folder with "
                          f"metadata.json that prep synth/chunk write); {source} is a "
                          "partitioned graph (graph.json): pass the chunked graph it was "
                          "made from", file=os.path.join(folder, METADATA))
    if to not in CHUNKED_TARGETS and has_chunked and not has_parts:
        raise FormatError(f"not found: --to {to} exports a partitioned graph (the output of "
                          f"prep dispatch); {source} is a chunked graph (metadata.json): "
                          "partition and dispatch it first, or use --to dgl-chunked for DGL's "
                          "chunked format", file=os.path.join(folder, GRAPH_JSON))


def _load_parts(partitioned: str):
    """The partitioned graph, when every part folder is readable here."""
    graph = load_partitioned(partitioned)
    if any(info.machine for info in graph.parts) and not all(
            os.path.isdir(graph.part_path(p)) for p in range(graph.num_parts)):
        raise FormatError("the parts live on their machines (--machines); export runs where "
                          "every part folder is readable", file=partitioned)
    return graph


def _exporter(to: str):
    """The function that writes target ``to``: ``(graph, tmp folder, runner) -> counts``."""
    if to == "dgl":
        from graphprep.pipeline.export.dgl import export_dgl
        return export_dgl
    if to == "dgl-chunked":
        from graphprep.pipeline.export.dgl_chunked import export_dgl_chunked
        return export_dgl_chunked
    from graphprep.pipeline.export.pyg import export_pyg
    return export_pyg
