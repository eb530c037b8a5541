"""A compressor's parameter schema (:class:`Param`) and the ``"name:k=v,k=v"`` spec parser
(:func:`parse_spec`): parsing and checking parameters (``ConfigError`` naming compressor,
parameter and allowed range) and the canonical spec string (round-trips through
:func:`hpcgc.compressors.make`). Used by :class:`hpcgc.compressors.base.Compressor`."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError

REQUIRED = object()
"""Default marker for a parameter the user must give."""

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


@dataclass(frozen=True)
class Param:
    """One compressor parameter: name, type, default and allowed range.

    ``kind`` is ``int``, ``float``, ``bool`` or ``str`` (a word from ``choices``). ``low``/``high`` bound the value (inclusive unless
    ``low_open``); ``allow_inf`` additionally admits ``inf`` for an int parameter (e.g. ``block=inf``
    = one block); ``choices`` restricts the value to a finite set. ``in_spec``: ``"always"`` lists
    the parameter in the canonical spec, ``"nondefault"`` only when it differs from the default
    (used for options such as ``fp64`` so that ordinary specs stay short). ``flag``: a bool shown as
    its bare name when true (``identity:fp16``; the parser reads a bare key as ``key=true``).
    """

    name: str
    kind: type
    default: Any = REQUIRED
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    allow_inf: bool = False
    choices: tuple | None = None
    doc: str = ""
    in_spec: str = "always"
    flag: bool = False               # a bool written as its bare name when true ("identity:fp16")

    # -- text ------------------------------------------------------------------------------------
    def allowed(self) -> str:
        """Human-readable allowed range, e.g. 'integer >= 1 or inf'."""
        if self.choices is not None:
            return "one of " + ", ".join(format_value(c) for c in self.choices)
        if self.kind is bool:
            return "true or false"
        noun = "integer" if self.kind is int else "number"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {format_value(self.low)}")
        if self.high is not None:
            parts.append(f"<= {format_value(self.high)}")
        text = noun + (" " + " and ".join(parts) if parts else "")
        if self.allow_inf:
            text += " or inf"
        return text

    def describe(self) -> str:
        default = "required" if self.default is REQUIRED else format_value(self.default)
        doc = f"; {self.doc}" if self.doc else ""
        return f"{self.name}={default} ({self.allowed()}{doc})"

    # -- checking --------------------------------------------------------------------------------
    def coerce(self, value: Any, who: str) -> Any:
        """Return ``value`` converted to this parameter's type, or raise ConfigError."""
        given = value

        def bad(why: str):
            return ConfigError(f"{who}: parameter {self.name}={given!r} {why}; "
                               f"allowed: {self.allowed()}")

        if self.kind is str:                        # a word from ``choices`` (e.g. a mode name)
            if isinstance(value, str) and value.strip().lower() in self.choices:
                return value.strip().lower()
            raise bad("is not allowed")
        if isinstance(value, str):
            value = parse_value(value)
            if isinstance(value, str):
                raise bad("is not a number or boolean")
        if isinstance(value, np.generic):
            value = value.item()
        if self.kind is bool:
            if not isinstance(value, bool):
                raise bad("has the wrong type")
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise bad("has the wrong type")
        if isinstance(value, float) and math.isnan(value):
            raise bad("is not a number")
        if self.kind is int:
            if isinstance(value, float) and math.isinf(value):
                if not (self.allow_inf and value > 0):
                    raise bad("is out of range")
                value = math.inf
            elif isinstance(value, float):
                if not value.is_integer():
                    raise bad("is not an integer")
                value = int(value)
            else:
                value = int(value)
        else:
            value = float(value)
            if math.isinf(value) and not self.allow_inf and (self.choices is None or value not in self.choices):
                raise bad("is out of range")
        if self.choices is not None:
            for c in self.choices:
                if value == c:
                    return c
            raise bad("is not allowed")
        if not math.isinf(value):
            if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
                raise bad("is out of range")
            if self.high is not None and value > self.high:
                raise bad("is out of range")
        return value


def format_value(v: Any) -> str:
    """Canonical text of a parameter value: ints plain, floats by repr, inf, true/false."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    return str(v)


def parse_value(text: str) -> Any:
    """Parse one parameter value: int, float (incl. ``inf``, ``1e3``), bool; else the stripped string."""
    t = text.strip()
    low = t.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    try:
        return int(t, 10)
    except ValueError:
        pass
    try:
        return float(t)      # accepts inf, +inf, -inf, nan, 1e3, 0.5
    except ValueError:
        return t


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``"name:k=v,k=v"`` into the lower-cased name and a dict of parsed values. A bare key
    is a flag set to true: ``"identity:fp16"`` = ``"identity:fp16=true"``; ``compose:A+B`` gives
    ``("compose", {"of": "A+B"})`` (the parts' own specs are parsed by :mod:`.compose`)."""
    if not isinstance(spec, str):
        raise ConfigError(f"compressor spec must be a string, got {type(spec).__name__}")
    name, _, rest = spec.partition(":")
    name = name.strip().lower()
    if name == "compose":                  # compose:A+B: the parts' specs, verbatim (compose.py splits them)
        return name, ({"of": rest.strip()} if rest.strip() else {})
    params: dict[str, Any] = {}
    if rest.strip():
        for item in rest.split(","):
            key, eq, val = item.partition("=")
            key = key.strip()
            if not eq and key:                  # a bare key is a flag: "identity:fp16" = "identity:fp16=true"
                eq, val = "=", "true"
            if not eq or not key or not val.strip():
                raise ConfigError(f"compressor spec {spec!r}: expected 'name:param=value,...', "
                                  f"got item {item.strip()!r}")
            if key in params:
                raise ConfigError(f"compressor spec {spec!r}: parameter {key} given twice")
            params[key] = parse_value(val)
    return name, params


FP64_PARAM = Param("fp64", bool, False, doc="float64 scales/values on the wire",
                   in_spec="nondefault")
"""The common ``fp64`` option (float32 on the wire by default, as in the papers)."""
