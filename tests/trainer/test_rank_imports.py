"""A trainer rank's start is mostly imports (torch alone takes seconds of CPU): it must not also
pay for what only ``prep`` needs. pyarrow and fsspec (0.2 s) are imported where a chunked
graph, a Parquet file or a URL is read; a rank reads its local part."""

import subprocess
import sys

RANK_MODULES = ["graphprep.trainer.cli", "graphprep.trainer.train", "graphprep.trainer.loop",
                "graphprep.trainer.tasks.node", "graphprep.trainer.tasks.link",
                "graphprep.trainer.sampling.dist_sampler", "graphprep.trainer.data.loader",
                "graphprep.formats.partitioned", "graphprep.formats.part_checks"]


def test_a_rank_imports_neither_pyarrow_nor_fsspec():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in RANK_MODULES) +
            "print(sorted(m for m in ('pyarrow', 'fsspec') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_the_formats_package_still_exports_its_names():
    import graphprep.formats as formats

    for name in formats.__all__:
        assert getattr(formats, name) is not None, name
    assert "validate_chunked_graph" in dir(formats)
