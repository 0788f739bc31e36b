"""What every fault-injection test (``pytest -m faults``) asserts: the exit code, a message that
names the culprit, no traceback, and nothing lost (input and previous output bytes unchanged).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOW_PRIVILEGED_SKIPS = "GRAPHPREP_ALLOW_PRIVILEGED_SKIPS"


def needs_privilege(why: str | None) -> None:
    """For a case that needs root's capabilities (network namespaces, mounts): nothing when
    ``why`` is None (they are there). Otherwise skip, naming ``why``, as a non-root user; as
    root (this project's machines and CI) the capability is expected, so its absence fails
    the case instead of hiding it, unless ``GRAPHPREP_ALLOW_PRIVILEGED_SKIPS=1`` says this
    root lacks it (a rootless container)."""
    if why is None:
        return
    if os.geteuid() != 0 or os.environ.get(ALLOW_PRIVILEGED_SKIPS) == "1":
        pytest.skip(why)
    pytest.fail(f"{why}: running as root, this case must run here (set "
                f"{ALLOW_PRIVILEGED_SKIPS}=1 to skip it where root lacks the capability)",
                pytrace=False)


def tree_hash(path) -> str:
    """sha256 over every file's relative path and bytes under ``path`` (or of one file)."""
    path = str(path)
    h = hashlib.sha256()
    if os.path.isfile(path):
        files = [path]
        base = os.path.dirname(path)
    else:
        files = sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
        base = path
    for f in files:
        h.update(os.path.relpath(f, base).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def private_copies(base, dest, names=("G", "A", "D")):
    """Copy the read-only fixture folders ``names`` of ``base`` into ``dest``; returns dest."""
    for name in names:
        shutil.copytree(os.path.join(base, name), os.path.join(dest, name))
    return dest


def hashes(*paths) -> list[str]:
    return [tree_hash(p) for p in paths]


def prep_fails(scheduler, *args, code: int, names=(), cluster: bool = True):
    """Run ``prep *args`` in process (on the session cluster); assert it exits ``code`` with a
    message containing every string of ``names`` and no traceback. Returns the output."""
    from graphprep.pipeline.cli import prep as cli

    extra = ["--no-progress"] + (["--scheduler", scheduler] if cluster else [])
    result = CliRunner().invoke(cli, [str(a) for a in args] + extra)
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit) or code == 0, \
        f"uncaught {result.exception!r}: {result.output}"
    assert "Traceback" not in result.output, result.output
    for name in names:
        assert str(name) in result.output, (name, result.output)
    return result.output


PREP = os.path.join(os.path.dirname(sys.executable), "prep")


def run_cli(*args, trainer: bool = False, timeout: float = 300, cwd=None, **kwargs):
    """Run ``prep *args`` (or ``python -m graphprep.trainer *args``) as a real process in ``cwd``
    (default: the repository); returns the CompletedProcess (text). For kills, signals and
    exit codes as a shell sees them."""
    cmd = [sys.executable, "-m", "graphprep.trainer"] if trainer else [PREP]
    env = kwargs.pop("env", None) or dict(os.environ)
    if cwd is not None:     # `python -m graphprep.trainer` must still import this checkout
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return subprocess.run([*cmd, *map(str, args)], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env, **kwargs)


def assert_clean_exit(proc, code: int, names=()):
    """A real process exited ``code``, naming ``names`` on stderr/stdout, with no traceback."""
    text = proc.stdout + proc.stderr
    assert proc.returncode == code, (proc.returncode, text[-3000:])
    assert "Traceback" not in text, text[-3000:]
    for name in names:
        assert str(name) in text, (name, text[-3000:])
    return text
