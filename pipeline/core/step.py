"""What every step that writes a folder shares, declared once: :func:`run_step`.

The skeleton of a step: its manifest (step, fingerprinted inputs, options, seed) -> the guard
of its output (no aliasing of an input, one run at a time) -> nothing to do when the output
holds this exact work -> a side folder to write into and a Dask cluster with its task runner ->
the step's own body -> the finishing writes (manifest; for a chunked graph also its metadata and
its validation) -> the side folder swapped into place. A rerun of a step whose output exists
with the same manifest does nothing; an output made differently is refused unless
``overwrite``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from contextlib import ExitStack
from typing import Callable, Sequence, TypeVar

from graphprep.formats import FormatError, load_chunked_graph, validate_chunked_graph
from graphprep.formats.guard import guarded_output
from graphprep.formats.output import (MANIFEST, AtomicOutput, fingerprint, make_manifest,
                                      read_manifest, same_work, side_paths, write_json)
from graphprep.formats.schema import METADATA, ChunkedGraph
from graphprep.pipeline.core.cluster import ClusterOptions, TaskRunner, dask_client

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


T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Work:
    """What a step's body works with: the side folder it writes into (``tmp``), the task
    runner on the step's cluster (``run``; its client is ``run.client``), the manifest, and
    where the output appears once committed (``final``)."""

    tmp: str
    run: TaskRunner
    manifest: dict
    final: str


class StepOutput:
    """Where a step builds its output and how it is put in place; :func:`run_step` calls, in
    order, ``current`` (before the guard), ``up_to_date`` (under the guard), ``open`` (the
    side folder, a context manager giving its path), ``commit`` (on the cluster, at the end of
    the block) and ``deliver`` (after the guard).

    This one, every step's but dispatch's: the local folder ``out``, built afresh in
    ``.OUT.partial`` beside it and swapped in whole (:class:`AtomicOutput`: a failure removes
    the side folder, a previous output stays as it was). ``graphprep.dispatch.job`` subclasses
    it: its side folder is resumed after a kill, its parts live on several machines, and a URL
    output is built in a local staging folder and uploaded."""

    workers: tuple[str, ...] = ()       # names of the workers the cluster must have

    def __init__(self, out: str):
        self.out, self.folder, self.final = out, out, os.path.abspath(out)
        self._atomic: AtomicOutput | None = None

    def current(self, manifest: dict, overwrite: bool) -> bool:
        """Before the guard: True when the output is known to hold this work elsewhere."""
        return False

    def up_to_date(self, manifest: dict, overwrite: bool) -> bool:
        return up_to_date(self.out, manifest, overwrite)

    def open(self, manifest: dict):
        self._atomic = AtomicOutput(self.out)           # refuses a URL
        return self._atomic

    def commit(self, run: TaskRunner) -> None:
        self._atomic.commit()

    def deliver(self) -> None:
        """After the guard, once committed: where the output goes from ``folder``."""


def fingerprints(paths: Sequence[str]) -> dict[str, str]:
    """A manifest's inputs: each path, made absolute, with its :func:`fingerprint`."""
    return {os.path.abspath(p): fingerprint(p) for p in paths}


def write_manifest(result: T, work: Work) -> T:
    """The finish of a step whose body wrote all but the manifest: ``manifest.json``."""
    write_json(os.path.join(work.tmp, MANIFEST), work.manifest)
    return result


def finish_chunked(graph: ChunkedGraph, work: Work, nan_policy: str = "error") -> ChunkedGraph:
    """The finish of a step that writes a chunked graph: its metadata and manifest written
    into ``work.tmp`` and what was written validated (metadata, then every chunk as one task
    each). Returns the graph as loaded back, rooted where it appears (``work.final``)."""
    write_json(os.path.join(work.tmp, METADATA), graph.to_json())
    written = load_chunked_graph(work.tmp)
    validate_chunked_graph(written, nan_policy=nan_policy,
                           runner=lambda fn, items: work.run(fn, items, "validate"))
    write_json(os.path.join(work.tmp, MANIFEST), work.manifest)
    return dataclasses.replace(written, root=work.final)


def run_step(step: str, out: str | StepOutput, cluster: ClusterOptions,
             body: Callable[[Work], T], *, options: dict, inputs: Sequence[str] = (),
             fingerprinted: Sequence[str] | None = None, seed: int | None = None,
             overwrite: bool = False, finish: Callable[[T, Work], T] = write_manifest,
             before: Callable[[], None] | None = None,
             check: Callable[[TaskRunner], None] | None = None) -> T | None:
    """Run the step ``step`` into ``out`` (a folder, or a :class:`StepOutput`); returns what
    ``finish(body(work), work)`` returns, or None when ``out`` already holds this exact work.

    ``inputs``: the paths the step reads (``out`` may not alias them); they, or only
    ``fingerprinted`` where given, are fingerprinted into the manifest with ``options`` and
    ``seed``. ``before``: runs once the output is to be (re)made, before its side folder and
    the cluster exist (refusals of what cannot fit). ``check``: tasks run before the side
    folder is made (checks of the inputs); the cluster then starts first. ``body`` writes into
    ``work.tmp``; ``finish`` writes the manifest (:func:`write_manifest`, or
    :func:`finish_chunked` for a chunked graph) before the side folder is committed."""
    fingerprinted = inputs if fingerprinted is None else fingerprinted
    manifest = make_manifest(step, fingerprints(fingerprinted), options, seed)
    output = out if isinstance(out, StepOutput) else StepOutput(out)
    if output.current(manifest, overwrite):
        return None
    with guarded_output(output.folder, inputs):
        if output.up_to_date(manifest, overwrite):
            return None
        if before is not None:
            before()
        side = output.open(manifest)
        with ExitStack() as stack:
            tmp = stack.enter_context(side) if check is None else None
            run = TaskRunner(stack.enter_context(dask_client(cluster, output.workers)),
                             cluster.progress)
            if check is not None:
                check(run)
                tmp = stack.enter_context(side)
            work = Work(tmp, run, manifest, output.final)
            result = finish(body(work), work)
            output.commit(run)
    output.deliver()
    return result
