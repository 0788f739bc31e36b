"""A graph described by its tables: the YAML/JSON file ``prep chunk CONFIG OUT`` reads.

One validating loader (:func:`load_config`) turns the file into dataclasses; every mistake is
a :class:`FormatError` naming the config file and the field (``nodes[1].label.column``).
``examples/tables/shop.yaml`` is a worked example; README "Tables in" documents each key.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import yaml

from formats import EdgeType, FormatError
from formats.storage import is_url, read_text

FIELD_KINDS = ("feature", "categorical", "label")
SPLIT_NAMES = ("train", "val", "test")


@dataclass(frozen=True)
class FieldSpec:
    """One output field from input columns: ``feature`` (numeric and fixed-length list
    columns, concatenated in order, as float32 unless ``dtype``), ``categorical`` (one column
    of strings or integers -> int64 codes, the vocabulary saved; ``one_hot`` -> float32
    one-hot), ``label`` (class names or integers -> class indices, the names saved),
    ``sparse`` (node tables: a list column of active indices, optionally a list column of their
    values, -> sparse float32 rows ``dim`` wide, kept sparse: :mod:`formats.sparse`)."""

    name: str
    kind: str
    columns: tuple[str, ...]
    dtype: str = "float32"
    one_hot: bool = False
    dim: int = 0               # sparse: the row width (active indices in [0, dim))


@dataclass(frozen=True)
class SplitSpec:
    """Train/val/test: from a column holding ``train``/``val``/``test`` (other values and
    nulls: in no split), or random ``fractions`` drawn with ``seed`` (per node by its ID;
    edges as ``prep split-edges``, by their endpoints)."""

    column: str | None = None
    fractions: tuple[float, float, float] | None = None
    seed: int = 0


@dataclass(frozen=True)
class CsvOptions:
    delimiter: str | None = None        # default: tab for .tsv, else comma
    header: bool = True


@dataclass(frozen=True)
class Fields:
    """What a table contributes besides keys: its fields and its split."""

    fields: tuple[FieldSpec, ...] = ()
    split: SplitSpec | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """The input columns these read, each once, in order."""
        cols = [c for f in self.fields for c in f.columns]
        if self.split is not None and self.split.column:
            cols.append(self.split.column)
        return tuple(dict.fromkeys(cols))

    @property
    def names(self) -> tuple[str, ...]:
        """The output fields: one per field spec, then the three split masks."""
        names = tuple(f.name for f in self.fields)
        return names + (tuple(f"{s}_mask" for s in SPLIT_NAMES) if self.split else ())


@dataclass(frozen=True)
class NodeTableSpec:
    ntype: str
    files: tuple[str, ...]
    key: str
    data: Fields = Fields()
    csv: CsvOptions = field(default_factory=CsvOptions)


@dataclass(frozen=True)
class EdgeTableSpec:
    etype: EdgeType
    files: tuple[str, ...]
    src: str
    dst: str
    data: Fields = Fields()
    csv: CsvOptions = field(default_factory=CsvOptions)


@dataclass(frozen=True)
class TablesConfig:
    path: str
    name: str
    nodes: tuple[NodeTableSpec, ...]
    edges: tuple[EdgeTableSpec, ...]
    dangling: str | None = None         # None: --dangling decides


def is_config(path: str) -> bool:
    return path.lower().endswith((".yaml", ".yml", ".json"))


def load_config(path: str, raw: dict | None = None) -> TablesConfig:
    """Read and check a tables config (``raw``: the parsed dict, for the Python API). Relative
    file names are relative to the config's folder."""
    if raw is None:
        text = read_text(path)
        try:
            raw = json.loads(text) if path.lower().endswith(".json") else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as err:
            raise FormatError(f"not valid {'JSON' if path.endswith('.json') else 'YAML'}: "
                              f"{err}", file=path) from None
    return _Loader(path).config(raw)


class _Loader:
    def __init__(self, path: str):
        self.path = path
        self.base = os.path.dirname(os.path.abspath(path)) if not is_url(path) else \
            path.rsplit("/", 1)[0]

    def fail(self, message: str, where: str):
        raise FormatError(message, file=self.path, field=where)

    def mapping(self, value, where: str, allowed: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            self.fail("must be a mapping", where)
        unknown = [k for k in value if k not in allowed]
        if unknown:
            self.fail(f"unknown key {unknown[0]!r} (known: {', '.join(allowed)})", where)
        return value

    def text(self, value, where: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail("must be a non-empty string", where)
        return value

    def config(self, raw) -> TablesConfig:
        raw = self.mapping(raw, "(top level)", ("name", "nodes", "edges", "dangling"))
        nodes = raw.get("nodes") or []
        edges = raw.get("edges")
        if not isinstance(nodes, list):
            self.fail("must be a list of node tables", "nodes")
        if not isinstance(edges, list) or not edges:
            self.fail("must be a non-empty list of edge tables", "edges")
        node_specs = tuple(self.node(n, f"nodes[{i}]") for i, n in enumerate(nodes))
        seen = set()
        for i, n in enumerate(node_specs):
            if n.ntype in seen:
                self.fail(f"node type {n.ntype!r} has two tables", f"nodes[{i}].type")
            seen.add(n.ntype)
        edge_specs = tuple(self.edge(e, f"edges[{i}]") for i, e in enumerate(edges))
        if len({e.etype for e in edge_specs}) != len(edge_specs):
            self.fail("an edge type is given twice", "edges")
        dangling = raw.get("dangling")
        if dangling is not None and dangling not in ("error", "drop", "add"):
            self.fail("must be error, drop or add", "dangling")
        name = raw.get("name") or os.path.splitext(os.path.basename(self.path))[0]
        return TablesConfig(self.path, str(name), node_specs, edge_specs, dangling)

    def files(self, value, where: str) -> tuple[str, ...]:
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or \
                not all(isinstance(f, str) and f for f in names):
            self.fail("must be a file, folder, glob or URL, or a list of them", where)
        return tuple(self.resolve(f) for f in names)

    def resolve(self, name: str) -> str:
        if is_url(name) or os.path.isabs(name):
            return name
        return f"{self.base}/{name}" if is_url(self.base) else os.path.join(self.base, name)

    def csv(self, value, where: str) -> CsvOptions:
        if value is None:
            return CsvOptions()
        value = self.mapping(value, where, ("delimiter", "header"))
        delimiter = value.get("delimiter")
        if delimiter is not None and (not isinstance(delimiter, str) or len(delimiter) != 1):
            self.fail("must be one character", f"{where}.delimiter")
        header = value.get("header", True)
        if not isinstance(header, bool):
            self.fail("must be true or false", f"{where}.header")
        return CsvOptions(delimiter, header)

    def fields(self, raw: dict, where: str) -> tuple[FieldSpec, ...]:
        out = []
        for name, cols in (raw.get("features") or {}).items():
            out.append(FieldSpec(name, "feature", self.columns(cols, f"{where}.features.{name}")))
        for name, spec in (raw.get("categorical") or {}).items():
            w = f"{where}.categorical.{name}"
            if isinstance(spec, str):
                spec = {"column": spec}
            spec = self.mapping(spec, w, ("column", "one_hot"))
            one_hot = spec.get("one_hot", False)
            if not isinstance(one_hot, bool):
                self.fail("must be true or false", f"{w}.one_hot")
            out.append(FieldSpec(name, "categorical", (self.text(spec.get("column"),
                                                                 f"{w}.column"),),
                                 "int64", one_hot))
        for name, spec in (raw.get("sparse") or {}).items():
            out.append(self.sparse(name, spec, f"{where}.sparse.{name}"))
        label = raw.get("label")
        if label is not None:
            if isinstance(label, str):
                label = {"column": label}
            label = self.mapping(label, f"{where}.label", ("column", "name"))
            out.append(FieldSpec(label.get("name", "label"), "label",
                                 (self.text(label.get("column"), f"{where}.label.column"),),
                                 "int64"))
        names = [f.name for f in out]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            self.fail(f"field {dup!r} is defined twice", where)
        if set(names) & {f"{s}_mask" for s in SPLIT_NAMES}:
            self.fail("train_mask/val_mask/test_mask come from split:", where)
        return tuple(out)

    def sparse(self, name: str, spec, where: str) -> FieldSpec:
        """``{indices: COLUMN, values: COLUMN (optional: all 1.0), dim: WIDTH}``."""
        spec = self.mapping(spec, where, ("indices", "values", "dim"))
        dim = spec.get("dim")
        if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
            self.fail("must be the row width, a positive integer (active indices are in "
                      "[0, dim))", f"{where}.dim")
        cols = (self.text(spec.get("indices"), f"{where}.indices"),)
        if spec.get("values") is not None:
            cols += (self.text(spec.get("values"), f"{where}.values"),)
        return FieldSpec(name, "sparse", cols, "float32", dim=dim)

    def columns(self, value, where: str) -> tuple[str, ...]:
        cols = [value] if isinstance(value, str) else value
        if not isinstance(cols, list) or not cols or not all(isinstance(c, str) for c in cols):
            self.fail("must be a column name or a list of them", where)
        return tuple(cols)

    def split(self, value, where: str) -> SplitSpec | None:
        if value is None:
            return None
        if isinstance(value, str):
            return SplitSpec(column=value)
        value = self.mapping(value, where, ("column", "fractions", "seed"))
        column, fractions = value.get("column"), value.get("fractions")
        if (column is None) == (fractions is None):
            self.fail("give either column or fractions", where)
        if fractions is not None:
            if not isinstance(fractions, list) or len(fractions) != 3 or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0
                    for x in fractions) or not 0 < sum(fractions) <= 1 + 1e-9 or \
                    fractions[0] <= 0:
                self.fail("must be [train, val, test], each >= 0, train > 0, sum <= 1",
                          f"{where}.fractions")
            fractions = tuple(float(x) for x in fractions)
        seed = value.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            self.fail("must be an integer", f"{where}.seed")
        return SplitSpec(column and self.text(column, f"{where}.column"), fractions, seed)

    def node(self, raw, where: str) -> NodeTableSpec:
        raw = self.mapping(raw, where, ("type", "files", "key", "features", "categorical",
                                        "sparse", "label", "split", "csv"))
        return NodeTableSpec(self.text(raw.get("type"), f"{where}.type"),
                             self.files(raw.get("files"), f"{where}.files"),
                             self.text(raw.get("key"), f"{where}.key"),
                             Fields(self.fields(raw, where),
                                    self.split(raw.get("split"), f"{where}.split")),
                             self.csv(raw.get("csv"), f"{where}.csv"))

    def edge(self, raw, where: str) -> EdgeTableSpec:
        raw = self.mapping(raw, where, ("type", "files", "src", "dst", "features",
                                        "categorical", "split", "csv"))
        etype = raw.get("type")
        if isinstance(etype, list) and len(etype) == 3 and all(isinstance(x, str) and x
                                                                for x in etype):
            etype = EdgeType(*etype)
        elif isinstance(etype, str):
            etype = EdgeType.parse(etype, file=self.path, field=f"{where}.type")
        else:
            self.fail("must be 'src:rel:dst' or [src, rel, dst]", f"{where}.type")
        split = self.split(raw.get("split"), f"{where}.split")
        if split is not None and split.column:
            self.fail("edge splits are random fractions (as prep split-edges): give "
                      "fractions and seed", f"{where}.split")
        return EdgeTableSpec(etype, self.files(raw.get("files"), f"{where}.files"),
                             self.text(raw.get("src"), f"{where}.src"),
                             self.text(raw.get("dst"), f"{where}.dst"),
                             Fields(self.fields(raw, where), split),
                             self.csv(raw.get("csv"), f"{where}.csv"))
