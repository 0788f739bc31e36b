"""A graph described by its tables: the YAML/JSON file ``prep chunk CONFIG OUT`` reads.

One validating loader (:func:`load_config`) turns the file into dataclasses; every mistake is
a :class:`FormatError` naming the config file and the field (``nodes[1].label.column``).
``examples/tables/shop.yaml`` is a worked example; :data:`SCHEMA` declares every key, and
``docs/tables-config.md`` is generated from it (``python -m graphprep.pipeline.tables.reference``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import yaml

from graphprep.formats import EdgeType, FormatError
from graphprep.formats.storage import is_url, read_text

SPLIT_NAMES = ("train", "val", "test")
JSON_SHAPES = ("records", "lines", "object")


@dataclass(frozen=True)
class Key:
    """One key of a config mapping, as the reference documents it."""

    name: str
    type: str
    default: str          # "required", or what an absent key means
    meaning: str


@dataclass(frozen=True)
class Section:
    """A mapping of the config: where it sits, what it is, and every key it accepts."""

    title: str
    where: str
    intro: str
    keys: tuple[Key, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)


_COLUMN = ("column: a name, or (headerless CSV, or csv.names given) a 0-based position")
_FILES = Key("files", "file, folder, glob or URL, or a list of them", "required",
             "The table's files, read in order (a folder: its .csv/.tsv/.txt, .parquet and "
             ".json/.jsonl/.ndjson files by name; each maybe .gz/.bz2/.xz/.zst). Relative "
             "to the config's folder.")
_FEATURES = Key("features", "mapping: field -> column or list of columns", "no features",
                "Numeric columns (and fixed-length list columns), concatenated in order into "
                "one float32 field. Every file must give a field the same width.")
_CATEGORICAL = Key("categorical", "mapping: field -> column or {column, one_hot}",
                   "none", "A column of strings or integers -> int64 codes into the sorted "
                   "vocabulary (saved under OUT/vocab/); a null: the vocabulary's last entry. "
                   "See `categorical field`.")
_CSV = Key("csv", "mapping (see `csv`)", "comma or tab by extension, a header line",
           "How to read the table's CSV/TSV files.")
_JSON = Key("json", "mapping (see `json`)", "the shape from the file",
            "How to read the table's JSON files.")

# Every key the loader accepts is declared here: the loader refuses any other, and the
# reference (docs/tables-config.md, `python -m graphprep.pipeline.tables.reference`) is made from it.
SCHEMA: dict[str, Section] = {s.title: s for s in (
    Section("top level", "(top level)", "The config file: YAML (.yaml/.yml) or JSON (.json).", (
        Key("name", "string", "the config file's name without extension", "The graph's name."),
        Key("nodes", "list of node tables", "no node tables",
            "Node tables. A type's first table lists its nodes; more tables of the same type "
            "add columns, joined by key (a key they name that the first lacks: as dangling "
            "says). A type with no table gets its nodes from the edges' keys."),
        Key("edges", "list of edge tables", "required", "Edge tables: one per edge type."),
        Key("dangling", "error | drop | add", "--dangling (error)",
            "An edge key missing from its node type's table: stop naming file, row and key; "
            "drop the edge; or add the key as a node."),
    )),
    Section("node table", "nodes[i]", "One node type's table: one row per node.", (
        Key("type", "string", "required", "The node type."),
        _FILES,
        Key("key", _COLUMN, "required",
            "The column of node keys: integers or strings, any values, each once."),
        _FEATURES, _CATEGORICAL,
        Key("sparse", "mapping: field -> sparse field", "none",
            "Multi-hot or bag-of-words features kept sparse (a CSR field). See `sparse field`."),
        Key("label", "column or {column, name}", "no label",
            "Class names or integers -> int64 class indices (names saved under OUT/vocab/); "
            "a null: -1, unlabelled. See `label`."),
        Key("split", "column or {fractions, seed}", "no split",
            "train/val/test masks. See `split`."),
        _CSV, _JSON,
    )),
    Section("edge table", "edges[i]", "One edge type's table: one row per edge.", (
        Key("type", "'src:rel:dst' or [src, rel, dst]", "required", "The edge type."),
        _FILES,
        Key("src", _COLUMN, "required", "The column of source node keys."),
        Key("dst", _COLUMN, "required", "The column of destination node keys."),
        _FEATURES, _CATEGORICAL,
        Key("split", "{fractions, seed}", "no split",
            "Random link-prediction masks drawn by the edges' endpoints, as prep split-edges "
            "draws them."),
        _CSV, _JSON,
        Key("reverse", "true | false", "false",
            "The table is undirected: each row u->v also gives v->u (a self loop stays "
            "single)."),
        Key("reverse_type", "relation name, 'src:rel:dst' or [src, rel, dst]",
            "the table's own type when src and dst node types are equal, else dst:rev-rel:src",
            "With reverse: true, the type the reversed edges go into: a relation name NAME "
            "means dst:NAME:src; a full type must run from the table's dst type to its src "
            "type, and may not be another table's type. prep verify --tables accounts for it "
            "(the graph records it)."),
    )),
    Section("categorical field", "categorical.FIELD", "A categorical field given as a mapping "
            "(a bare column name means {column: NAME}).", (
        Key("column", _COLUMN, "required", "A column of strings or integers (not floats, "
            "not lists)."),
        Key("one_hot", "true | false", "false",
            "A float32 one-hot row (at most 1024 values) instead of an int64 code."),
    )),
    Section("label", "label", "The label given as a mapping (a bare column name means "
            "{column: NAME}).", (
        Key("column", _COLUMN, "required", "A column of class names or integers."),
        Key("name", "string", "label", "The output field's name."),
    )),
    Section("sparse field", "sparse.FIELD", "Active column indices per row -> a sparse "
            "float32 field of width dim, kept sparse on disk (multi-hot or bag of words).", (
        Key("indices", _COLUMN, "required",
            "A list column of integer indices (Parquet, JSON), or with separator a string "
            "column of them (CSV: \"3 17 42\"); an empty list or string: no active index."),
        Key("values", _COLUMN, "every value 1.0",
            "A column of the indices' values, as long as indices in every row (same form)."),
        Key("separator", "string", "none: indices is a list column",
            "The indices (and values) are strings joined by this separator."),
        Key("dim", "positive integer", "the largest index over all files + 1",
            "The row width: every index must be in [0, dim). Give it when the width is known "
            "(a vocabulary of 4,714 words): an index >= dim in any file is then an error naming "
            "file and row, and a subset of the files gives the same width."),
    )),
    Section("split", "split", "A node split from a column (a bare column name means {column: "
            "NAME}) or random fractions; edge splits are random fractions only.", (
        Key("column", _COLUMN, "one of column, fractions",
            "A column holding train/val/test (any case); other values and nulls: no split."),
        Key("fractions", "[train, val, test]", "one of column, fractions",
            "Random fractions, each >= 0, train > 0, summing to at most 1, drawn per node by "
            "its ID (the same for any chunking)."),
        Key("seed", "integer", "0", "The random draw's seed."),
    )),
    Section("csv", "csv", "CSV/TSV files (.csv, .tsv, .txt, maybe compressed).", (
        Key("delimiter", "one character", "tab for .tsv, else comma", "The field separator."),
        Key("header", "true | false", "true",
            "Whether the first line names the columns. Without one, columns are called "
            "c0, c1, ... (or csv.names) and referred to by name or position."),
        Key("names", "list of strings", "the header's names, else c0, c1, ...",
            "The columns' names, one per column of the file (with header: true they replace "
            "the header's)."),
    )),
    Section("json", "json", "JSON files: .jsonl/.ndjson (JSON lines: one record a line, read "
            "in parts of about --chunk-size rows), or .json holding an array of records or an "
            "object of key -> value (parsed whole by one task: it holds the parsed file, "
            "several times the file's size; prefer JSON lines for files of gigabytes).", (
        Key("shape", "records | lines | object", "lines for .jsonl/.ndjson; for .json, "
            "records when it starts with '[', object when with '{'",
            "records: [{\"id\": 1, \"x\": 0.5}, ...]; lines: one record per line; object: "
            "{\"0\": [12, 504], \"1\": [3]} (each entry one row)."),
        Key("keys_as", "string", "key",
            "object: the column the object's keys become (keys that are all integers, as "
            "json.dump writes a dict of int keys, become int64)."),
        Key("values_as", "string", "value",
            "object: the column the values become (values that are objects give their own "
            "columns instead)."),
    )),
)}


@dataclass(frozen=True)
class FieldSpec:
    """One output field from input columns: ``feature`` (numeric and fixed-length list
    columns, concatenated in order, as float32 unless ``dtype``), ``categorical`` (one column
    of strings or integers -> int64 codes, the vocabulary saved; ``one_hot`` -> float32
    one-hot), ``label`` (class names or integers -> class indices, the names saved),
    ``sparse`` (node tables: a list column of active indices, or a string column of them
    joined by ``separator``, optionally a column of their values in the same form -> sparse
    float32 rows ``dim`` wide, kept sparse: :mod:`graphprep.formats.sparse`; ``dim`` 0: the largest
    index over all files + 1)."""

    name: str
    kind: str
    columns: tuple[str, ...]
    dtype: str = "float32"
    one_hot: bool = False
    dim: int = 0               # sparse: the row width (active indices in [0, dim)); 0: inferred
    separator: str | None = None   # sparse: indices (and values) are strings joined by this


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
    names: tuple[str, ...] = ()         # the columns' names (default: header, else c0, c1...)


@dataclass(frozen=True)
class JsonOptions:
    shape: str | None = None            # records | lines | object; None: from the file
    keys_as: str = "key"                # object: the column its keys become
    values_as: str = "value"            # object: the column its (non-object) values become


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
    json: JsonOptions = field(default_factory=JsonOptions)


@dataclass(frozen=True)
class EdgeTableSpec:
    """One edge table. ``reverse``: the table is undirected, each row u->v also gives v->u
    (a self loop u->u stays single: it is its own reverse) into ``reverse_type``: the table's
    own type when its src and dst node types are equal and no other type is named, else
    ``dst:rev-<rel>:src`` or the type named by ``reverse_type`` (None when not ``reverse``)."""

    etype: EdgeType
    files: tuple[str, ...]
    src: str
    dst: str
    data: Fields = Fields()
    csv: CsvOptions = field(default_factory=CsvOptions)
    reverse: bool = False
    reverse_type: EdgeType | None = None
    json: JsonOptions = field(default_factory=JsonOptions)


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
        except json.JSONDecodeError as err:
            raise FormatError(f"not valid JSON: {err}", file=path) from None
        except yaml.YAMLError as err:
            raise FormatError(_yaml_error(err), file=path) from None
    return _Loader(path).config(raw)


def _yaml_error(err: yaml.YAMLError) -> str:
    """PyYAML's error (several lines, with a caret drawing) in one line: where and what."""
    mark = getattr(err, "problem_mark", None)
    what = " ".join(str(getattr(err, "problem", None) or err).split())
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    context = getattr(err, "context", None)
    return f"not valid YAML{at}: {what}" + (f" ({' '.join(context.split())})" if context else "")


class _Loader:
    def __init__(self, path: str):
        self.path = path
        self.table_csv = CsvOptions()        # the table being read: how its columns are named
        self.base = os.path.dirname(os.path.abspath(path)) if not is_url(path) else \
            path.rsplit("/", 1)[0]

    def fail(self, message: str, where: str):
        raise FormatError(message, file=self.path, field=where)

    def mapping(self, value, where: str, section: str) -> dict:
        """``value``, checked to be a mapping of keys the :data:`SCHEMA` section allows."""
        allowed = SCHEMA[section].names
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
        raw = self.mapping(raw, "(top level)", "top level")
        nodes = raw.get("nodes") or []
        edges = raw.get("edges")
        if not isinstance(nodes, list):
            self.fail("must be a list of node tables", "nodes")
        if not isinstance(edges, list) or not edges:
            self.fail("must be a non-empty list of edge tables", "edges")
        node_specs = tuple(self.node(n, f"nodes[{i}]") for i, n in enumerate(nodes))
        self.check_joins(node_specs)
        edge_specs = tuple(self.edge(e, f"edges[{i}]") for i, e in enumerate(edges))
        self.check_edge_types(edge_specs)
        dangling = raw.get("dangling")
        if dangling is not None and dangling not in ("error", "drop", "add"):
            self.fail("must be error, drop or add", "dangling")
        name = raw.get("name") or os.path.splitext(os.path.basename(self.path))[0]
        return TablesConfig(self.path, str(name), node_specs, edge_specs, dangling)

    def check_joins(self, specs: tuple[NodeTableSpec, ...]) -> None:
        """A node type's later tables add columns to the nodes its first table lists (joined
        by key): no split of their own, no field named twice across them."""
        first: dict[str, str] = {}
        fields: dict[str, dict[str, str]] = {}
        for i, n in enumerate(specs):
            if n.ntype in first and n.data.split is not None:
                self.fail(f"a split goes on node type {n.ntype!r}'s first table "
                          f"({first[n.ntype]}): this one is joined to it by key",
                          f"nodes[{i}].split")
            first.setdefault(n.ntype, f"nodes[{i}]")
            mine = fields.setdefault(n.ntype, {})
            for name in n.data.names:
                if name in mine:
                    self.fail(f"field {name!r} of node type {n.ntype!r} is also given by "
                              f"{mine[name]}", f"nodes[{i}]")
                mine[name] = f"nodes[{i}]"

    def check_edge_types(self, specs: tuple[EdgeTableSpec, ...]) -> None:
        """Each edge type written by one table only: its own type, or as a reverse type."""
        owner: dict[EdgeType, str] = {}
        for i, e in enumerate(specs):
            if e.etype in owner:
                self.fail(f"edge type '{e.etype}' is given twice ({owner[e.etype]} too); for an "
                          f"undirected table give it once with reverse: true",
                          f"edges[{i}].type")
            owner[e.etype] = f"edges[{i}]"
        for i, e in enumerate(specs):
            if e.reverse and e.reverse_type != e.etype:
                if e.reverse_type in owner:
                    self.fail(f"'{e.reverse_type}' is already written by {owner[e.reverse_type]}"
                              f"; name another type for the reversed edges",
                              f"edges[{i}].reverse_type")
                owner[e.reverse_type] = f"edges[{i}].reverse_type"

    def reverse(self, raw: dict, etype: EdgeType, where: str) -> tuple[bool, EdgeType | None]:
        """``reverse: true`` and the type its reversed edges go into (see EdgeTableSpec)."""
        reverse = raw.get("reverse", False)
        if not isinstance(reverse, bool):
            self.fail("must be true or false (true: each row is an undirected edge)",
                      f"{where}.reverse")
        given = raw.get("reverse_type")
        if given is not None and not reverse:
            self.fail("needs reverse: true", f"{where}.reverse_type")
        if not reverse:
            return False, None
        w = f"{where}.reverse_type"
        if given is None:
            return True, etype if etype.src == etype.dst else etype.reverse()
        if isinstance(given, list) and len(given) == 3 and all(isinstance(x, str) and x
                                                                for x in given):
            rtype = EdgeType(*given)
        elif isinstance(given, str) and given and ":" not in given:
            rtype = EdgeType(etype.dst, given, etype.src)      # a relation name
        elif isinstance(given, str):
            rtype = EdgeType.parse(given, file=self.path, field=w)
        else:
            self.fail("must be a relation name, 'src:rel:dst' or [src, rel, dst]", w)
        if (rtype.src, rtype.dst) != (etype.dst, etype.src):
            self.fail(f"reversed edges of '{etype}' go from {etype.dst!r} to {etype.src!r}: "
                      f"'{rtype}' must be '{etype.dst}:<rel>:{etype.src}'", w)
        return True, rtype

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
        value = self.mapping(value, where, "csv")
        delimiter = value.get("delimiter")
        if delimiter is not None and (not isinstance(delimiter, str) or len(delimiter) != 1):
            self.fail("must be one character (a tab: \"\\t\" in double quotes)",
                      f"{where}.delimiter")
        header = value.get("header", True)
        if not isinstance(header, bool):
            self.fail("must be true or false", f"{where}.header")
        names = value.get("names")
        if names is not None:
            if not isinstance(names, list) or not names or not all(
                    isinstance(n, str) and n for n in names):
                self.fail("must be a list of column names, one per column of the file",
                          f"{where}.names")
            dup = next((n for n in names if names.count(n) > 1), None)
            if dup is not None:
                self.fail(f"names column {dup!r} twice", f"{where}.names")
        return CsvOptions(delimiter, header, tuple(names or ()))

    def json(self, value, where: str) -> JsonOptions:
        if value is None:
            return JsonOptions()
        value = self.mapping(value, where, "json")
        shape = value.get("shape")
        if shape is not None and shape not in JSON_SHAPES:
            self.fail(f"must be one of {', '.join(JSON_SHAPES)}", f"{where}.shape")
        keys_as = self.text(value.get("keys_as", "key"), f"{where}.keys_as")
        values_as = self.text(value.get("values_as", "value"), f"{where}.values_as")
        if keys_as == values_as:
            self.fail("keys_as and values_as must differ", f"{where}.values_as")
        return JsonOptions(shape, keys_as, values_as)

    def column(self, value, where: str) -> str:
        """A column reference: a name, or a 0-based position (a headerless CSV's columns are
        c0, c1, ...; with csv.names, those names)."""
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            names = self.table_csv.names
            if names:
                if value >= len(names):
                    self.fail(f"column position {value}: csv.names has {len(names)} columns "
                              f"(positions 0-{len(names) - 1})", where)
                return names[value]
            if self.table_csv.header:
                self.fail(f"column position {value} needs a headerless file (csv: {{header: "
                          f"false}}) or csv.names; this table's header names its columns: "
                          f"give the name", where)
            return f"c{value}"
        if not isinstance(value, str) or not value:
            self.fail("must be a column: a name, or a 0-based position in a headerless CSV",
                      where)
        return value

    def fields(self, raw: dict, where: str) -> tuple[FieldSpec, ...]:
        out = []
        for name, cols in (raw.get("features") or {}).items():
            out.append(FieldSpec(name, "feature", self.columns(cols, f"{where}.features.{name}")))
        for name, spec in (raw.get("categorical") or {}).items():
            w = f"{where}.categorical.{name}"
            if not isinstance(spec, dict):
                spec = {"column": spec}
            spec = self.mapping(spec, w, "categorical field")
            one_hot = spec.get("one_hot", False)
            if not isinstance(one_hot, bool):
                self.fail("must be true or false", f"{w}.one_hot")
            out.append(FieldSpec(name, "categorical", (self.column(spec.get("column"),
                                                                   f"{w}.column"),),
                                 "int64", one_hot))
        for name, spec in (raw.get("sparse") or {}).items():
            out.append(self.sparse(name, spec, f"{where}.sparse.{name}"))
        label = raw.get("label")
        if label is not None:
            if not isinstance(label, dict):
                label = {"column": label}
            label = self.mapping(label, f"{where}.label", "label")
            out.append(FieldSpec(self.text(label.get("name", "label"), f"{where}.label.name"),
                                 "label", (self.column(label.get("column"),
                                                       f"{where}.label.column"),), "int64"))
        names = [f.name for f in out]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            self.fail(f"field {dup!r} is defined twice", where)
        if set(names) & {f"{s}_mask" for s in SPLIT_NAMES}:
            self.fail("train_mask/val_mask/test_mask come from split:", where)
        return tuple(out)

    def sparse(self, name: str, spec, where: str) -> FieldSpec:
        """``{indices: COLUMN, values: COLUMN (optional: all 1.0), separator: TEXT (optional:
        list columns), dim: WIDTH (optional: largest index + 1)}``."""
        if not isinstance(spec, dict):
            self.fail("must be a mapping {indices: COLUMN, separator, dim}", where)
        spec = self.mapping(spec, where, "sparse field")
        dim = spec.get("dim", 0)
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0 or \
                ("dim" in spec and dim == 0):
            self.fail("must be the row width, a positive integer (active indices are in "
                      "[0, dim)), or left out (the largest index + 1)", f"{where}.dim")
        separator = spec.get("separator")
        if separator is not None and (not isinstance(separator, str) or not separator):
            self.fail("must be a non-empty string (e.g. \" \" or \"|\")", f"{where}.separator")
        cols = (self.column(spec.get("indices"), f"{where}.indices"),)
        if spec.get("values") is not None:
            cols += (self.column(spec.get("values"), f"{where}.values"),)
        return FieldSpec(name, "sparse", cols, "float32", dim=dim, separator=separator)

    def columns(self, value, where: str) -> tuple[str, ...]:
        cols = value if isinstance(value, list) else [value]
        if not cols:
            self.fail("must be a column or a list of them", where)
        return tuple(self.column(c, f"{where}[{i}]" if isinstance(value, list) else where)
                     for i, c in enumerate(cols))

    def split(self, value, where: str) -> SplitSpec | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            return SplitSpec(column=self.column(value, where))
        value = self.mapping(value, where, "split")
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
        return SplitSpec(None if column is None else self.column(column, f"{where}.column"),
                         fractions, seed)

    def node(self, raw, where: str) -> NodeTableSpec:
        raw = self.mapping(raw, where, "node table")
        self.table_csv = self.csv(raw.get("csv"), f"{where}.csv")   # how columns are named
        return NodeTableSpec(self.text(raw.get("type"), f"{where}.type"),
                             self.files(raw.get("files"), f"{where}.files"),
                             self.column(raw.get("key"), f"{where}.key"),
                             Fields(self.fields(raw, where),
                                    self.split(raw.get("split"), f"{where}.split")),
                             self.table_csv, self.json(raw.get("json"), f"{where}.json"))

    def edge(self, raw, where: str) -> EdgeTableSpec:
        raw = self.mapping(raw, where, "edge table")
        self.table_csv = self.csv(raw.get("csv"), f"{where}.csv")   # how columns are named
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
        reverse, reverse_type = self.reverse(raw, etype, where)
        return EdgeTableSpec(etype, self.files(raw.get("files"), f"{where}.files"),
                             self.column(raw.get("src"), f"{where}.src"),
                             self.column(raw.get("dst"), f"{where}.dst"),
                             Fields(self.fields(raw, where), split),
                             self.table_csv, reverse, reverse_type,
                             json=self.json(raw.get("json"), f"{where}.json"))
