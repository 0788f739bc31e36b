"""Options of ``prep chunk`` that the converters read."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ChunkOptions:
    chunk_size: int = 1 << 20
    delimiter: str | None = None          # None: from the extension (.tsv tab, else comma)
    header: bool | None = None            # None: detect (first line not all integers)
    src_col: str | None = None            # name or 0-based index; default 'src' or column 0
    dst_col: str | None = None            # default 'dst' or column 1
    num_nodes: dict[str, int] = field(default_factory=dict)   # "" key: the only node type
    node_data: dict[str, str] = field(default_factory=dict)   # "[ntype/]name" -> file
    name: str | None = None               # graph name; planetoid: dataset (cora, citeseer)
    split_name: str | None = None         # OGB: folder under split/
    map_keys: bool = False                # map integer endpoint keys too (strings always are)
    dangling: str = "error"               # an edge key missing from its node table

    def manifest(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}
