"""The ``prep`` command line: one click group, one sub-command per step.

Exit codes: 0 success, 2 bad input or usage (the message names file, field and row), 1 other.
"""

from __future__ import annotations

import logging

import click

from graphprep.formats import FormatError
from graphprep.pipeline.core.cli_types import OneLineErrors
from graphprep.pipeline.commands import COMMANDS

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


for _command in COMMANDS:   # defined in pipeline/commands.py, which does not import this module
    prep.add_command(_command)

if __name__ == "__main__":   # `python -m graphprep.pipeline.cli`
    main()
