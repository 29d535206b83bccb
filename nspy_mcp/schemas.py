"""What `tools/list` advertises: the tools' schemas, compact, accepting exactly what they did.

Every client puts `tools/list` in the agent's context once per session, so its size is paid
by every session. pydantic's schemas carry what no validator reads: a `title` per field
(derived from its name), `default` in output schemas (an answer always has every field),
and nullable fields spelled `anyOf: [{type: X}, {type: null}]`. `compact_schema` removes
the first two and writes the third as `type: [X, "null"]`, and `drop_enum_types` the `type`
an `enum` beside it already implies; each rewrite accepts and rejects the same instances,
so clients validate answers as strictly as before. Input schemas keep their defaults (an
agent reads them to know what it may leave out).

Where two tools answer with the same model (a `ProfileResult` from `profile_candidates`,
and inside `read_results`' answer), the second copy loses its descriptions
(`strip_descriptions`): the structure, and so the validation, stays whole, and the field
documentation is read once, in the first tool's schema.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

Schema = dict[str, Any]

_SUBSCHEMA_MAPS = ("properties", "$defs", "patternProperties", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_ONE = (
    "items",
    "additionalProperties",
    "not",
    "contains",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)

_TYPED_KEYWORDS: dict[str, frozenset[str]] = {
    "string": frozenset({"minLength", "maxLength", "pattern", "format"}),
    "integer": frozenset(
        {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
    ),
    "array": frozenset({"items", "prefixItems", "minItems", "maxItems", "uniqueItems"}),
    "object": frozenset(
        {"properties", "required", "additionalProperties", "minProperties", "maxProperties"}
    ),
}
_TYPED_KEYWORDS["number"] = _TYPED_KEYWORDS["integer"]
_TYPED_KEYWORDS["boolean"] = frozenset()
"""Keywords that constrain only instances of one type: beside `type: [X, "null"]` they still
constrain only X, so moving them out of the `anyOf` branch keeps the meaning."""

_LOCAL_DEF = "#/$defs/"
_NOTES = frozenset({"title", "description", "default", "examples", "$comment"})


def _map_subschemas(schema: Schema, fn: Callable[[Schema], Schema]) -> Schema:
    """`schema` with `fn` applied to each of its direct subschemas (not to itself)."""
    out: Schema = {}
    for key, value in schema.items():
        if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: fn(v) if isinstance(v, dict) else v for k, v in value.items()}
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [fn(v) if isinstance(v, dict) else v for v in value]
        elif key in _SUBSCHEMA_ONE and isinstance(value, dict):
            out[key] = fn(value)
        else:
            out[key] = value
    return out


def _nullable(schema: Schema) -> Schema:
    """`anyOf: [{type: X, ...}, {type: null}]` as `{type: [X, null], ...}` where equivalent."""
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or len(branches) != 2 or {"type": "null"} not in branches:
        return schema
    (other,) = [b for b in branches if b != {"type": "null"}]
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    if set(other) & set(rest):
        return schema
    kind = other.get("type")
    enum = other.get("enum")
    folded = dict(other)
    if isinstance(kind, str) and kind in _TYPED_KEYWORDS:
        if not set(other) <= _TYPED_KEYWORDS[kind] | {"type", "enum"} | _NOTES:
            return schema
        folded["type"] = [kind, "null"]
    elif kind is not None or enum is None or not set(other) <= {"enum"} | _NOTES:
        return schema
    if isinstance(enum, list):  # an enum constrains every type: null joins it
        folded["enum"] = [*enum, None]
    return {**rest, **folded}


def compact_schema(schema: Schema, *, keep_defaults: bool, fold_nullables: bool) -> Schema:
    """`schema` without titles (and defaults unless `keep_defaults`), nullables folded if asked.

    Accepts and rejects the same instances as `schema`: titles and defaults are annotations
    no validator checks, and a folded nullable means what its `anyOf` meant. Input schemas
    keep `anyOf`: some clients turn them into function-calling formats that read `anyOf`
    but not a list of types.
    """

    def walk(node: Schema) -> Schema:
        # A property named "title" or "default" is a key of `properties`, never dropped here.
        kept = {
            k: v
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str)) and (keep_defaults or k != "default")
        }
        if kept.get("additionalProperties") is True:  # the default: any extra key is allowed
            del kept["additionalProperties"]
        out = _map_subschemas(kept, walk)
        return _nullable(out) if fold_nullables else out

    return walk(schema)


def strip_descriptions(schema: Schema) -> Schema:
    """`schema` without its descriptions: the same validation, documented elsewhere."""

    def walk(node: Schema) -> Schema:
        kept = {k: v for k, v in node.items() if not (k == "description" and isinstance(v, str))}
        return _map_subschemas(kept, walk)

    return walk(schema)


def shallow_refs(schema: Schema, deep: Collection[str] | None) -> Schema:
    """`schema` with each reference to a definition not in `deep` replaced by its type.

    A replaced reference (`{"$ref": "#/$defs/Provenance"}` -> `{"type": "object"}`) accepts
    every instance the definition did, and more: answers still validate, but the parts below
    it are checked by the server's own models only. It keeps the first paragraph of the
    definition's description where neither the reference nor the field it is the items or a
    branch of had one, so the field still says what it holds (the rest, about fields no
    longer advertised, is in docs/). `deep=None` keeps every definition.
    """
    defs: dict[str, Schema] = schema.get("$defs", {})
    if deep is None or not defs:
        return schema

    def walk(node: Schema, described: bool = False) -> Schema:
        ref = node.get("$ref")
        name = ref.removeprefix(_LOCAL_DEF) if isinstance(ref, str) else None
        if name is not None and name in defs and name not in deep:
            target = defs[name]
            out = {k: v for k, v in node.items() if k != "$ref"}
            out["type"] = target.get("type", "object")
            note = target.get("description")
            if isinstance(note, str) and "description" not in out and not described:
                out["description"] = note.split("\n\n", 1)[0]
            return out
        out = _map_subschemas(node, walk)
        if described or "description" in node:  # the field says what its items hold
            for key in ("items", *_SUBSCHEMA_LISTS):
                value = node.get(key)
                if isinstance(value, dict):
                    out[key] = walk(value, True)
                elif isinstance(value, list):
                    out[key] = [walk(v, True) if isinstance(v, dict) else v for v in value]
        return out

    root = walk({k: v for k, v in schema.items() if k != "$defs"})
    kept = {k: walk(v) for k, v in defs.items() if k in deep}
    return {**root, "$defs": kept} if kept else root


@dataclass(frozen=True)
class OutputPolicy:
    """How much of a tool's output schema `tools/list` carries.

    `deep`: the definitions validated to the leaves (None: all); the others are checked by
    type only. `documented`: the descriptions advertised besides the root's own fields: a
    definition's name (all its fields) or 'Definition.field' (that field); the others are
    documented in docs/.
    """

    deep: frozenset[str] | None = None
    documented: frozenset[str] = frozenset()


def _documented(name: str, definition: Schema, documented: Collection[str]) -> Schema:
    if name in documented:
        return definition
    fields = {f for f in definition.get("properties", {}) if f"{name}.{f}" in documented}
    out = strip_descriptions(definition)
    for field in fields:
        note = definition["properties"][field].get("description")
        if isinstance(note, str):
            out["properties"][field] = {**out["properties"][field], "description": note}
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def drop_enum_types(schema: Schema) -> Schema:
    """`schema` without the `type` beside an `enum` whose values all have that type.

    The enum alone accepts exactly those values, so the type beside it constrains nothing;
    output schemas (read by validators and agents, not turned into function-calling formats)
    do without it.
    """

    def walk(node: Schema) -> Schema:
        out = _map_subschemas(node, walk)
        enum, kind = out.get("enum"), out.get("type")
        if isinstance(enum, list) and isinstance(kind, str | list):
            kinds = {kind} if isinstance(kind, str) else set(kind)
            if "number" in kinds:
                kinds.add("integer")
            if all(_json_type(v) in kinds for v in enum):
                del out["type"]
        return out

    return walk(schema)


def advertised_output(schema: Schema, policy: OutputPolicy) -> Schema:
    """The output schema as `tools/list` carries it: compact, trimmed as `policy` says."""
    out = drop_enum_types(
        compact_schema(shallow_refs(schema, policy.deep), keep_defaults=False, fold_nullables=True)
    )
    defs = out.get("$defs")
    if defs:
        out["$defs"] = {k: _documented(k, v, policy.documented) for k, v in defs.items()}
    return out


def advertised_input(schema: Schema) -> Schema:
    """The input schema as `tools/list` carries it: without titles, otherwise as built.

    A nested model's default (`"check": {"$ref": ..., "default": {...every field...}}`) is
    left out: each field of the definition states its own default.
    """

    def walk(node: Schema) -> Schema:
        out = _map_subschemas(node, walk)
        if "$ref" in out and isinstance(out.get("default"), dict):
            del out["default"]
        return out

    return walk(compact_schema(schema, keep_defaults=True, fold_nullables=False))
