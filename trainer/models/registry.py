"""Models by name: the built-ins (``sage``, ``gat``, ``rgcn``), a user's ``PKG.MODULE:FACTORY``
import path, or a user's file ``path/to/file.py:FACTORY``, built as ``factory(spec, **args)``.

Ranks are other processes (maybe other hosts), so a model is named by an import path or a file,
never passed as an object; the name and args go into the checkpoint, and ``--resume`` and
``trainer embed`` rebuild the model from them. A file is named by its absolute path
(:func:`canonical`), so the same run can resume from any folder. The shipped examples import
from any folder as ``trainer.examples.NAME:build``. Every failure to get a module is a
:class:`ModelError` naming the model and the cause in one line, the model last.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys

BUILTIN = {"sage": "graphprep.trainer.models.sage:build", "gat": "graphprep.trainer.models.gat:build",
           "rgcn": "graphprep.trainer.models.rgcn:build"}
EXAMPLES = "graphprep.trainer.examples"          # the shipped example models, importable anywhere


class ModelError(ValueError):
    """A model that cannot be built or run as named: one line, exit 2."""


def split_name(name: str) -> tuple[str, str]:
    """``(module or file, factory)`` of a ``--model`` value that is not a built-in (the
    factory after the last colon: a file path may hold colons of its own)."""
    module, sep, factory = name.rpartition(":")
    if not sep or not module or not factory.isidentifier():
        raise ModelError(f"--model {name!r}: neither a built-in ({', '.join(BUILTIN)}), an "
                         "import path PKG.MODULE:FACTORY, nor a file path/to/model.py:FACTORY")
    return module, factory


def is_file_name(module: str) -> bool:
    """Whether the module part of ``--model`` names a Python file rather than an import path."""
    return module.endswith(".py") or os.sep in module or "/" in module


def model_path(name: str) -> str:
    """The ``module:factory`` import path (or ``file.py:factory``) of ``name`` (a built-in's,
    or ``name`` itself); raises ModelError when it is neither."""
    if name in BUILTIN:
        return BUILTIN[name]
    split_name(name)
    return name


def canonical(name: str) -> str:
    """``name`` as it is recorded and passed to the ranks: a file's path made absolute (the
    ranks and a later ``--resume`` may run elsewhere), anything else unchanged."""
    if name in BUILTIN:
        return name
    module, factory = split_name(name)
    if is_file_name(module):
        return f"{os.path.abspath(os.path.expanduser(module))}:{factory}"
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


def _import_file(name: str, path: str):
    """The module of the Python file ``path`` (its folder first on ``sys.path``, as when
    Python runs a script, so that it imports the modules beside it)."""
    if not os.path.isfile(path):
        why = "is a folder" if os.path.isdir(path) else "does not exist"
        raise ModelError(f"the file {path} {why}: --model {name}")
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    # one module name per file: two files called model.py do not collide
    digest = hashlib.sha1(path.encode()).hexdigest()[:10]
    module_name = f"_graphprep_model_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None:
        raise ModelError(f"the file {path} is not a Python module: --model {name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as err:  # noqa: BLE001 - even its sys.exit is the user's to see
        del sys.modules[module_name]
        if isinstance(err, KeyboardInterrupt):
            raise
        raise ModelError(f"the file {path} does not import ({_what(err)}): "
                         f"--model {name}") from None
    return module


def _what(err: BaseException) -> str:
    """``err`` in one line: its type and message (a multi-line message joined)."""
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r})"
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def load_factory(name: str):
    """The factory callable of ``name``; raises ModelError when its module (or file) does not
    import or lacks the factory (the module's own error named)."""
    path = model_path(name)
    module_name, factory_name = split_name(path)
    if is_file_name(module_name):
        module = _import_file(name, os.path.abspath(os.path.expanduser(module_name)))
        where = f"the file {module.__file__}"
    else:
        try:
            module = importlib.import_module(module_name)
        except BaseException as err:  # noqa: BLE001 - any import failure is the user's to see
            if isinstance(err, KeyboardInterrupt):
                raise
            raise ModelError(f"--model {name}: module {module_name!r} does not import "
                             f"({_what(err)}){_examples_hint(module_name)}") from None
        where = f"module {module_name!r}"
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ModelError(f"--model {name}: {where} has no callable {factory_name!r}")
    return factory


def _examples_hint(module_name: str) -> str:
    """Where a shipped example imports from when ``examples.models.X`` (the repository's
    path, importable from its root only) does not."""
    if module_name.startswith("examples.models."):
        return (f"; the shipped examples import from any folder as "
                f"{EXAMPLES}.{module_name.removeprefix('examples.models.')}")
    return ""


def build(name: str, args: dict, spec):
    """``factory(spec, **args)``, checked to be a ``torch.nn.Module`` that left torch's
    default dtype as it was; raises ModelError naming the model when the factory rejects the
    args, raises, exits, or returns something else."""
    import torch
    factory = load_factory(name)
    dtype = torch.get_default_dtype()
    try:
        module = factory(spec, **args)
    except BaseException as err:  # noqa: BLE001 - the factory's own message is what helps
        if isinstance(err, KeyboardInterrupt):
            raise
        raise ModelError(f"--model {name}: {model_path(name)}(spec, **{args!r}) failed: "
                         f"{_what(err)}") from None
    finally:
        changed = torch.get_default_dtype()
        torch.set_default_dtype(dtype)     # the trainer's own tensors stay as they were
    if changed != dtype:
        # the batches' features stay float32, so every product would fail on the first batch
        raise ModelError(f"the factory set torch's default dtype to {changed} (the batches' "
                         f"features are {dtype}): build the module in {dtype} and cast inside "
                         f"forward if it needs more precision: --model {name}")
    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"--model {name}: the factory returned {type(module).__name__}, not "
                         "a torch.nn.Module")
    params = list(module.parameters())
    if not any(p.requires_grad for p in params):
        raise ModelError(f"the module has no parameters to train (DDP needs at least one "
                         f"that requires a gradient): --model {name}")
    # lazy parameters have no dtype of their own yet: the first batch gives them float32
    odd = sorted({str(p.dtype) for p in params if p.is_floating_point() and p.dtype != dtype
                  and not isinstance(p, torch.nn.parameter.UninitializedParameter)})
    if odd:
        raise ModelError(f"the module's parameters are {', '.join(odd)}, the batches' features "
                         f"{dtype}: build it in {dtype} (cast inside forward where it needs "
                         f"another precision): --model {name}")
    return module


def model_frame(name: str, err: BaseException) -> str | None:
    """``file:line`` of the innermost frame of ``err``'s traceback that lies in the folder of
    the user's model ``name`` (its factory's module), or None: a built-in, or an error that
    did not pass through the model's code."""
    import traceback
    if name in BUILTIN:
        return None
    try:
        factory = load_factory(name)
        folder = os.path.dirname(os.path.abspath(sys.modules[factory.__module__].__file__))
    except (ModelError, AttributeError, KeyError, TypeError):
        return None
    trainer = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ours = [trainer, os.path.join(os.path.dirname(trainer), "formats")]
    examples = os.path.join(trainer, "examples")
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        path = os.path.abspath(frame.filename)
        # a model file beside the trainer's own (the repository's root) is not the trainer
        if path.startswith(folder + os.sep) and (path.startswith(examples + os.sep) or
                                                 not any(path.startswith(d + os.sep)
                                                         for d in ours)):
            return f"{frame.filename}:{frame.lineno}"
    return None


def check_in_child(name: str, args: dict, spec) -> None:
    """:func:`build` in a forked child process, so that a factory that ends the process
    (``os._exit``), leaves a non-daemon thread running, or changes global state cannot do so
    to the launcher; raises ModelError as :func:`build` does, or naming how the child
    ended. Where there is no ``fork``, :func:`build` here."""
    if not hasattr(os, "fork"):
        build(name, args, spec)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # the child: report, then end at once
        os.close(read)
        try:
            build(name, args, spec)
            message = ""
        except ModelError as err:
            message = str(err) or "ModelError"
        except BaseException as err:  # noqa: BLE001 - anything else ends the check alike
            message = f"--model {name}: checking the model failed: {_what(err)}"
        with os.fdopen(write, "w") as out:
            out.write("ok\n" if not message else "error\n" + message)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)                                # its threads, atexit hooks: not the launcher's
    os.close(write)
    with os.fdopen(read) as inp:
        report = inp.read()
    _, status = os.waitpid(pid, 0)
    if report == "ok\n":
        return
    if report.startswith("error\n"):
        raise ModelError(report.removeprefix("error\n"))
    if os.WIFSIGNALED(status):
        import signal
        how = f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        how = f"ended the process (exit code {os.WEXITSTATUS(status)}, e.g. os._exit)"
    raise ModelError(f"the factory {model_path(name)} {how} instead of returning a "
                     f"torch.nn.Module: --model {name}")
