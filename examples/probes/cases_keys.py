"""Misuse of keys: edge lists whose endpoints are strings or arbitrary integers (``--map-keys``),
node tables keyed by anything (``prep chunk CONFIG.yaml``), ``--dangling``, and the saved key
maps. Each failure must name the file, the column and the row or key in its last line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kit import Case, write

BIG = 2**63
TOP = 2**64 - 1


def csv(folder: Path, name: str, rows: list[str], header: str | None = "src,dst") -> Path:
    return write(folder / name, "".join(f"{r}\n" for r in ([header] if header else []) + rows))


def parquet(folder: Path, name: str, **columns) -> Path:
    pq.write_table(pa.table(columns), folder / name)
    return folder / name


def chunk(*args) -> list[str]:
    return ["prep", "chunk", *map(str, args)]


def shop(folder: Path, users: list[str], events: list[str], *, key_col="user_id",
         users_file="users.csv", dangling=None, users_parquet=None) -> list[str]:
    """A users table and a user->item events table in a config; the command chunking it."""
    if users_parquet is not None:
        pq.write_table(users_parquet, folder / users_file)
    else:
        csv(folder, users_file, users, header="user_id,age")
    csv(folder, "events.csv", events, header="user,item")
    config = {"name": "shop",
              "nodes": [{"type": "user", "files": users_file, "key": key_col}],
              "edges": [{"type": ["user", "bought", "item"], "files": "events.csv",
                         "src": "user", "dst": "item"}]}
    if dangling:
        config["dangling"] = dangling
    write(folder / "shop.yaml", json.dumps(config))      # JSON is YAML
    return chunk("shop.yaml", "g")


def _ordered_keys(folder: Path, output: str) -> None:
    """The by-ID folder of a graph with table keys and added keys reads in ID order."""
    meta = json.loads((folder / "g" / "metadata.json").read_text())
    by_id = meta["keys"]["user"]["by_id"]
    listed = [k for f in by_id for k in pq.read_table(folder / "g" / f)["key"].to_pylist()]
    as_folder = pq.read_table(folder / "g" / "keys" / "user" / "by_id")["key"].to_pylist()
    assert as_folder == listed, f"folder order {as_folder[:5]}... != ID order {listed[:5]}..."
    assert listed[:3] == ["u1", "u2", "u3"] and sorted(listed[3:]) == ["u8", "u9"], listed


def _integer_kind(folder: Path, output: str) -> None:
    meta = json.loads((folder / "g" / "metadata.json").read_text())
    assert meta["keys"]["_N"]["kind"] == "integer", meta["keys"]
    keys = sorted(k for f in meta["keys"]["_N"]["by_id"]
                  for k in pq.read_table(folder / "g" / f)["key"].to_pylist())
    assert keys == [-5, 7, BIG - 1], keys


def _gz(folder: Path) -> list[str]:
    rows = "src,dst\n" + "".join(f"{i},{i + 1}\n" for i in range(5)) + f"5,{BIG}\n"
    with gzip.open(folder / "e.csv.gz", "wt") as f:
        f.write(rows)
    return chunk("e.csv.gz", "g", "--map-keys")


def _mixed_folder(folder: Path) -> list[str]:
    csv(folder / "edges", "a.csv", ["x,y", "y,z"])
    csv(folder / "edges", "b.csv", ["1,2", "2,3"])
    return chunk("edges", "g", "--map-keys")


def _columns_differ(folder: Path) -> list[str]:
    csv(folder / "edges", "a.csv", ["x,y"])
    csv(folder / "edges", "b.csv", ["y,z"], header="from,to")
    return chunk("edges", "g")


def _typeless(folder: Path) -> list[str]:
    csv(folder / "g_in" / "edges", "user__bought__item.csv", ["u1,i1", "u2,i2"])
    write(folder / "g_in" / "edges" / "tag__of__item.csv", "")
    return chunk("g_in", "g")


def _dup_across(folder: Path) -> list[str]:
    csv(folder / "users", "a.csv", ["u1,3", "u2,4"], header="user_id,age")
    csv(folder / "users", "b.csv", ["u3,5", "u1,6"], header="user_id,age")
    csv(folder, "events.csv", ["u1,i1"], header="user,item")
    write(folder / "shop.yaml", json.dumps({
        "name": "shop", "nodes": [{"type": "user", "files": "users/*.csv", "key": "user_id"}],
        "edges": [{"type": ["user", "bought", "item"], "files": "events.csv", "src": "user",
                   "dst": "item"}]}))
    return chunk("shop.yaml", "g")


CASES = [
    # -- keyed edge lists: endpoint values
    Case("csv_empty_endpoint_field",
         lambda d: chunk(csv(d, "e.csv", ["a,b", "c,", "e,f"]).name, "g"),
         names=("e.csv", "'dst'", "row 1", "missing key")),
    Case("parquet_null_endpoint",
         lambda d: chunk(parquet(d, "e.parquet", src=["a", "b", None], dst=["b", "c", "a"])
                         .name, "g"),
         names=("e.parquet", "'src'", "row 2", "missing key")),
    Case("map_keys_text_after_integers",
         lambda d: chunk(csv(d, "e.csv", ["1,2", "3,4", "5,abc"]).name, "g", "--map-keys"),
         names=("e.csv", "'dst'", "row 2", "abc")),
    Case("map_keys_decimal_in_a_later_row",
         lambda d: chunk(csv(d, "e.csv", ["1,2", "3,4.5"]).name, "g", "--map-keys"),
         names=("e.csv", "'dst'", "row 1", "4.5")),
    Case("map_keys_negative_below_int64",
         lambda d: chunk(csv(d, "e.csv", ["1,2", f"-{BIG + 1},3"]).name, "g", "--map-keys"),
         names=("e.csv", "'src'", "row 1", f"-{BIG + 1}")),
    Case("thirty_digit_ids_without_map_keys",
         lambda d: chunk(csv(d, "e.csv", ["123456789012345678901234567890,1", "1,2"]).name,
                         "g"),
         names=("e.csv", "'src'", "row 0", "123456789012345678901234567890")),
    Case("scientific_notation_ids",
         lambda d: chunk(csv(d, "e.csv", ["1e3,2e3", "2e3,3e3"]).name, "g"),
         names=("e.csv", "'src'", "row 0", "1e3")),
    Case("gzip_map_keys_beyond_int64",
         _gz, names=("e.csv.gz", "'dst'", "row 5", str(BIG))),
    Case("parquet_bool_endpoints",
         lambda d: chunk(parquet(d, "e.parquet", src=[True, False], dst=[False, True]).name,
                         "g"),
         names=("e.parquet", "'src'", "bool")),
    Case("parquet_list_endpoints",
         lambda d: chunk(parquet(d, "e.parquet", src=[[1], [2]], dst=[[2], [3]]).name, "g"),
         names=("e.parquet", "'src'", "list")),
    Case("parquet_float32_with_map_keys",
         lambda d: chunk(parquet(d, "e.parquet", src=pa.array([1.5, 2.0], pa.float32()),
                                 dst=pa.array([2.0, 3.0], pa.float32())).name, "g",
                         "--map-keys"),
         names=("e.parquet", "'src'", "row 0", "1.5")),
    # -- keyed edge lists: columns and files
    Case("src_col_not_in_keyed_file",
         lambda d: chunk(csv(d, "e.csv", ["a,b"], header="uid,item").name, "g",
                         "--src-col", "user"),
         names=("e.csv", "--src-col", "'user'")),
    Case("dst_col_index_past_the_columns",
         lambda d: chunk(csv(d, "e.csv", ["a,b"]).name, "g", "--dst-col", "7"),
         names=("e.csv", "--dst-col", "'7'")),
    Case("same_column_for_src_and_dst",
         lambda d: chunk(csv(d, "e.csv", ["a,b,1"], header="user,item,n").name, "g",
                         "--src-col", "user", "--dst-col", "user"),
         names=("e.csv", "--dst-col", "'user'")),
    Case("same_column_index_for_src_and_dst_integers",
         lambda d: chunk(csv(d, "e.csv", ["1,2", "2,3"], header=None).name, "g",
                         "--src-col", "1", "--dst-col", "1"),
         names=("e.csv", "--dst-col", "'1'")),
    Case("semicolon_delimited_keys",
         lambda d: chunk(csv(d, "e.csv", ["a;b", "b;c"], header="src;dst").name, "g"),
         names=("e.csv", "--delimiter")),
    Case("ragged_row_in_keyed_file",
         lambda d: chunk(csv(d, "e.csv", ["a,b", "b,c", "c,d,e", "d,e"]).name, "g"),
         names=("e.csv", "row 2", "found 3")),
    Case("node_data_beside_string_keys",
         lambda d: (write(d / "feat.csv", "1\n2\n"),
                    chunk(csv(d, "e.csv", ["a,b"]).name, "g", "--node-data",
                          "feat=feat.csv"))[1],
         names=("e.csv", "config")),
    Case("num_nodes_beside_string_keys",
         lambda d: chunk(csv(d, "e.csv", ["a,b"]).name, "g", "--num-nodes", "10"),
         names=("--num-nodes", "keyed")),
    Case("folder_files_of_two_key_kinds", _mixed_folder,
         names=("b.csv", "'src'", "integers", "strings")),
    Case("folder_files_with_other_endpoint_columns", _columns_differ,
         names=("b.csv", "'from'", "'to'")),
    Case("keyed_type_named_only_by_an_empty_file", _typeless,
         names=("tag__of__item.csv", "'tag'", "no keys")),
    Case("dangling_not_a_choice",
         lambda d: chunk(csv(d, "e.csv", ["a,b"]).name, "g", "--dangling", "maybe"),
         names=("--dangling", "maybe")),
    # -- node tables keyed by anything
    Case("config_edge_names_unknown_user",
         lambda d: shop(d, ["u1,3", "u2,4"], ["u1,i1", "u3,i2"]),
         names=("events.csv", "row 1", "'u3'", "--dangling")),
    Case("config_duplicate_user_key",
         lambda d: shop(d, ["u1,3", "u2,4", "u3,5", "u2,6"], ["u1,i1"]),
         names=("users.csv", "row 3", "'u2'", "row 1")),
    Case("config_duplicate_key_across_files", _dup_across,
         names=("b.csv", "row 1", "'u1'", "a.csv")),
    Case("config_empty_key_cell",
         lambda d: shop(d, ["u1,3", ",4"], ["u1,i1"]),
         names=("users.csv", "'user_id'", "row 1", "missing key")),
    Case("config_integer_table_string_edges",
         lambda d: shop(d, ["1,3", "2,4"], ["u1,i1"]),
         names=("events.csv", "'user'", "integers", "strings")),
    Case("config_uint64_key_beyond_int64",
         lambda d: shop(d, [], ["1,i1"], users_file="users.parquet", users_parquet=pa.table(
             {"user_id": pa.array([1, TOP], pa.uint64()), "age": [3, 4]})),
         names=("users.parquet", "'user_id'", "row 1", str(TOP))),
    Case("config_float_key_column",
         lambda d: shop(d, [], ["1,i1"], users_file="users.parquet", users_parquet=pa.table(
             {"user_id": [1.0, 2.0], "age": [3, 4]})),
         names=("users.parquet", "'user_id'", "row 0", "1.0")),
    # -- what must work
    Case("by_id_folder_reads_in_id_order_with_added_keys",
         lambda d: shop(d, ["u1,3", "u2,4", "u3,5"], ["u1,i1", "u9,i2", "u8,i1"],
                        dangling="add"),
         code=0, check=_ordered_keys),
    Case("signed_padded_integer_keys_map",
         lambda d: chunk(csv(d, "e.csv", ["+7, -5", f"{BIG - 1},007"]).name, "g",
                         "--map-keys"),
         code=0, check=_integer_kind),
]
