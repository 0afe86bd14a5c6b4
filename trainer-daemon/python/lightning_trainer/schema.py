"""Strict validation of request params into dataclasses (no pydantic here: it is not installed everywhere).

A params class is a dataclass whose fields are snake_case; the wire keys are their camelCase spelling. Supported
field types: bool, int, float, str, dict, Any, list[T], Optional[T], Literal[...], nested params dataclasses, and
unions of dataclasses told apart by their `kind` Literal. Unknown keys and wrong types raise BadParams naming the
field's path (`params.model.kind`), which the worker reports as error kind `bad_params`.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal, Union


class BadParams(ValueError):
    """A request param is missing, unknown or of the wrong type; the message names the field."""


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def parse(cls: type, value: Any, path: str = "params") -> Any:
    """Build `cls` (a dataclass) from a JSON value, or raise BadParams naming the offending field."""
    return _convert(cls, value, path)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return {"bool": "boolean", "int": "integer", "float": "number", "str": "string", "dict": "object"}.get(
            tp.__name__, "object"
        )
    if typing.get_origin(tp) is list:
        return "array"
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(v) for v in typing.get_args(tp))
    return str(tp)


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Union:
        options = [t for t in typing.get_args(tp) if t is not type(None)]
        if value is None and len(options) < len(typing.get_args(tp)):
            return None
        if len(options) == 1:
            return _convert(options[0], value, path)
        return _convert_kind_union(options, value, path)
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise BadParams(f"{path} must be one of {_type_name(tp)}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise BadParams(f"{path} must be an array")
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, path)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (bool, str, dict) and isinstance(value, tp):
        return value
    raise BadParams(f"{path} must be {_type_name(tp)}, got {type(value).__name__}")


def _convert_kind_union(options: list, value: Any, path: str) -> Any:
    kinds = {typing.get_args(typing.get_type_hints(t)["kind"])[0]: t for t in options}
    if not isinstance(value, dict):
        raise BadParams(f"{path} must be an object")
    if value.get("kind") not in kinds:
        raise BadParams(f"{path}.kind must be one of {', '.join(map(repr, kinds))}, got {value.get('kind')!r}")
    return _convert(kinds[value["kind"]], value, path)


def _convert_dataclass(cls: type, value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise BadParams(f"{path} must be an object")
    hints = typing.get_type_hints(cls)
    fields = {camel(f.name): f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise BadParams(f"{path}.{unknown[0]} is not a known field (known: {', '.join(fields)})")
    kwargs = {}
    for key, field in fields.items():
        if key in value:
            kwargs[field.name] = _convert(hints[field.name], value[key], f"{path}.{key}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise BadParams(f"{path}.{key} is required")
    result = cls(**kwargs)
    check = getattr(result, "check", None)
    if check:
        check(path)
    return result


def require(condition: bool, message: str) -> None:
    """Range checks inside a params class's `check(path)`."""
    if not condition:
        raise BadParams(message)


def describe(tp: Any) -> dict:
    """What `parse` accepts for `tp`, as a small JSON shape the daemon's test compares with its zod schemas.

    `{"type": "boolean" | "integer" | "number" | "string" | "object" | "any"}`, `{"enum": [...]}`,
    `{"type": "array", "items": shape}`, `{"type": "object", "fields": {wireKey: {"shape", "required"}}}` for a
    params dataclass, `{"union": {kind: shape}}` for dataclasses told apart by `kind`; `"nullable": true` where
    None is accepted.
    """
    origin = typing.get_origin(tp)
    if tp is Any:
        return {"type": "any"}
    if origin is Union:
        options = [t for t in typing.get_args(tp) if t is not type(None)]
        shape = (
            describe(options[0])
            if len(options) == 1
            else {"union": {typing.get_args(typing.get_type_hints(t)["kind"])[0]: describe(t) for t in options}}
        )
        return {**shape, "nullable": True} if len(options) < len(typing.get_args(tp)) else shape
    if origin is Literal:
        return {"enum": sorted(typing.get_args(tp), key=repr)}
    if origin is list:
        (item,) = typing.get_args(tp)
        return {"type": "array", "items": describe(item)}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return {
            "type": "object",
            "fields": {
                camel(f.name): {
                    "shape": describe(hints[f.name]),
                    "required": f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                }
                for f in dataclasses.fields(tp)
            },
        }
    names = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object"}
    if tp in names:
        return {"type": names[tp]}
    raise TypeError(f"describe: unsupported type {tp!r}")


if __name__ == "__main__":
    # `python3 -m lightning_trainer.schema`: every worker method's params as `describe` shapes (one JSON object).
    import json
    import sys

    from .worker import METHODS

    json.dump({method: describe(cls) for method, cls in METHODS.items()}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
