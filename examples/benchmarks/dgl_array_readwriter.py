"""DGL's chunked-format array readers, vendored for bench_dgl_input.py (the baseline side).

Source: dmlc/dgl, tools/distpartitioning/array_readwriter/{registry,csv,parquet,numpy_array}.py
at commit 3d16000b4170fa741ed9e9667f22ba84d3493026 (master, 2025-08-01; these files last
changed in 2023-04, so DGL 1.1.3's are the same), and the edge-file loop of
tools/distpartitioning/dataset_utils.py ``get_dataset`` at the same commit (``read_edge_file_
as_dispatch`` below). Copyright by the DGL authors, licensed under the Apache License 2.0
(http://www.apache.org/licenses/LICENSE-2.0).

Changes: the ``read`` methods and the registry are copied as they are (pandas included: it is
what DGL's readers cost); the ``write`` methods are left out (tests/dgl_writer.py holds the
writer); the three modules of the package are put into this one file, so the
``@register_array_parser`` decorators register into the one ``REGISTRY`` here; the
``logging.debug`` calls are kept. ``read_edge_file_as_dispatch`` is the body of the per-file
loop of ``get_dataset`` (the ``constants`` names replaced by their values), made a function.
"""

import logging
import os

import numpy as np
import pandas as pd  # noqa: F401  (imported by DGL's csv.py/parquet.py; to_pandas needs it)
import pyarrow
import pyarrow.csv
import pyarrow.parquet

# ------------------------------------------------------------------ registry.py

REGISTRY = {}


def register_array_parser(name):
    def _deco(cls):
        REGISTRY[name] = cls
        return cls

    return _deco


def get_array_parser(**fmt_meta):
    cls = REGISTRY[fmt_meta.pop("name")]
    return cls(**fmt_meta)


# ------------------------------------------------------------------ csv.py (read only)

@register_array_parser("csv")
class CSVArrayParser(object):
    def __init__(self, delimiter=","):
        self.delimiter = delimiter

    def read(self, path):
        logging.debug(
            "Reading from %s using CSV format with configuration %s"
            % (path, self.__dict__)
        )
        # do not read the first line as header
        read_options = pyarrow.csv.ReadOptions(autogenerate_column_names=True)
        parse_options = pyarrow.csv.ParseOptions(delimiter=self.delimiter)
        arr = pyarrow.csv.read_csv(
            path, read_options=read_options, parse_options=parse_options
        )
        logging.debug("Done reading from %s" % path)
        return arr.to_pandas().to_numpy()


# ------------------------------------------------------------------ parquet.py (read only)

@register_array_parser("parquet")
class ParquetArrayParser(object):
    def __init__(self):
        pass

    def read(self, path):
        logging.debug("Reading from %s using parquet format" % path)
        metadata = pyarrow.parquet.read_metadata(path)
        metadata = metadata.schema.to_arrow_schema().metadata

        # As parquet data are tabularized, we assume the dim of ndarray is 2.
        # If not, it should be explictly specified in the file as metadata.
        if metadata:
            shape = metadata.get(b"shape", None)
        else:
            shape = None
        table = pyarrow.parquet.read_table(path, memory_map=True)

        data_types = table.schema.types
        # Spark ML feature processing produces single-column parquet files where each row is a vector object
        if len(data_types) == 1 and isinstance(data_types[0], pyarrow.ListType):
            arr = np.array(table.to_pandas().iloc[:, 0].to_list())
            logging.debug(
                f"Parquet data under {path} converted from single vector per row to ndarray"
            )
        else:
            arr = table.to_pandas().to_numpy()
        if not shape:
            logging.debug(
                "Shape information not found in the metadata, read the data as "
                "a 2 dim array."
            )
        logging.debug("Done reading from %s" % path)
        shape = tuple(eval(shape.decode())) if shape else arr.shape
        return arr.reshape(shape)


# ------------------------------------------------------------------ numpy_array.py (read only)

@register_array_parser("numpy")
class NumpyArrayParser(object):
    def __init__(self):
        pass

    def read(self, path):
        logging.debug("Reading from %s using numpy format" % path)
        arr = np.load(path, mmap_mode="r")
        logging.debug("Done reading from %s" % path)
        return arr


# ------------------------------------------------------------------ dataset_utils.py (edges)

def read_edge_file_as_dispatch(edge_file, fmt_name, src_ids, dst_ids):
    """One edge chunk as DGL's dispatch (``get_dataset``) reads it: CSV streamed in 4 KiB
    blocks with a hard-coded " " delimiter (not the array_readwriter CSV parser), Parquet with
    ``pq.read_table``; appends to ``src_ids``/``dst_ids``. Returns None (as ``continue``) for a
    0-byte CSV file."""
    if fmt_name == "csv":
        read_options = pyarrow.csv.ReadOptions(
            use_threads=True,
            block_size=4096,
            autogenerate_column_names=True,
        )
        parse_options = pyarrow.csv.ParseOptions(delimiter=" ")

        if os.path.getsize(edge_file) == 0:
            # if getsize() == 0, the file is empty, indicating that the partition doesn't have this attribute.
            # The src_ids and dst_ids should remain empty.
            return
        with pyarrow.csv.open_csv(
            edge_file,
            read_options=read_options,
            parse_options=parse_options,
        ) as reader:
            for next_chunk in reader:
                if next_chunk is None:
                    break

                next_table = pyarrow.Table.from_batches([next_chunk])
                src_ids.append(next_table["f0"].to_numpy())
                dst_ids.append(next_table["f1"].to_numpy())
    elif fmt_name == "parquet":
        data_df = pyarrow.parquet.read_table(edge_file)
        data_df = data_df.rename_columns(["f0", "f1"])
        src_ids.append(data_df["f0"].to_numpy())
        dst_ids.append(data_df["f1"].to_numpy())
    else:
        raise ValueError(f"Unknown edge format {fmt_name}")
