"""Embedded workers' numpy skips its AVX-512 targets where they make sorts slower (AMD Zen 4:
``graphprep.pipeline.core.simd``), and only there, and never against the user's own setting."""

from __future__ import annotations

import os

import pytest
from distributed import Client

from graphprep.pipeline.core import simd
from graphprep.pipeline.core.cluster import FORKED_WORKERS, local_cluster

AVX512 = "fpu sse2 avx2 avx512f avx512dq avx512vl"
CPUS = {  # (vendor, family, flags) -> whether its AVX-512 sort is the slow one
    "zen4": ("AuthenticAMD", 25, AVX512, True),
    "zen3": ("AuthenticAMD", 25, "fpu sse2 avx2", False),
    "zen5": ("AuthenticAMD", 26, AVX512, False),
    "intel": ("GenuineIntel", 6, AVX512, False),
}


def cpuinfo(tmp_path, vendor: str, family: int, flags: str) -> str:
    block = (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: 17\n"
             f"flags\t\t: {flags}\n")
    path = tmp_path / "cpuinfo"
    path.write_text(block + "\n" + block.replace(": 0\n", ": 1\n", 1))
    return str(path)


@pytest.mark.parametrize("cpu", CPUS)
def test_only_zen4_with_avx512_counts_as_slow(tmp_path, cpu):
    vendor, family, flags, slow = CPUS[cpu]
    assert simd.avx512_sort_is_slow(cpuinfo(tmp_path, vendor, family, flags)) is slow


def test_an_unreadable_cpuinfo_is_not_slow(tmp_path):
    assert simd.avx512_sort_is_slow(str(tmp_path / "none")) is False
    (tmp_path / "odd").write_text("vendor_id : AuthenticAMD\ncpu family : ?\n")
    assert simd.avx512_sort_is_slow(str(tmp_path / "odd")) is False


def test_the_environment_names_numpys_avx512_targets_unless_the_user_set_it(monkeypatch):
    targets = simd.numpy_avx512_targets()
    if not targets:
        pytest.skip("this numpy has no AVX-512 targets (not an x86-64 build)")
    monkeypatch.setattr(simd, "avx512_sort_is_slow", lambda: True)
    monkeypatch.delenv(simd.ENV, raising=False)
    assert simd.worker_numpy_environ() == {simd.ENV: " ".join(targets)}
    assert all(t == "X86_V4" or t.startswith("AVX512") for t in targets)
    monkeypatch.setenv(simd.ENV, "")              # the user's choice, even an empty one
    assert simd.worker_numpy_environ() == {}
    monkeypatch.delenv(simd.ENV)
    monkeypatch.setattr(simd, "avx512_sort_is_slow", lambda: False)
    assert simd.worker_numpy_environ() == {}


def numpy_state() -> tuple[str | None, bool]:
    from numpy._core._multiarray_umath import __cpu_features__
    return os.environ.get(simd.ENV), bool(__cpu_features__.get("X86_V4"))


@pytest.mark.skipif(not (FORKED_WORKERS and simd.worker_numpy_environ()),
                    reason="not an AMD Zen 4 machine with AVX-512 and a forkserver: workers keep "
                    "numpy's defaults there, which the tests above check")
def test_embedded_workers_numpy_runs_without_avx512_and_this_process_is_untouched():
    expected = simd.worker_numpy_environ()[simd.ENV]
    before = os.environ.get(simd.ENV)
    with local_cluster(2) as cluster, Client(cluster) as client:
        states = list(client.run(numpy_state).values())
    assert states == [(expected, False)] * 2, states
    assert os.environ.get(simd.ENV) == before
