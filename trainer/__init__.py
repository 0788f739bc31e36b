"""The bundled trainer: reads only the partitioned format (``graphprep.formats.partitioned``).

Never imports ``pipeline`` or ``dispatch``: a training machine needs only the format. What a
user's model sees is importable from here (loaded on first use, so the launcher validates a
run without importing torch): :class:`Batch`, :class:`Layer`, :func:`full_graph_batch`
(``graphprep.trainer.batch``), :class:`ModelSpec` (``graphprep.trainer.models.spec``), and for a model that
takes sparse input features as they are, :class:`SparseRows` and :func:`sparse_matmul`
(``graphprep.trainer.data.sparse``). The shipped example models are ``graphprep.trainer.examples``.
"""

if __name__ != "graphprep.trainer":  # the bare folder name, e.g. from the repository root
    raise ImportError(f"import graphprep.trainer, not {__name__}: graphprep installs one package, "
                      "graphprep (pip install -e . in the repository)")

_PUBLIC = {"Batch": "batch", "Layer": "batch", "full_graph_batch": "batch",
           "ModelSpec": "models.spec", "SparseRows": "data.sparse",
           "sparse_matmul": "data.sparse"}


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'trainer' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
