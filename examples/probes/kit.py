"""A misuse case and how it is judged: the command a new user might type on bad input, the
exit code it must end with, and the names its one-line message must carry.

A case passes when the process exits with ``code``, prints no traceback, and (on failure) its
last non-empty output line names every string of ``names``: the culprit comes last, in one
line, as a user reads a terminal. ``check`` adds what a success must leave behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Case:
    """One misuse: ``setup(folder)`` writes its inputs under ``folder`` and returns the command
    (``["prep", ...]`` or ``["trainer", ...]``); the command runs in ``folder``."""

    name: str
    setup: Callable[[Path], Sequence[str]]
    code: int = 2
    names: tuple[str, ...] = ()
    check: Callable[[Path, str], None] | None = None
    timeout: float = 300
    env: dict = field(default_factory=dict)


def command(argv: Sequence[str]) -> list[str]:
    """``prep`` -> this venv's prep script; ``trainer`` -> ``python -m graphprep.trainer`` where
    that package exists, else ``python -m graphprep.trainer``."""
    head, *rest = argv
    if head == "prep":
        return [str(BIN / "prep"), *map(str, rest)]
    if head == "trainer":
        return [sys.executable, "-m", trainer_module(), *map(str, rest)]
    return [str(head), *map(str, rest)]


def trainer_module() -> str:
    import importlib.util
    return "graphprep.trainer" if importlib.util.find_spec("graphprep") else "trainer"


def last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def judge(case: Case, returncode: int, output: str, folder: Path) -> str | None:
    """None when the case passed, else why not (one line)."""
    if returncode != case.code:
        return f"exit {returncode}, expected {case.code}: {last_line(output)[:300]}"
    if "Traceback" in output:
        return "a traceback was printed"
    if case.code != 0:
        line = last_line(output)
        missing = [n for n in case.names if str(n) not in line]
        if missing:
            return f"last line misses {missing}: {line[:300]}"
    if case.check is not None:
        try:
            case.check(folder, output)
        except AssertionError as err:
            return f"check failed: {err}"
    return None


def run_case(case: Case, folder: Path, scheduler: str | None = None) -> tuple[str | None, float]:
    """Run ``case`` in ``folder``; returns (why it failed or None, seconds)."""
    import time
    folder.mkdir(parents=True, exist_ok=True)
    argv = list(case.setup(folder))
    if scheduler and argv[0] == "prep" and "--scheduler" not in argv and _takes_cluster(argv):
        argv += ["--scheduler", scheduler]
    env = {**os.environ, "TQDM_DISABLE": "1", **case.env}
    start = time.perf_counter()
    try:
        proc = subprocess.run(command(argv), cwd=folder, capture_output=True, text=True,
                              timeout=case.timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"hung: no exit within {case.timeout:.0f} s", time.perf_counter() - start
    seconds = time.perf_counter() - start
    return judge(case, proc.returncode, proc.stdout + proc.stderr, folder), seconds


_NO_CLUSTER = {"inspect", "report", "validate"}


def _takes_cluster(argv: Sequence[str]) -> bool:
    return len(argv) > 1 and argv[1] not in _NO_CLUSTER and "--help" not in argv


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (parents made); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
