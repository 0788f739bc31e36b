"""Delivery of a finished partitioned graph to an fsspec URL (``s3://...``, ``memory://...``).

Object stores have no rename, so a replacement is made safe by versions: the parts go under a
fresh ``URL/v<time>-<random>/`` prefix, then ``graph.json`` (one object, naming that prefix in
its part paths) replaces the old one, then ``manifest.json``; only then are older versions
deleted. A reader sees the old graph or the new one, never a mix; a failed upload leaves the
previous output as it was (plus an orphan version folder that the next upload removes).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import time

import fsspec

from graphprep.formats import FormatError
from graphprep.formats.output import MANIFEST, same_work
from graphprep.formats.partitioned import GRAPH_JSON

log = logging.getLogger(__name__)


def staging_for(url: str) -> str:
    """The local folder a URL output is built in before upload (stable per URL: resumable)."""
    import hashlib
    import tempfile
    return os.path.join(tempfile.gettempdir(),
                        "graphprep-dispatch-" + hashlib.sha256(url.encode()).hexdigest()[:16])


def url_up_to_date(url: str, manifest: dict, overwrite: bool) -> bool:
    """True when ``url`` already holds this exact dispatch; raises when it holds something else
    and ``overwrite`` is not given."""
    fs, root = fsspec.core.url_to_fs(url)
    path = f"{root}/{MANIFEST}"
    if fs.exists(path):
        if same_work(json.loads(fs.cat(path)), manifest) and not overwrite:
            log.info("%s is up to date; nothing to do", url)
            return True
        if not overwrite:
            raise FormatError("the URL holds another dispatch; pass --overwrite to replace it",
                              file=url)
    elif fs.exists(root) and fs.ls(root) and not overwrite:
        raise FormatError("the URL is not empty and holds no dispatch; pass --overwrite to "
                          "replace it", file=url)
    return False


def upload(local: str, url: str) -> None:
    """Copy the finished output at ``local`` to ``url`` as a new version (see module doc), then
    remove ``local``. Holds one file at a time."""
    fs, root = fsspec.core.url_to_fs(url)
    version = f"v{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.urandom(3).hex()}"
    graph = json.loads(open(os.path.join(local, GRAPH_JSON)).read())
    for part in graph["parts"]:
        part["path"] = f"{version}/{part['path']}"
    for name in sorted(os.listdir(local)):
        src = os.path.join(local, name)
        if name not in (GRAPH_JSON, MANIFEST):
            (fs.put if os.path.isdir(src) else fs.put_file)(
                src, f"{root}/{version}/{name}", **({"recursive": True} if os.path.isdir(src)
                                                    else {}))
    fs.pipe_file(f"{root}/{GRAPH_JSON}", (json.dumps(graph, indent=2) + "\n").encode())
    fs.put_file(os.path.join(local, MANIFEST), f"{root}/{MANIFEST}")
    for entry in fs.ls(root, detail=False):
        if posixpath.basename(entry.rstrip("/")) not in (GRAPH_JSON, MANIFEST, version):
            fs.rm(entry, recursive=True)  # older versions, now unreferenced
    log.info("uploaded %s as version %s", url, version)
    shutil.rmtree(local)
