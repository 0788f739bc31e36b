"""On-disk formats of graphprep: the chunked graph (FORMATS.md §1, ``schema``/``arrays``/
``validate``), the partition assignment (§2, ``assignment``) and the partitioned graph (§3,
``partitioned``). Readers, writers and validation; imports only numpy, pyarrow and fsspec.
The reference is ``formats/FORMATS.md``."""

if __name__ != "graphprep.formats":  # the bare folder name, e.g. from the repository root
    raise ImportError(f"import graphprep.formats, not {__name__}: graphprep installs one package, "
                      "graphprep (pip install -e . in the repository)")

from graphprep.formats.errors import FormatError
from graphprep.formats.schema import (ChunkedGraph, ChunkFiles, EdgeType, even_chunks,
                                      load_chunked_graph, FORMAT_VERSION, METADATA)
from graphprep.formats.arrays import read_array_chunk, read_edge_chunk
from graphprep.formats.validate import validate_chunked_graph

__all__ = ["FormatError", "ChunkedGraph", "ChunkFiles", "EdgeType", "even_chunks",
           "load_chunked_graph", "FORMAT_VERSION", "METADATA", "read_array_chunk",
           "read_edge_chunk", "validate_chunked_graph"]
