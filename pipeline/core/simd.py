"""numpy's SIMD dispatch where its AVX-512 sorts are slow: the workers' environment.

numpy sorts integers and floats with x86-simd-sort's AVX-512 code wherever the CPU has AVX-512.
On AMD Zen 4 (family 19h) that code's memory-destination compress-stores are microcoded (AMD's
Zen 4 optimization guide says to avoid them), and numpy's AVX2 code of the same sort is several
times faster: on this machine's EPYC, 10.1 against 53.3 ns per int64 key for ``np.sort``, 29.7
against 94.3 for ``np.argsort`` (2^20 random keys). OpenJDK turns its AVX-512 sort off on Zen 4
for the same reason (openjdk/jdk#24053). The multilevel partitioner sorts every edge entry
several times a round, so the embedded cluster's workers start with numpy's AVX-512 targets
disabled there (``NPY_DISABLE_CPU_FEATURES``, read once when numpy is imported), unless the
variable is set already. Integer results are the same either way; docs/clusters.md says how
to do the same for workers you start yourself.
"""

from __future__ import annotations

import os

ENV = "NPY_DISABLE_CPU_FEATURES"
ZEN4_FAMILY = 0x19       # Zen 3 is family 19h too, but has no AVX-512; Zen 5 (1Ah) fixed it


def avx512_sort_is_slow(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this machine's CPU is one whose AVX-512 sort is slower than its AVX2 sort (AMD
    family 19h with AVX-512), from the first processor in ``cpuinfo``. False where the file
    cannot be read (not Linux)."""
    fields = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break                      # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return False
    try:
        family = int(fields.get("cpu family", ""))
    except ValueError:
        return False
    return (fields.get("vendor_id") == "AuthenticAMD" and family == ZEN4_FAMILY
            and "avx512f" in fields.get("flags", "").split())


def numpy_avx512_targets() -> list[str]:
    """numpy's dispatch targets that use AVX-512 (named ``X86_V4`` and ``AVX512_*`` since
    numpy 2.4, ``AVX512F``, ``AVX512_SKX``... before)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__
    except ImportError:                                    # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__
    return [t for t in __cpu_dispatch__ if t == "X86_V4" or t.startswith("AVX512")]


def worker_numpy_environ() -> dict[str, str]:
    """The environment that embedded workers' numpy needs on this machine: its AVX-512 targets
    disabled where they make sorts slower (``avx512_sort_is_slow``) and ``ENV`` is unset;
    else nothing."""
    if ENV in os.environ or not avx512_sort_is_slow():
        return {}
    targets = numpy_avx512_targets()
    return {ENV: " ".join(targets)} if targets else {}
