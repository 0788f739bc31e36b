"""Bad options fail before any work, in one line naming the option (``pytest -m faults``):
NaN and inf are refused by every numeric option of ``prep``, the trainer and ``trainer
embed``; split fractions are 0 <= f < 1 with val + test < 1; a usage error is one
``Error:`` line (with the ``-h`` hint), never click's usage block; the trainer's ``--graph``
that is not a partitioned graph exits 2 saying what it expected.
"""

from __future__ import annotations

import os

import pytest

from faultkit import assert_clean_exit, run_cli, tree_hash

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def graph(scheduler, tmp_path_factory):
    """A small synth graph G with its assignment A and dispatch D."""
    from conftest import synth_partitioned
    root = tmp_path_factory.mktemp("options")
    return synth_partitioned(scheduler, root, "--nodes", 500, "--edges", 3000)


def one_error_line(text: str, *names: str) -> str:
    """Exactly one non-empty line of output, ``Error: ...`` naming every one of ``names``."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), text
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def prep_usage_error(args, names) -> None:
    """``prep *args`` exits 2 before any work with one error line naming ``names``."""
    from click.testing import CliRunner

    from graphprep.pipeline.cli import prep
    result = CliRunner().invoke(prep, [str(a) for a in args])
    assert result.exit_code == 2, (result.exit_code, result.output)
    one_error_line(result.output, *names)


PREP_BAD_NUMBERS = [
    ("synth", "{out}", "--homophily", "nan"),
    ("synth", "{out}", "--exponent", "inf"),
    ("synth", "{out}", "--feat-signal", "nan"),
    ("synth", "{out}", "--feat-signal", "-inf"),
    ("synth", "{out}", "--split", "nan,0.2,0.2"),
    ("synth", "{out}", "--split", "0.6,inf,0.2"),
    ("partition", "{G}", "{out}", "-p", "2", "--imbalance", "nan"),
    ("partition", "{G}", "{out}", "-p", "2", "--lost-worker-timeout", "nan"),
    ("split-edges", "{G}", "{out}", "--etype", "_N:_E:_N", "--val", "nan"),
    ("split-edges", "{G}", "{out}", "--etype", "_N:_E:_N", "--test", "nan"),
    ("split-edges", "{G}", "{out}", "--etype", "_N:_E:_N", "--test", "inf"),
    ("split-edges", "{G}", "{out}", "--etype", "_N:_E:_N", "--val", "1"),
    ("split-edges", "{G}", "{out}", "--etype", "_N:_E:_N", "--val", "-0.1"),
    ("split-edges", "{G}", "{out}", "--etype", "_N:_E:_N", "--val", "0.6", "--test", "0.4"),
]


@pytest.mark.parametrize("args", PREP_BAD_NUMBERS, ids=lambda a: " ".join(a[2:]))
def test_prep_numeric_options_refuse_nan_inf_and_out_of_range(graph, tmp_path, args):
    before = tree_hash(graph)
    flag = next(a for a in args if a.startswith("--") and a not in ("--etype",))
    args = [a.format(out=tmp_path / "out", G=graph / "G") for a in args]
    prep_usage_error(args, [flag])
    assert not os.path.exists(tmp_path / "out") and tree_hash(graph) == before


@pytest.mark.parametrize("args, names", [
    (("partition", "{G}", "{out}", "-p", "2", "--method", "foo"), ["--method", "'foo'"]),
    (("partition", "{G}", "{out}", "-p", "zero"), ["--num-parts", "'zero'"]),
    (("partition", "{G}", "{out}", "-p", "0"), ["--num-parts"]),
    (("partition", "{G}"), ["OUT and --num-parts are required"]),
    (("synth",), ["Missing argument 'OUT'"]),
    (("synth", "{out}", "--nodes", "1"), ["--nodes"]),
    (("synth", "{out}", "--bogus"), ["No such option '--bogus'"]),
    (("dispatch", "{G}", "{A}", "{out}", "--range-size", "0"), ["--range-size"]),
    (("chunk", "{G}", "{out}", "--from", "xml"), ["--from"]),
    (("export", "{D}", "{out}"), ["Missing option '--to'"]),
    (("nosuchstep",), ["No such command 'nosuchstep'"]),
])
def test_prep_usage_errors_are_one_line(graph, tmp_path, args, names):
    args = [a.format(out=tmp_path / "out", G=graph / "G", A=graph / "A", D=graph / "D")
            for a in args]
    prep_usage_error(args, names + ["(see 'prep"])


@pytest.mark.parametrize("args, names", [
    (("--lr", "nan"), ["--lr nan"]),
    (("--weight-decay", "inf"), ["--weight-decay inf"]),
    (("--dropout", "nan"), ["--dropout nan"]),
    (("--rpc-timeout", "inf"), ["--rpc-timeout inf"]),
    (("--cache-mb", "nan"), ["--cache-mb nan"]),
    (("--fanouts", "5,x"), ["--fanouts", "'5,x'"]),
    (("--task", "edges"), ["--task", "'edges'"]),
])
def test_trainer_numeric_options_refuse_nan_and_inf(graph, args, names):
    proc = run_cli("--graph", graph / "D", *args, "--checkpoint-dir", graph / "ck",
                   trainer=True, timeout=60)
    one_error_line(assert_clean_exit(proc, 2, names), *names)
    assert not os.path.exists(graph / "ck")


@pytest.mark.parametrize("args, names", [
    (("--rpc-timeout", "nan"), ["--rpc-timeout", "'nan' is not a finite number"]),
    (("--rpc-timeout", "0"), ["--rpc-timeout"]),
    (("--batch-size", "0"), ["--batch-size"]),
    (("--threads", "-1"), ["--threads"]),
])
def test_embed_options_are_checked(graph, tmp_path, args, names):
    proc = run_cli("embed", "--graph", graph / "D", "--checkpoint", tmp_path, "--out",
                   tmp_path / "emb", *args, trainer=True, timeout=60)
    one_error_line(assert_clean_exit(proc, 2, names), *names)


@pytest.mark.parametrize("given, says", [
    ("G", "this is a chunked graph"),
    ("G/metadata.json", "this is a chunked graph"),
    ("A", "this is a partition assignment"),
    ("truncated.json", "invalid JSON"),
    ("nothing-here", "graph.json not found"),
])
@pytest.mark.parametrize("command", [(), ("embed", "--checkpoint", "ck", "--out", "emb")])
def test_trainer_graph_that_is_not_partitioned_exits_2(graph, tmp_path, given, says, command):
    with open(graph / "D" / "graph.json") as f:
        (tmp_path / "truncated.json").write_text(f.read()[:200])
    path = graph / given if given[0] in "GA" else tmp_path / given
    proc = run_cli(*command, "--graph", path, trainer=True, timeout=60, cwd=tmp_path)
    line = one_error_line(assert_clean_exit(proc, 2, [says]), "--graph")
    assert "graph.json" in line
