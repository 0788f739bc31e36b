"""The preparation steps of graphprep (``prep``'s commands and :mod:`graphprep.pipeline.api`):
synth, chunk, validate, partition, split-edges, export, report, inspect, each a Dask job over
chunks of the on-disk formats (:mod:`graphprep.formats`)."""

if __name__ != "graphprep.pipeline":  # the bare folder name, e.g. from the repository root
    raise ImportError(f"import graphprep.pipeline, not {__name__}: graphprep installs one package, "
                      "graphprep (pip install -e . in the repository)")
