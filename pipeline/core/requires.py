"""The optional peer libraries a step runs with (an export's torch and DGL, ``partition
--method kaminpar``'s KaMinPar): checked on the client before any work without importing them
(``prep`` never imports torch), and imported inside the tasks with the same one-line message if
a worker lacks them."""

from __future__ import annotations

import importlib
import importlib.util
import sys

from graphprep.formats import FormatError


def importable(name: str) -> bool:
    """Whether module ``name`` can be imported here, found without importing it."""
    if name in sys.modules:
        return sys.modules[name] is not None     # None: imports of it are blocked
    return importlib.util.find_spec(name) is not None


def require(names: tuple[str, ...], message: str, field: str = "--to") -> None:
    """FormatError (naming the option ``field``) saying ``message`` unless every one of
    ``names`` is importable here."""
    missing = [n for n in names if not importable(n)]
    if missing:
        raise FormatError(f"{message} (missing here: {', '.join(missing)})", field=field)


def import_in_task(name: str, message: str, field: str = "--to"):
    """``import name`` inside a task; a worker without it fails with ``message`` (naming the
    option ``field``)."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise FormatError(f"{message}: {err}", field=field) from None
