"""numpy's sorts with its default SIMD dispatch against the embedded workers' environment
(``graphprep.pipeline.core.simd``); prints one JSON object.

Each side runs in a fresh interpreter, since numpy reads ``NPY_DISABLE_CPU_FEATURES`` once, at
import: ``default`` with the variable unset, ``without_avx512`` with numpy's AVX-512 targets
disabled (what embedded workers get on AMD Zen 4). Each measures, in ns per key (best of
``--repeat``), on ``--keys`` keys: ``np.sort`` of random int64 and int32 keys, ``np.argsort``
of random int64 keys, and the sorts the multilevel partitioner runs on a CSR block's
``row << 24 | column`` keys (rows of 4-29 entries, in row order): quicksort, and timsort
(``kind="stable"``). Also reports whether this CPU counts as one whose AVX-512 sort is slow,
and the environment embedded workers get here. Holds a few arrays of ``--keys`` int64.

``--quick``: 2^16 keys, best of 2 (a second; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import parse_args  # noqa: E402

from graphprep.pipeline.core import simd  # noqa: E402

MEASURE = r"""
import json, sys, time
import numpy as np
n, repeat = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
random64 = rng.integers(0, 1 << 50, n)
degrees = rng.integers(4, 30, n // 4 + 1)
rows = np.repeat(np.arange(len(degrees)), degrees)[:n]
csr_keys = (rows << 24) | rng.integers(0, 1 << 24, len(rows))

def ns_per_key(fn, keys):
    best = float("inf")
    for _ in range(repeat):
        copy = keys.copy()
        t = time.perf_counter()
        fn(copy)
        best = min(best, time.perf_counter() - t)
    return round(best / len(keys) * 1e9, 2)

try:
    from numpy._core._multiarray_umath import __cpu_features__
except ImportError:
    from numpy.core._multiarray_umath import __cpu_features__
print(json.dumps({
    "avx512_sorts": bool(__cpu_features__.get("X86_V4") or __cpu_features__.get("AVX512_SKX")),
    "sort_int64_ns": ns_per_key(lambda a: a.sort(), random64),
    "sort_int32_ns": ns_per_key(lambda a: a.sort(), random64.astype(np.int32)),
    "argsort_int64_ns": ns_per_key(np.argsort, random64),
    "csr_keys_quicksort_ns": ns_per_key(lambda a: a.sort(kind="quicksort"), csr_keys),
    "csr_keys_timsort_ns": ns_per_key(lambda a: a.sort(kind="stable"), csr_keys),
}))
"""


def measure(keys: int, repeat: int, disabled: str | None) -> dict:
    """The figures of one fresh interpreter, with ``NPY_DISABLE_CPU_FEATURES`` unset (None)
    or set to ``disabled``."""
    env = {k: v for k, v in os.environ.items() if k != simd.ENV}
    args = [sys.executable, "-c", MEASURE, str(keys), str(repeat)]
    if disabled is not None:
        env[simd.ENV] = disabled
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1 << 20, help="keys per sort (default 2^20)")
    ap.add_argument("--repeat", type=int, default=5, help="best of this many (default 5)")
    args = parse_args(ap, quick={"keys": 1 << 16, "repeat": 2})
    targets = " ".join(simd.numpy_avx512_targets())
    default = measure(args.keys, args.repeat, None)
    without = measure(args.keys, args.repeat, targets) if targets else None
    result = {"keys": args.keys, "repeat": args.repeat,
              "avx512_sort_is_slow": simd.avx512_sort_is_slow(),
              "workers_environment": simd.worker_numpy_environ(),
              "numpy_avx512_targets": targets, "default": default, "without_avx512": without}
    if without:
        result["speedup_without_avx512"] = {
            k: round(default[k] / without[k], 2) for k in default
            if k.endswith("_ns") and without[k] > 0}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
