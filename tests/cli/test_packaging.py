"""One import package, ``graphprep``, over the repository's fixed top-level folders: the
installed distribution lists every folder of source, the bare folder names do not import, and
a user's own ``trainer.py``, ``formats.py`` or ``pipeline.py`` changes nothing."""
import os
import subprocess
import sys
import tomllib

import pytest

from conftest import ROOT  # noqa: E402  (the repository)
TOP = ("formats", "pipeline", "dispatch", "trainer")


def _pyproject() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_every_source_folder_is_a_listed_package():
    tool = _pyproject()["tool"]["setuptools"]
    assert tool["package-dir"] == {f"graphprep.{name}": name for name in TOP}
    folders = {"graphprep." + os.path.relpath(d, ROOT).replace(os.sep, ".")
               for name in TOP for d, _, files in os.walk(os.path.join(ROOT, name))
               if "__pycache__" not in d and any(f.endswith(".py") for f in files)}
    assert folders == set(tool["packages"])


@pytest.mark.parametrize("name", TOP)
def test_bare_folder_names_do_not_import(name):
    """From the repository's root, where the folders are on ``sys.path``."""
    done = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert f"import graphprep.{name}, not {name}" in done.stderr


def test_users_own_modules_of_our_folder_names_change_nothing(tmp_path):
    for name in (*TOP, "prep"):
        (tmp_path / f"{name}.py").write_text(f'raise ImportError("the user\'s own {name}.py")\n')
    for cmd in ([sys.executable, "-m", "graphprep.trainer", "--help"],
                [sys.executable, "-m", "graphprep.trainer", "embed", "--help"],
                [sys.executable, "-m", "graphprep.pipeline.cli", "--help"],
                [sys.executable, "-c", "import graphprep.pipeline.api, graphprep.dispatch.verify"]):
        done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, (cmd, done.stderr[-2000:])
        assert "user's own" not in done.stderr


def test_console_scripts_run():
    scripts = _pyproject()["project"]["scripts"]
    assert set(scripts) == {"prep", "graphprep-trainer"}
    bindir = os.path.dirname(sys.executable)
    for script, usage in (("prep", "Usage: prep"), ("graphprep-trainer", "Usage: graphprep-trainer")):
        done = subprocess.run([os.path.join(bindir, script), "--help"], capture_output=True,
                              text=True)
        assert done.returncode == 0 and done.stdout.startswith(usage), done.stderr[-2000:]
    embed = subprocess.run([os.path.join(bindir, "graphprep-trainer"), "embed", "--help"],
                           capture_output=True, text=True)
    assert embed.stdout.startswith("Usage: graphprep-trainer embed"), embed.stderr[-2000:]
