"""What ``prep`` and the trainer share on their command lines: option types that refuse what
no computation can use, and errors in one line.

* :class:`FiniteFloat`: ``click.FloatRange`` that also refuses NaN and inf (NaN fails every
  comparison, so a plain range lets it through to the work).
* :class:`OneLineErrors`: a usage error is one line, ``Error: ...`` (exit 2) naming the
  option and the value, with the ``-h`` hint on the same line; click's usage block is gone.
"""

from __future__ import annotations

import math
import sys

import click


class FiniteFloat(click.FloatRange):
    """A float within ``[min, max]`` (open ends as ``click.FloatRange``), never NaN or inf."""

    name = "float"

    def convert(self, value, param, ctx):
        rv = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number (expected {self._describe_range()})"
                      if (self.min, self.max) != (None, None) else
                      f"{value!r} is not a finite number", param, ctx)
        return super().convert(rv, param, ctx)


class OneLineErrors:
    """Mixin for a click ``Command`` or ``Group``: usage errors and aborts end in one line.

    ``class Cmd(OneLineErrors, click.Command)``; the exit codes are click's (2 for usage)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False,
                                **extra)
        except click.ClickException as err:
            click.echo(f"Error: {one_line(err)}", err=True)
            sys.exit(err.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)


def one_line(err: click.ClickException) -> str:
    """The message of ``err``; a usage error's on one line, with its command's ``-h`` hint."""
    text = err.format_message()
    ctx = getattr(err, "ctx", None)
    if isinstance(err, click.UsageError):
        text = " ".join(text.split())
        if ctx is not None:
            text += f" (see '{ctx.command_path} -h')"
    return text
