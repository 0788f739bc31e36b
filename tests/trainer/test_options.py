"""The trainer's options are declared once (``graphprep.trainer.options``): TrainConfig's fields
carry them, the train command's click options and TrainConfig.check_values are built from
them, and ``trainer embed`` reuses the ones it shares. No graph, no torch."""

from __future__ import annotations

import dataclasses
import math
import re

import click
import pytest


def parsed(command, *args) -> dict:
    """The parameters click gives ``command`` for ``args`` (no callback run)."""
    with command.make_context("cmd", list(args)) as ctx:
        return dict(ctx.params)


def test_the_command_defaults_are_the_config_defaults():
    from graphprep.trainer.cli import main
    from graphprep.trainer.config import TrainConfig
    params = parsed(main, "--graph", "g")
    assert {"threads", "verbose", "iface"} <= set(params)
    options = {k: v for k, v in params.items() if k not in ("threads", "verbose", "iface")}
    assert set(options) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert TrainConfig(**options) == TrainConfig(graph="g")


def test_every_config_field_declares_its_option_and_explains_itself():
    from graphprep.trainer.config import TrainConfig
    from graphprep.trainer.options import declared
    specs = declared(TrainConfig)
    assert list(specs) == [f.name for f in dataclasses.fields(TrainConfig)]
    assert all(spec.help for spec in specs.values() if not spec.hidden)


@pytest.mark.parametrize("args, says", [
    (("--batch-size", "0"), "--batch-size 0: must be at least 1"),
    (("--lr", "nan"), "--lr nan: must be positive"),
    (("--cache-mb", "-1"), "--cache-mb -1.0: must be >= 0"),
    (("--dropout", "1"), "--dropout 1.0: must be in [0, 1)"),
    (("--embedding-dim", "0"), "--embedding-dim 0: must be at least 1"),
    (("--fanouts", "5,0"), "fanouts are positive"),
    (("--threads", "-1"), "--threads -1: must be >= 0"),
])
def test_the_command_and_the_config_refuse_a_value_alike(args, says):
    from graphprep.trainer.cli import main
    from graphprep.trainer.config import TrainConfig
    with pytest.raises(click.UsageError, match="^" + re.escape(says)):
        parsed(main, "--graph", "g", *args)
    if args[0] == "--threads":
        return          # the launcher's own option, not the run's
    name = args[0][2:].replace("-", "_")
    value = [int(v) for v in args[1].split(",")] if name == "fanouts" else \
        type(getattr(TrainConfig(graph="g"), name))(args[1])
    with pytest.raises(ValueError, match="^" + re.escape(says)):
        TrainConfig(graph="g", **{name: value}).check_values()


def test_the_config_refuses_what_click_would():
    from graphprep.trainer.config import TrainConfig
    for bad, says in [({"task": "edges"}, "--task must be one of"),
                      ({"placement": "disk"}, "--placement must be one of"),
                      ({"rpc_timeout": math.inf}, "--rpc-timeout inf: must be positive"),
                      ({"fanouts": []}, "--fanouts: give at least one hop"),
                      ({"eval_fanouts": [5]}, "--eval-fanouts has 1 hops"),
                      ({"remote_store_fill": True}, "--remote-store-fill fills the store of")]:
        with pytest.raises(ValueError, match=says):
            TrainConfig(graph="g", **bad).check_values()
    TrainConfig(graph="g").check_values()
    TrainConfig(graph="g", remote_store="s", remote_store_fill=True).check_values()


def test_embed_shares_the_declarations_of_the_options_it_has_in_common():
    from graphprep.trainer import cli
    from graphprep.trainer.config import TrainConfig
    from graphprep.trainer.options import declared
    from graphprep.trainer.tasks import embed
    train = declared(TrainConfig)
    assert embed.OPTIONS["iface"] is cli.IFACE and embed.OPTIONS["threads"] is cli.THREADS
    assert embed.OPTIONS["verify_data"] is train["verify_data"]
    assert embed.OPTIONS["progress"] is train["progress"]
    assert embed.OPTIONS["device"].choices == train["device"].choices
    params = parsed(embed.main, "--graph", "g", "--checkpoint", "c", "--out", "o")
    assert params["batch_size"] == 1024 and params["rpc_timeout"] == 60.0
