"""``prep report PATH... --out report.html``: one self-contained HTML page (PNG plots inlined
as data URIs) about any of graphprep's outputs.

Per PATH, by kind (``prep inspect``'s detection and text tables, then figures):

* partitioned graph: in-degree distribution per edge type (log-log), per-part bars of nodes
  per type, edges, train nodes and halo nodes with the mean line, and the edge-cut matrix
  between parts, from one Dask task per part (``profile.py``);
* assignment: its warnings (a part holding far more than its share of the edges or training
  nodes, ``pipeline/workload.py``) above per-part bars from its statistics (the cut matrix
  needs the edges: report the partitioned graph for it);
* trainer metrics (``--metrics-out``): loss, accuracy or AUC/MRR curves, and the per-rank time
  per phase as stacked bars;
* chunked graph: its tables (degrees come from the partitioned graph, which has CSCs).

The client holds the figures and small per-part arrays. ``out`` is checked before any work
(:func:`check_report_out`): never one of the PATHS or inside one, and an existing file that is
not a graphprep report is replaced only with ``overwrite``. The page is written beside ``out``
and renamed into place; a failure leaves ``out`` as it was.
"""

from __future__ import annotations

import base64
import html
import json
import os

from graphprep.formats.guard import check_output
from graphprep.formats.output import replacing_file
from graphprep.formats.partitioned import GRAPH_JSON, load_partitioned
from graphprep.formats.assignment import META as ASSIGNMENT_META
from graphprep.formats.schema import METADATA

from graphprep.pipeline import inspect as inspect_mod
from graphprep.pipeline.core.cluster import ClusterOptions, TaskRunner, dask_client
from graphprep.pipeline.report import plots
from graphprep.pipeline.report.profile import profile_partitioned

GENERATOR = '<meta name="generator" content="graphprep prep report">'
STYLE = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:12px}
img{max-width:100%;display:block;margin:.6em 0}section{border-top:1px solid #ccc;margin-top:2em}
.warning{color:#a30;font-weight:bold}"""


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _partitioned_figures(path: str, cluster: ClusterOptions) -> list[str]:
    g = load_partitioned(path)
    with dask_client(cluster) as client:
        prof = profile_partitioned(g, TaskRunner(client, cluster.progress))
    panels = {"nodes": prof.nodes, "edges": {"edges": prof.edges},
              "halo nodes": prof.halo}
    if prof.train is not None:
        panels["train nodes"] = {"train": prof.train}
    return [_img(plots.degree_plot(prof.degree_hist), "in-degree distribution"),
            _img(plots.part_bars(panels), "per-part bars"),
            _img(plots.cut_heatmap(prof.cut), "edge-cut matrix")]


def _assignment_figures(info: dict) -> list[str]:
    stats = info.get("stats")
    if not stats:
        return []
    parts = stats["parts"]
    types = list(parts[0]["nodes"]) if parts else []
    panels = {"nodes": {t: [p["nodes"][t] for p in parts] for t in types}}
    if parts and parts[0]["edges"] is not None:
        panels["edges"] = {"edges": [p["edges"] for p in parts]}
    if parts and parts[0].get("train") is not None:
        panels["train nodes"] = {"train": [p["train"] for p in parts]}
    if parts and parts[0]["halo"]:
        panels["halo nodes"] = {t: [p["halo"][t] for p in parts] for t in parts[0]["halo"]}
    return [_img(plots.part_bars(panels), "per-part bars")]


def _metrics_figures(path: str) -> list[str]:
    with open(path) as f:
        epochs = json.load(f)["epochs"]
    names = sorted({k for r in epochs for k in r if inspect_mod.METRIC_KEY.search(k)
                    and k != "loss"})
    figures = [_img(plots.curves(epochs, ["loss"], "Training loss"), "loss")]
    if names:
        figures.append(_img(plots.curves(epochs, names, "Metrics"), "metrics"))
    if any(r.get("time_per_rank_s") for r in epochs):
        figures.append(_img(plots.time_bars(epochs), "time per rank"))
    if epochs and all(r.get("time_by_rank_s") for r in epochs):   # older files lack it
        figures.append(_img(plots.rank_bars(epochs), "time by rank"))
    return figures


def section(path: str, cluster: ClusterOptions) -> str:
    """The HTML of one PATH: heading, ``prep inspect``'s text, figures."""
    kind, target = inspect_mod.detect_kind(path)
    info = inspect_mod.describe(path)
    if kind == "partitioned":
        figures = _partitioned_figures(target, cluster)
    elif kind == "assignment":
        figures = _assignment_figures(info)
        warnings = (info.get("stats") or {}).get("warnings") or []
        figures[:0] = [f'<p class="warning"><b>Warning:</b> {html.escape(w)}</p>'
                       for w in warnings]
    elif kind == "metrics":
        figures = _metrics_figures(target)
    else:
        figures = ["<p>Degree distributions come from a partitioned graph: report the output "
                   "of <code>prep dispatch</code>.</p>"]
    return (f'<section class="{kind}"><h2>{html.escape(kind)}: {html.escape(path)}</h2>'
            f"<pre>{html.escape(inspect_mod.render_text(info))}</pre>{''.join(figures)}"
            "</section>")


def is_report(path: str) -> bool:
    """Whether ``path`` is a page this command wrote (its generator tag opens the file)."""
    try:
        with open(path, "rb") as f:
            return GENERATOR.encode() in f.read(512)
    except OSError:
        return False


def input_root(path: str) -> str:
    """What a PATH stands for: the folder of a ``graph.json``/``metadata.json``/
    ``partition_meta.json`` (the whole graph or assignment), else the path itself."""
    if os.path.basename(path) in (GRAPH_JSON, METADATA, ASSIGNMENT_META):
        return os.path.dirname(os.path.abspath(path))
    return path


def check_report_out(paths: list[str], out: str, overwrite: bool) -> None:
    """Refuse ``out`` before any work (:func:`graphprep.formats.guard.check_output`)."""
    check_output(out, [input_root(p) for p in paths], flag="--out", folder=False,
                 ours=is_report, what="a report written by prep report", overwrite=overwrite)


def run_report(paths: list[str], out: str, cluster: ClusterOptions,
               overwrite: bool = False) -> str:
    """Write the report of ``paths`` to ``out``; returns ``out``. Raises FormatError (before
    any work) for an ``out`` that :func:`check_report_out` refuses."""
    check_report_out(paths, out, overwrite)
    body = "".join(section(p, cluster) for p in paths)
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'>{GENERATOR}<title>graphprep "
            f"report</title><style>{STYLE}</style></head><body><h1>graphprep report</h1>"
            f"{body}</body></html>")
    with replacing_file(out) as tmp, open(tmp, "w") as f:
        f.write(page)
    return out
