"""Out-of-core deduplication of one edge type: a two-phase bucket shuffle.

Phase 1, one task per chunk: key = src * num_dst + dst, bucket = hash(key) mod B; the chunk's
keys are written sorted by bucket with B+1 offsets. Phase 2, one task per bucket: the bucket's
slice of every phase-1 file (memory-mapped), sorted and deduplicated, written as one output chunk.
A task holds one chunk (phase 1) or one bucket, about one chunk (phase 2).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np

from graphprep.formats import ChunkFiles, EdgeType, read_edge_chunk
from graphprep.formats.output import save_npy, write_edge_chunk
from graphprep.pipeline.core.arrayops import unique_ints

_MIX = np.uint64(0x9E3779B97F4A7C15)


def bucket_of(keys: np.ndarray, buckets: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        return ((keys.astype(np.uint64) * _MIX) >> np.uint64(33)) % np.uint64(buckets)


@dataclass(frozen=True)
class BucketTask:
    path: str
    files: ChunkFiles
    num_dst: int
    buckets: int
    target: str


def bucket_chunk(task: BucketTask) -> None:
    src, dst = read_edge_chunk(task.path, task.files)
    keys = src * task.num_dst + dst
    b = bucket_of(keys, task.buckets)
    order = np.argsort(b, kind="stable")
    offsets = np.searchsorted(b[order], np.arange(task.buckets + 1, dtype=np.uint64))
    save_npy(task.target + ".keys.npy", keys[order])
    save_npy(task.target + ".offsets.npy", offsets.astype(np.int64))


@dataclass(frozen=True)
class MergeTask:
    sources: tuple[str, ...]
    bucket: int
    num_dst: int
    target: str


def merge_bucket(task: MergeTask) -> int:
    parts = []
    for s in task.sources:
        offsets = np.load(s + ".offsets.npy")
        keys = np.load(s + ".keys.npy", mmap_mode="r")
        parts.append(np.asarray(keys[offsets[task.bucket]:offsets[task.bucket + 1]]))
    keys = unique_ints(np.concatenate(parts), inplace=True)
    write_edge_chunk(task.target, keys // task.num_dst, keys % task.num_dst)
    return len(keys)


def dedupe_edge_type(out: str, et: EdgeType, files: ChunkFiles, num_dst: int,
                     runner) -> tuple[ChunkFiles, tuple[int, ...]]:
    """Replace the chunks of ``et`` under ``out`` by deduplicated ones; returns the new files
    and rows per chunk. As many buckets as input chunks, so a bucket is about a chunk."""
    scratch = os.path.join(out, "_dedupe", et.dirname)
    os.makedirs(scratch, exist_ok=True)
    paths = [os.path.join(out, f) for f in files.files]
    buckets = max(1, len(paths))
    targets = [os.path.join(scratch, f"c{i:05d}") for i in range(len(paths))]
    runner(bucket_chunk, [BucketTask(p, files, num_dst, buckets, t)
                          for p, t in zip(paths, targets)], f"dedupe {et} (bucket)")
    for p in paths:
        os.remove(p)
    new = [f"edges/{et.dirname}/part-{b:05d}.parquet" for b in range(buckets)]
    rows = runner(merge_bucket, [MergeTask(tuple(targets), b, num_dst, os.path.join(out, f))
                                 for b, f in enumerate(new)], f"dedupe {et} (merge)")
    shutil.rmtree(os.path.join(out, "_dedupe"))
    return ChunkFiles("parquet", tuple(new)), tuple(rows)
