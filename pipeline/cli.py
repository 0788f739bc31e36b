"""The ``prep`` command line: one click group, one sub-command per step.

Exit codes: 0 success, 2 bad input or usage (the message names file, field and row), 1 other.
"""

from __future__ import annotations

import functools
import logging
import sys

import click

from formats import FormatError
from .cluster import ClusterOptions


class InputError(click.ClickException):
    exit_code = 2


class PrepGroup(click.Group):
    """Turns :class:`FormatError` from any step into a clean message and exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except FormatError as err:
            raise InputError(str(err)) from None


def cluster_options(fn):
    """The options every Dask step shares; passes ``cluster: ClusterOptions``."""
    @click.option("--scheduler", metavar="ADDR", default=None,
                  help="Address of an existing Dask scheduler (tcp://HOST:PORT). "
                       "Default: start an embedded local cluster.")
    @click.option("--workers", type=click.IntRange(1), default=2, show_default=True,
                  help="Worker processes of the embedded cluster (1 thread each).")
    @click.option("--memory-limit", default="auto", show_default=True,
                  help="Memory limit per embedded worker, e.g. 4GiB; 'auto' splits system memory.")
    @click.option("--progress/--no-progress", default=True, show_default=True,
                  help="Show progress bars on stderr.")
    @click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
    @functools.wraps(fn)
    def wrapper(*args, scheduler, workers, memory_limit, progress, verbose, **kwargs):
        _setup_logging(verbose)
        cluster = ClusterOptions(scheduler, workers, memory_limit, progress)
        return fn(*args, cluster=cluster, **kwargs)
    return wrapper


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", force=True)


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
      prep partition CHUNKED OUT -p P         partition assignment (random, metis) + stats
      prep dispatch CHUNKED ASSIGNMENT OUT    per-part graph delivered to machines or URLs
      prep verify CHUNKED PARTITIONED         check every edge and node survived
    """


def main():  # console-script entry point
    prep(prog_name="prep")


from . import commands  # noqa: E402,F401  (registers the sub-commands)

if __name__ == "__main__":
    sys.exit(main())
