"""The ``prep`` command line: one click group, one sub-command per step.

Exit codes: 0 success, 2 bad input or usage (the message names file, field and row), 1 other.
"""

from __future__ import annotations

import functools
import logging
import os
import sys

import click

from graphprep.formats import FormatError
from graphprep.pipeline.core.cli_types import FiniteFloat, OneLineErrors
from graphprep.pipeline.core.console import setup_logging, show_progress
from graphprep.pipeline.core.cluster import (AUTO_RECYCLE_MB, LOST_WORKER_TIMEOUT_KEY, LOST_WORKER_TIMEOUT_S,
                      RECYCLE_MB_KEY, ClusterOptions, tls_security)

log = logging.getLogger("graphprep.pipeline")


class InputError(click.ClickException):
    exit_code = 2


class EnvironmentFault(click.ClickException):
    exit_code = 1


class PrepGroup(OneLineErrors, click.Group):
    """Every failure of a step ends in one line and an exit code, never a bare traceback
    (``-v`` adds it): :class:`FormatError` -> 2 (bad input: file, field, row); a full disk, a
    lost worker or any other fault -> 1; a bad option -> 2, one line naming it."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except FormatError as err:
            raise InputError(str(err)) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except Exception as err:  # noqa: BLE001 - turned into one line naming the cause
            if logging.getLogger().level <= logging.INFO:
                log.error("traceback", exc_info=err)
            raise EnvironmentFault(describe_failure(err)) from None


def describe_failure(err: BaseException) -> str:
    """One line naming the cause of an unexpected failure."""
    from graphprep.formats.output import disk_full_error, is_disk_full
    from graphprep.pipeline.core.cluster import ClusterFault

    if is_disk_full(err):
        if err.errno is not None and str(err.strerror).startswith("no space left on "):
            return str(err.strerror)
        where = getattr(err, "filename", None)
        return str(disk_full_error(where).strerror) if where else f"no space left: {err}"
    if isinstance(err, ClusterFault):
        return str(err)
    name = type(err).__name__
    if name == "KilledWorker":  # distributed: the task's workers kept dying
        return f"a task killed its Dask worker repeatedly (out of memory?): {err}"
    return f"{name}: {err} (-v shows the traceback)"


def _recycle_mb(ctx, param, value):
    if value == "auto":
        return value
    try:
        mb = int(value)
    except ValueError:
        mb = -1
    if mb < 0:
        raise click.BadParameter(f"{value!r}: a number of MB (0: never) or 'auto'")
    return mb


def cluster_options(fn):
    """The options every Dask step shares; passes ``cluster: ClusterOptions``."""
    @click.option("--scheduler", metavar="ADDR", default=None,
                  help="Address of an existing Dask scheduler (tcp://HOST:PORT, or tls://HOST:PORT "
                       "with the --tls-* options). Default: start an embedded local cluster on "
                       "127.0.0.1.")
    @click.option("--tls-ca-file", type=click.Path(dir_okay=False), default=None,
                  help="With a tls:// --scheduler: the CA certificate (PEM) that signed the "
                       "scheduler's and workers' certificates [default: Dask's configuration, "
                       "distributed.comm.tls.ca-file].")
    @click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
                  help="With a tls:// --scheduler: this client's certificate (PEM), signed by "
                       "that CA [default: Dask's configuration].")
    @click.option("--tls-key", type=click.Path(dir_okay=False), default=None,
                  help="The private key of --tls-cert (PEM) [default: in the --tls-cert file].")
    @click.option("--workers", type=click.IntRange(1), default=2, show_default=True,
                  help="Worker processes of the embedded cluster (1 thread each).")
    @click.option("--memory-limit", default="auto", show_default=True,
                  help="Memory limit per embedded worker, e.g. 4GiB; 'auto' splits system memory.")
    @click.option("--progress/--no-progress", default=True, show_default=True,
                  help="Show progress bars on stderr (only when it is a terminal and "
                       "TQDM_DISABLE is unset).")
    @click.option("--lost-worker-timeout", type=FiniteFloat(1), default=LOST_WORKER_TIMEOUT_S,
                  metavar="SECONDS",
                  help="A worker that left the cluster while tasks pinned to it (a --machines "
                       "name) or all work waited for it: fail naming it after this long. "
                       "Unpinned tasks of a lost worker are rerun elsewhere at once.")
    @click.option("--recycle-mb", default="auto", show_default=True, callback=_recycle_mb,
                  metavar="MB|auto",
                  help="Restart a worker between two passes of a step when it holds more than "
                       "this much anonymous memory: freed heap that its next tasks would only "
                       "fragment further (passes share files, so nothing is lost; ~1 s a "
                       f"restart). auto: {AUTO_RECYCLE_MB} on the embedded cluster, never on a "
                       "--scheduler cluster, whose workers may serve others (a restart needs "
                       "their nannies). 0: never.")
    @click.option("-v", "--verbose", count=True,
                  help="More log output (-v info and tracebacks of failures, -vv debug).")
    @functools.wraps(fn)
    def wrapper(*args, scheduler, tls_ca_file, tls_cert, tls_key, workers, memory_limit,
                progress, lost_worker_timeout, recycle_mb, verbose, **kwargs):
        import dask

        _setup_logging(verbose)
        security = tls_security(scheduler, tls_ca_file, tls_cert, tls_key)
        cluster = ClusterOptions(scheduler, workers, memory_limit, show_progress(progress),
                                 security=security)
        with dask.config.set({LOST_WORKER_TIMEOUT_KEY: lost_worker_timeout,
                              RECYCLE_MB_KEY: recycle_mb}):
            return fn(*args, cluster=cluster, **kwargs)
    return wrapper


def local_path(ctx, param, value):
    """Click callback: a local path made absolute (Dask workers do not share our working
    directory); URLs and None unchanged."""
    if value is None or "://" in str(value):
        return value
    return os.path.abspath(value)


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    setup_logging(level, "prep")


@click.group(cls=PrepGroup, context_settings={"help_option_names": ["-h", "--help"],
                                              "show_default": True})
@click.version_option(package_name="graphprep")
def prep():
    """graphprep: prepare a graph too big for one machine for distributed GNN training.

    \b
    Steps (each a Dask job over chunks):
      prep synth OUT           synthetic graph, straight into the chunked format
      prep chunk INPUT OUT     raw input (CSV/Parquet/NumPy/OGB/Planetoid/PyG/DGL) -> chunked
      prep validate CHUNKED    check a chunked graph (metadata and every chunk)
      prep partition CHUNKED OUT -p P         partition assignment (random, metis,
                                              multilevel, auto) + stats
      prep dispatch CHUNKED ASSIGNMENT OUT    per-part graph delivered to machines or URLs
      prep verify CHUNKED PARTITIONED         check every edge and node survived
      prep split-edges CHUNKED OUT --etype T  held-out edges for link prediction
      prep export PARTITIONED OUT --to pyg|dgl   PyG's or DGL's partition layout
      prep export CHUNKED OUT --to dgl-chunked   DGL's chunked format
      prep report PATH... --out report.html   HTML page of tables and plots

    \b
    Metadata only (no cluster):
      prep inspect PATH        what a chunked graph, assignment, partitioned graph or
                               trainer metrics file holds (counts, stats, sizes)
    """


def main():  # console-script entry point
    prep(prog_name="prep")


from graphprep.pipeline import commands  # noqa: E402,F401  (registers the sub-commands)

if __name__ == "__main__":   # `python -m graphprep.pipeline.cli`: the commands registered on the
    from graphprep.pipeline.cli import main as _main   # imported module's group, not on __main__'s
    sys.exit(_main())
