"""One declaration per command-line option of the trainer: :class:`Opt` holds an option's
help, default, choices, range and text parser once, and from it come

* the click option (:func:`click_options`: type, default shown in ``--help``, a range as
  ``x>=1``, the parse and range checks as one-line usage errors),
* the dataclass field (:meth:`Opt.field`; ``graphprep.trainer.config.TrainConfig``'s fields are
  declared so, and :func:`declared` reads them back), and
* the per-option check of a value however it was made (:meth:`Opt.check`; what
  ``TrainConfig.check_values`` runs for every field before its cross-option rules).

Without torch: the launcher builds and checks its options before any rank starts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import click

REQUIRED = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()   # Opt.default: no default


@dataclass(frozen=True)
class Range:
    """A finite number ``>= min`` (``> min`` when ``min_open``), and ``<= max`` (``< max``
    when ``max_open``) when ``max`` is given. NaN fails every comparison, so it is refused."""

    min: float
    min_open: bool = False
    max: float | None = None
    max_open: bool = False

    def words(self) -> str:
        """The rule as the error says it: ``at least 1``, ``positive``, ``in [0, 1)``."""
        if self.max is not None:
            return (f"in {'(' if self.min_open else '['}{self.min}, {self.max}"
                    f"{')' if self.max_open else ']'}")
        if self.min_open:
            return "positive" if self.min == 0 else f"above {self.min}"
        return ">= 0" if self.min == 0 else f"at least {self.min}"

    def check(self, flag: str, value) -> None:
        """Raise ValueError ``FLAG VALUE: must be ...`` when ``value`` breaks the rule."""
        ok = math.isfinite(value) and (value > self.min if self.min_open else
                                       value >= self.min)
        if ok and self.max is not None:
            ok = value < self.max if self.max_open else value <= self.max
        if not ok:
            raise ValueError(f"{flag} {value}: must be {self.words()}")

    def click_type(self, number: type) -> click.ParamType:
        """A click type that converts to ``number`` and shows this range in ``--help`` (the
        check itself is :meth:`check`'s, run by the option's callback)."""
        shown = _ShownFloatRange if number is float else _ShownIntRange
        return shown(self.min, self.max, min_open=self.min_open, max_open=self.max_open)


class _ShownIntRange(click.IntRange):
    """An integer whose range ``--help`` shows; converted only (the callback checks)."""

    def convert(self, value, param, ctx):
        return click.INT.convert(value, param, ctx)


class _ShownFloatRange(click.FloatRange):
    """A float whose range ``--help`` shows; converted only (the callback checks)."""

    def convert(self, value, param, ctx):
        return click.FLOAT.convert(value, param, ctx)


@dataclass(frozen=True)
class Hops:
    """Fanouts, one per hop from the seeds outward: at least one hop, each positive or -1
    (all neighbors)."""

    def check(self, flag: str, value) -> None:
        if not value:
            raise ValueError(f"{flag}: give at least one hop")
        if any(f == 0 or f < -1 for f in value):
            raise ValueError("fanouts are positive, or -1 for all neighbors")


@dataclass(frozen=True)
class Parser:
    """An option given as text: ``parse`` (text or None -> value; ValueError says what is
    wrong with the text) and ``text`` (a value -> the text giving it, for the default)."""

    parse: Callable[[str | None], Any]
    text: Callable[[Any], str | None]


def parse_ints(text: str | None) -> list[int] | None:
    """``15,10,5`` -> ``[15, 10, 5]``; None stays None."""
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"{text!r}: comma-separated integers, e.g. 15,10,5") from None


INTS = Parser(parse_ints, lambda value: None if value is None else ",".join(map(str, value)))


@dataclass(frozen=True)
class Opt:
    """One option, declared once. ``default`` REQUIRED (and no ``factory``): required.
    The click type comes from ``choices``, ``rule`` (a :class:`Range`, shown in ``--help``),
    ``path`` or ``type`` (an explicit click type), else from the default; ``parser`` reads a
    text option (its default shown as text). ``flag``: a switch; ``pair``: ``--x/--no-x``."""

    help: str
    default: Any = REQUIRED
    factory: Callable[[], Any] | None = None
    choices: tuple[str, ...] | None = None
    rule: Range | Hops | None = None
    parser: Parser | None = None
    path: bool = False
    type: Any = None
    flag: bool = False
    pair: bool = False
    short: str | None = None
    hidden: bool = False

    def field(self):
        """The dataclass field declared by this option (its metadata ``"option"``: self)."""
        if self.factory is not None:
            return dataclasses.field(default_factory=self.factory, metadata={"option": self})
        if self.default is REQUIRED:
            return dataclasses.field(metadata={"option": self})
        return dataclasses.field(default=self.default, metadata={"option": self})

    def check(self, flag: str, value) -> None:
        """Raise ValueError naming ``flag`` when ``value`` is not one of the choices or
        breaks the rule (None, an option not given, passes)."""
        if value is None:
            return
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{flag} must be one of {self.choices}")
        if self.rule is not None:
            self.rule.check(flag, value)

    def click_option(self, name: str):
        """The ``click.option`` decorator of parameter ``name`` (``--name-with-dashes``)."""
        flag = option_flag(name)
        decls = [flag if not self.pair else f"{flag}/--no-{flag[2:]}", name]
        if self.short:
            decls.insert(0, self.short)
        default = self.factory() if self.factory is not None else self.default
        kw: dict[str, Any] = {"help": self.help, "hidden": self.hidden}
        if default is REQUIRED:
            kw["required"] = True
        else:
            kw["default"] = self.parser.text(default) if self.parser else default
        if self.flag:
            kw["is_flag"] = True
        elif self.choices is not None:
            kw["type"] = click.Choice(self.choices)
        elif self.rule is not None and isinstance(self.rule, Range):
            kw["type"] = self.rule.click_type(type(default))
        elif self.path:
            kw["type"] = click.Path()
        elif self.type is not None:
            kw["type"] = self.type

        def callback(ctx, param, value):
            if self.parser is not None:
                try:
                    value = self.parser.parse(value)
                except ValueError as err:
                    raise click.BadParameter(str(err)) from None
            try:
                self.check(flag, value)
            except ValueError as err:
                raise click.UsageError(str(err)) from None
            return value

        return click.option(*decls, callback=callback, **kw)


def option_flag(name: str) -> str:
    """``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def declared(cls) -> dict[str, Opt]:
    """The options a dataclass declares (its fields made by :meth:`Opt.field`), in order."""
    return {f.name: f.metadata["option"] for f in dataclasses.fields(cls)
            if "option" in f.metadata}


def check_declared(obj) -> None:
    """Every declared option of dataclass ``obj`` checked (:meth:`Opt.check`)."""
    for name, spec in declared(type(obj)).items():
        spec.check(option_flag(name), getattr(obj, name))


def click_options(specs: Iterable[tuple[str, Opt]]):
    """A decorator adding the click options of ``(name, Opt)`` pairs, in that order in
    ``--help``."""
    specs = list(specs)

    def add(command):
        for name, spec in reversed(specs):
            command = spec.click_option(name)(command)
        return command
    return add
