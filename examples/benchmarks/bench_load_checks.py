"""Benchmark of the trainer's load-time data checks; prints one JSON object.

A synth graph (default 10^7 edges, 10^6 nodes, 32 float32 features) is dispatched into 2 parts
(random partition) under ``--workdir`` (reused when already there). Per part: the plain load
(``LocalPart.load``: memory-maps every array), then what a rank checks before training
(``graphprep.formats.part_checks.check_part``) by phase: layout (sizes, dtypes, shapes from the
headers), structure (ranges, order, finiteness: reads every array once), sampled hashes (the
default), and full hashes (``--verify-data``: reads every byte once more). Page cache warm
(the best of ``--repeat`` runs), and cold too when this process may drop the page cache (not
with ``--no-cold``). ``--quick``: 10^4 edges, one repeat, ``--no-cold`` (seconds; for the test
suite, which must not empty the page cache of the machine it runs on).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import parse_args, partitioned_synth  # noqa: E402

from graphprep.formats.integrity import check_part_files  # noqa: E402
from graphprep.formats.partitioned import load_partitioned  # noqa: E402
from graphprep.formats.part_checks import check_part, check_structure  # noqa: E402
from graphprep.trainer.sampling.partition import LocalPart  # noqa: E402

MB = 1 << 20


def seconds(fn, repeat: int) -> float:
    """Best wall time of ``repeat`` calls (warm page cache after the first)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return round(best, 4)


def drop_page_cache() -> bool:
    """Empty the page cache (needs root and a writable /proc/sys); False when not allowed."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def part_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


def mb_per_s(mb: float, seconds_taken: float) -> float:
    """A rate to three significant figures: whole MB/s read 0 for a quick run's 0.3 MB part on
    a loaded machine."""
    return float(f"{mb / max(seconds_taken, 1e-9):.3g}")


def measure_part(graph_json: str, p: int, repeat: int) -> dict:
    g = load_partitioned(graph_json)
    folder, manifest = g.part_path(p), g.parts[p].manifest
    out = {"part_mb": round(part_bytes(folder) / MB, 1),
           "plain_load_s": seconds(lambda: LocalPart.load(graph_json, p), repeat),
           "layout_s": seconds(lambda: check_part_files(folder, manifest, hashes=False), repeat),
           "structure_s": seconds(lambda: check_structure(g, p), repeat),
           "sampled_hashes_s": seconds(lambda: check_part_files(folder, manifest), repeat),
           "full_hashes_s": seconds(lambda: check_part_files(folder, manifest, full=True),
                                    repeat),
           "default_check_s": seconds(lambda: check_part(g, p), repeat),
           "verify_data_check_s": seconds(lambda: check_part(g, p, verify_data=True), repeat)}
    out["structure_mb_per_s"] = mb_per_s(out["part_mb"], out["structure_s"])
    out["full_hash_mb_per_s"] = mb_per_s(out["part_mb"], out["full_hashes_s"])
    return out


def measure_cold(graph_json: str, p: int) -> dict | None:
    g = load_partitioned(graph_json)
    if not drop_page_cache():
        return None
    default = seconds(lambda: check_part(g, p), 1)
    if not drop_page_cache():
        return None
    return {"default_check_s": default,
            "verify_data_check_s": seconds(lambda: check_part(g, p, verify_data=True), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=os.path.join("bench-work", "load-checks"))
    ap.add_argument("--edges", type=int, default=10**7)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-cold", action="store_true",
                    help="skip the cold-cache figures (they empty the whole machine's page cache)")
    args = parse_args(ap, {"edges": 10**4, "repeat": 1, "no_cold": True})
    os.makedirs(args.workdir, exist_ok=True)
    graph_json = partitioned_synth(args.workdir, args.edges, (2,))[2]
    parts = {p: measure_part(graph_json, p, args.repeat) for p in range(2)}
    cold = None if args.no_cold else measure_cold(graph_json, 0)
    why = ("--no-cold" if args.no_cold else
           "cannot drop the page cache here (needs root and writable /proc/sys)")
    slowest = max(parts.values(), key=lambda r: r["verify_data_check_s"])
    print(json.dumps({
        "graph": {"edges": args.edges, "nodes": args.edges // 10, "parts": 2, "feat_dim": 32},
        "per_part_warm": parts,
        "cold_page_cache_part0": cold if cold else f"not measured: {why}",
        "summary": {"default_check_s": slowest["default_check_s"],
                    "verify_data_check_s": slowest["verify_data_check_s"],
                    "plain_load_s": slowest["plain_load_s"],
                    "default_check_s_at_1e8_edges_linear_estimate": round(
                        slowest["default_check_s"] * 1e8 / args.edges, 2)}},
        indent=1))


if __name__ == "__main__":
    main()
