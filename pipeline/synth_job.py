"""The ``prep synth`` Dask job: one task per chunk, then metadata, manifest, validation."""

from __future__ import annotations

import dataclasses
import logging

from formats.output import AtomicOutput, make_manifest
from .cluster import ClusterOptions, TaskRunner, dask_client
from formats.guard import guarded_output
from .step import finish_chunked, up_to_date
from .synth import SynthSpec, plan, write_synth_chunk

log = logging.getLogger(__name__)


def run_synth(spec: SynthSpec, out: str, chunk_size: int, cluster: ClusterOptions,
              overwrite: bool = False):
    """Write the graph of ``spec`` into ``out``; returns the loaded graph (None if up to date).

    Each task generates and writes one chunk; the client holds only metadata.
    """
    options = spec.manifest_options()
    options["chunk_size"] = chunk_size
    manifest = make_manifest("synth", {}, options, spec.seed)
    with guarded_output(out, ()):
        if up_to_date(out, manifest, overwrite):
            return None
        output = AtomicOutput(out)
        with output as tmp, dask_client(cluster) as client:
            runner = TaskRunner(client, cluster.progress)
            edge_tasks, node_tasks, graph = plan(spec, tmp, chunk_size)
            runner(write_synth_chunk, node_tasks + edge_tasks, "synth")
            graph = finish_chunked(graph, tmp, manifest, runner)
            output.commit()
    return dataclasses.replace(graph, root=output.final)
