"""On-disk formats of graphprep: the chunked graph (FORMATS.md §1, ``schema``/``arrays``/
``validate``), the partition assignment (§2, ``assignment``) and the partitioned graph (§3,
``partitioned``). Readers, writers and validation; imports only numpy, pyarrow and fsspec.
The reference is ``formats/FORMATS.md``."""

if __name__ != "graphprep.formats":  # the bare folder name, e.g. from the repository root
    raise ImportError(f"import graphprep.formats, not {__name__}: graphprep installs one package, "
                      "graphprep (pip install -e . in the repository)")

# What each name is imported from, on first use (PEP 562): a trainer rank imports
# graphprep.formats.partitioned and needs neither pyarrow nor fsspec, which the chunked
# graph's modules import.
_EXPORTS = {"FormatError": "errors", "ChunkedGraph": "schema", "ChunkFiles": "schema",
            "EdgeType": "schema", "even_chunks": "schema", "load_chunked_graph": "schema",
            "FORMAT_VERSION": "schema", "METADATA": "schema", "read_array_chunk": "arrays",
            "read_edge_chunk": "arrays", "validate_chunked_graph": "validate"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'graphprep.formats' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"graphprep.formats.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
