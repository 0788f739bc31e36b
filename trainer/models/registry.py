"""Models by name: the built-ins (``sage``, ``gat``, ``rgcn``) or a user's
``PKG.MODULE:FACTORY`` import path, built as ``factory(spec, **args)``.

Ranks are other processes (maybe other hosts), so a model is named by an import path, never
passed as an object; the path and args go into the checkpoint, and ``--resume`` and
``trainer embed`` rebuild the model from them. Every failure to get a module is a
:class:`ModelError` naming the model and the cause in one line.
"""

from __future__ import annotations

import importlib
import json

BUILTIN = {"sage": "trainer.models.sage:build", "gat": "trainer.models.gat:build",
           "rgcn": "trainer.models.rgcn:build"}


class ModelError(ValueError):
    """A model that cannot be built or run as named: one line, exit 2."""


def model_path(name: str) -> str:
    """The ``module:factory`` import path of ``name`` (a built-in's, or ``name`` itself)."""
    if name in BUILTIN:
        return BUILTIN[name]
    module, sep, factory = name.partition(":")
    if not sep or not module or not factory.isidentifier():
        raise ModelError(f"--model {name!r}: neither a built-in ({', '.join(BUILTIN)}) nor an "
                         "import path PKG.MODULE:FACTORY")
    return name


def parse_model_args(text: str | None) -> dict:
    """``--model-args`` JSON: an object of keyword arguments for the factory."""
    if not text:
        return {}
    try:
        args = json.loads(text)
    except json.JSONDecodeError as err:
        raise ModelError(f"--model-args {text!r}: not JSON ({err})") from None
    if not isinstance(args, dict):
        raise ModelError(f"--model-args {text!r}: must be a JSON object of keyword arguments")
    return args


def load_factory(name: str):
    """The factory callable of ``name``; raises ModelError when its module does not import
    or lacks the factory (the module's own error named)."""
    path = model_path(name)
    module_name, _, factory_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import failure is the user's to see
        raise ModelError(f"--model {name}: module {module_name!r} does not import "
                         f"({type(err).__name__}: {err})") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ModelError(f"--model {name}: module {module_name!r} has no callable "
                         f"{factory_name!r}")
    return factory


def build(name: str, args: dict, spec):
    """``factory(spec, **args)``, checked to be a ``torch.nn.Module``; raises ModelError
    naming the model when the factory rejects the args, raises, or returns something else."""
    import torch
    factory = load_factory(name)
    try:
        module = factory(spec, **args)
    except Exception as err:  # noqa: BLE001 - the factory's own message is what helps
        raise ModelError(f"--model {name}: {model_path(name)}(spec, **{args!r}) failed: "
                         f"{type(err).__name__}: {err}") from None
    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"--model {name}: the factory returned {type(module).__name__}, not "
                         "a torch.nn.Module")
    return module
