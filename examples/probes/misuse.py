"""Run the misuse probe: every case of ``cases_*.py`` beside this file, each in its own folder,
and print JSON: how many passed, and each failure with why.

    python examples/probes/misuse.py [--only SUBSTRING] [--scheduler ADDR] [--keep DIR]

Each case is one command a new user might type on bad input (see ``kit.py`` for how it is
judged). ``--scheduler`` runs the prep cases on an existing Dask cluster (faster than an
embedded one per case).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import click

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kit import run_case  # noqa: E402


def all_cases():
    """(module name, case) for every ``CASES`` list in ``cases_*.py``."""
    for path in sorted(HERE.glob("cases_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for case in module.CASES:
            yield path.stem.removeprefix("cases_"), case


@click.command()
@click.option("--only", default="", help="Run only cases whose 'area/name' contains this.")
@click.option("--scheduler", default=None, help="Dask scheduler for the prep cases "
              "(default: each command starts its own embedded cluster).")
@click.option("--keep", type=click.Path(file_okay=False), default=None,
              help="Keep each case's folder under this directory (default: a temporary one).")
def main(only, scheduler, keep):
    """Run the misuse probe and print its JSON summary."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(keep or tmp)
        for area, case in all_cases():
            key = f"{area}/{case.name}"
            if only not in key:
                continue
            why, seconds = run_case(case, root / key.replace("/", "--"), scheduler)
            results.append({"case": key, "passed": why is None, "why": why,
                            "seconds": round(seconds, 1)})
            print(("ok  " if why is None else "FAIL") + f" {key} ({seconds:.1f} s)"
                  + ("" if why is None else f": {why}"), file=sys.stderr, flush=True)
    passed = sum(r["passed"] for r in results)
    print(json.dumps({"cases": len(results), "passed": passed,
                      "rate": round(passed / max(1, len(results)), 4),
                      "failed": [r for r in results if not r["passed"]]}, indent=2))


if __name__ == "__main__":
    main()
