"""A `@kernel` call's configs, bound to the function by Nsight Python's rules and messages.

Configs come at decoration time or at call time (never both); each binds to the function's
signature: short ones padded with defaults, keyword-only parameters passed by keyword.
Errors are `ProfilerException` (``invalid_request``) with Nsight Python's messages.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nsight_core.errors import ErrorClass
from nsight_core.exceptions import ProfilerException

Bound = tuple[tuple[Any, ...], dict[str, Any]]
"""One config as the function is called with it: positional values, keyword-only values."""


def _listed(configs: Iterable[Any]) -> list[Any]:
    if isinstance(configs, str | bytes) or not isinstance(configs, Iterable):
        raise ProfilerException(
            f"configs must be an iterable, got {type(configs)}", ErrorClass.INVALID_REQUEST
        )
    items = list(configs)
    if not items:
        raise ProfilerException("configs cannot be empty", ErrorClass.INVALID_REQUEST)
    return items


def sanitize_configs(func: Callable[..., Any], configs: Iterable[Any] | None) -> list[Bound]:
    """Bind each config to the function's signature, as Nsight Python does.

    A config is a tuple/list of positional values; a bare (non-tuple, non-list) value is a
    one-value config, allowed for a function with one parameter. So ``(2048, 512)`` for a
    one-parameter function is two values (an error), and a tuple argument is written
    ``((2048, 512),)``. Short configs are padded with defaults; keyword-only parameters are
    passed by keyword.
    """
    sig = inspect.signature(func)
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    required = [p for p in params if p.default is p.empty]

    def bad(message: str, hint: str = "") -> ProfilerException:
        return ProfilerException(message, ErrorClass.INVALID_REQUEST, hint)

    if configs is None:
        if required:
            raise bad(
                "You have provided no configs. Provide configs at decoration time or at runtime."
            )
        return [((), {})]
    items = _listed(configs)
    if len(params) == 1:
        items = [c if isinstance(c, tuple | list) else (c,) for c in items]
    if not all(isinstance(c, tuple | list) for c in items):
        raise bad(
            "each config must be a tuple of arguments (a bare value only for one-parameter functions)"
        )
    lengths = [len(c) for c in items]
    if len(set(lengths)) > 1:
        raise bad(f"All configs must have the same number of arguments. Found lengths: {lengths}")
    n = lengths[0]
    if not len(required) <= n <= len(params):
        expects = (
            str(len(params))
            if len(required) == len(params)
            else f"between {len(required)} and {len(params)}"
        )
        hint = (
            "a tuple argument of a one-parameter function is written ((a, b),)"
            if len(params) == 1
            else ""
        )
        raise bad(f"Configs have {n} arguments, but function expects {expects}", hint)
    return [_bind(params, c) for c in items]


def _bind(params: Sequence[inspect.Parameter], config: Sequence[Any]) -> Bound:
    """Positional values padded with defaults; keyword-only parameters go by keyword."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, p in enumerate(params):
        value = config[i] if i < len(config) else p.default
        if p.kind == p.KEYWORD_ONLY:
            kwargs[p.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def config_values(bound: Bound) -> tuple[Any, ...]:
    """The config as one tuple in signature order (what collectors and derive_metric get)."""
    return (*bound[0], *bound[1].values())


def arguments_of(func: Callable[..., Any], bound: Bound) -> dict[str, Any]:
    """The config as name -> the object passed (what the dataframe shows)."""
    names = [
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return dict(zip(names, bound[0], strict=False)) | bound[1]


def _jsonable(v: Any) -> Any:
    if isinstance(v, int | float | str | bool | type(None)):
        return v
    if isinstance(v, tuple | list) and all(
        isinstance(x, int | float | str | bool | type(None)) for x in v
    ):
        return list(v)
    return repr(v)


def params_of(func: Callable[..., Any], bound: Bound) -> dict[str, Any]:
    """The config in JSON form for `Row.Params`: tuples of scalars as lists, others as repr."""
    return {k: _jsonable(v) for k, v in arguments_of(func, bound).items()}


class FirstCallConfigs:
    """Decoration-time configs, read at the first call and kept: Nsight Python leaves a
    generator unconsumed until the function runs (a program may hand one generator to two
    decorators and call only one of them)."""

    def __init__(self, configs: Iterable[Any] | None) -> None:
        self._given = configs
        self._read: list[Any] | None = None

    def read(self) -> list[Any] | None:
        if self._given is not None:
            self._read, self._given = list(self._given), None
        return self._read


def call_configs(
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    configs: Iterable[Any] | None,
    decorated: list[Any] | None,
) -> list[Any] | None:
    """The configs of one call, by Nsight Python's rules (with its messages)."""
    if kwargs:
        raise ProfilerException(
            f"Keyword arguments are not supported yet: {sorted(kwargs)}",
            ErrorClass.INVALID_REQUEST,
            "pass configs as tuples of positional values",
        )
    if args and configs is not None:
        raise ProfilerException(
            "pass either positional arguments or configs=, not both", ErrorClass.INVALID_REQUEST
        )
    given: list[Any] | None = [args] if args else (None if configs is None else list(configs))
    if given is not None and decorated is not None:
        raise ProfilerException(
            "You have provided configs at decoration time and at runtime. "
            "Provide configs at decoration time or at runtime.",
            ErrorClass.INVALID_REQUEST,
        )
    return given if given is not None else decorated


__all__ = [
    "Bound",
    "FirstCallConfigs",
    "arguments_of",
    "call_configs",
    "config_values",
    "params_of",
    "sanitize_configs",
]
