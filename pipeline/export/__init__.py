"""``prep export``: a partitioned graph (FORMATS.md §3) into a peer's partition layout, one
Dask task per part. The exporters import torch (and DGL) inside their tasks only: ``prep``
itself never imports them."""

from __future__ import annotations

import os

from formats import FormatError
from formats.output import MANIFEST, AtomicOutput, fingerprint, make_manifest, write_json
from formats.partitioned import load_partitioned
from formats.storage import is_url
from pipeline.cluster import ClusterOptions, TaskRunner, dask_client
from pipeline.guard import guarded_output
from pipeline.step import up_to_date

TARGETS = ("pyg", "dgl")


def run_export(partitioned: str, out: str, to: str, cluster: ClusterOptions,
               overwrite: bool = False) -> dict | None:
    """Export ``partitioned`` to ``out`` in the layout of ``to`` (one of ``TARGETS``); the
    output appears only when complete. Returns the exporter's counts (None when ``out`` is up
    to date)."""
    if to not in TARGETS:
        raise FormatError(f"unknown export target {to!r} (one of {', '.join(TARGETS)})",
                          field="--to")
    if to == "dgl":
        from .dgl import require_dgl
        require_dgl()                  # before anything is read, started or written
    if is_url(partitioned):
        raise FormatError("export reads a local partitioned graph; copy the parts first",
                          file=partitioned)
    graph = load_partitioned(partitioned)
    if any(info.machine for info in graph.parts) and not all(
            os.path.isdir(graph.part_path(p)) for p in range(graph.num_parts)):
        raise FormatError("the parts live on their machines (--machines); export runs where "
                          "every part folder is readable", file=partitioned)
    manifest = make_manifest("export", {os.path.abspath(partitioned): fingerprint(partitioned)},
                             {"to": to}, None)
    with guarded_output(out, [partitioned]):
        if up_to_date(out, manifest, overwrite):
            return None
        output = AtomicOutput(out)
        with output as tmp, dask_client(cluster) as client:
            runner = TaskRunner(client, cluster.progress)
            if to == "dgl":
                from .dgl import export_dgl as exporter
            else:
                from .pyg import export_pyg as exporter
            result = exporter(graph, tmp, runner)
            result["root"] = os.path.normpath(
                os.path.join(output.final, os.path.relpath(result["root"], tmp)))
            write_json(os.path.join(tmp, MANIFEST), manifest)
            output.commit()
    return result
