"""What `tools/list` advertises: the tools' schemas, compact, with every type they check.

Every client puts `tools/list` in the agent's context once per session, so its size is paid
by every session (24 KB at most: tests/mcp/test_tool_list.py holds it). Rewrites that
accept and reject the same instances: pydantic's `title` per field (derived from its name)
and the outputs' `default`s go (`compact_schema`), a nullable output field is written
`type: [X, "null"]` rather than `anyOf: [{type: X}, {type: null}]`, an `enum` needs no
`type` beside it (`drop_enum_types`), and a definition referenced once is written in place
(`inline_single_refs`).

Output schemas check types, not presence: they leave out `required` and
`additionalProperties: false` (`drop_presence_checks`), about 2.3 KB of every session's
`tools/list`. Every field keeps its type or enum, so a client still refuses a wrong value
anywhere it did; a missing or extra field is the models' to refuse, and the server never
sends an answer they refused: each answer is the dump of a model instance, which writes
every field (null or empty where it has no value), the models forbid extra fields, and the
SDK validates a tool call's answer against its model before sending it. The server's
instructions tell agents that every field is always there.

Input schemas keep `required`, `additionalProperties: false`, `anyOf` (function-calling
converters read it, not a list of types) and non-null defaults (an agent reads them to
know what it may leave out); `default: null` goes, since a field `required` does not name
may be left out and is then null.

Which descriptions an output schema carries is chosen per tool (`OutputPolicy`): those of
the fields whose meaning the name does not carry; docs/ and the models document every
field. Where two tools answer with the same model (`ProfileResult` from
`profile_candidates`, and inside `read_results`' answer), the second copy carries none.
Parts an agent reads rather than acts on are checked by type only (`shallow_refs`).
"""

from __future__ import annotations

from collections import Counter
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
    type only. `documented`: the descriptions advertised: a model's name (its own and all
    its fields') or 'Model.field' (that field's), the root model (the tool's answer) named
    like the definitions; the others are documented in docs/ (and in the models' code).
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


def drop_presence_checks(schema: Schema) -> Schema:
    """`schema` without `required` and `additionalProperties: false`: types and enums only.

    It accepts more than `schema` (an object missing a field, or with one more), so it is
    for answers only, whose presence and extras the server's models check (module
    docstring). A schema under `additionalProperties` (a map's values) stays: it is a type.
    """

    def walk(node: Schema) -> Schema:
        # A property named "required" is a key of `properties`, never dropped here.
        kept = {
            k: v
            for k, v in node.items()
            if not (k == "required" and isinstance(v, list))
            and not (k == "additionalProperties" and v is False)
        }
        return _map_subschemas(kept, walk)

    return walk(schema)


def _local_refs(node: Any) -> Counter[str]:
    """How often each definition is referenced in `node`, at any depth."""
    found = Counter[str]()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_LOCAL_DEF):
            found[ref.removeprefix(_LOCAL_DEF)] += 1
        for value in node.values():
            found.update(_local_refs(value))
    elif isinstance(node, list):
        for value in node:
            found.update(_local_refs(value))
    return found


def inline_single_refs(schema: Schema, *, fold_nullables: bool) -> Schema:
    """`schema` with each definition referenced once written in place of its reference.

    The same validation in fewer bytes: a definition used once pays for its name twice and
    the reference's keywords, and a nullable one for an `anyOf` that folds away once it is
    inline (`fold_nullables`). A definition used more than once, or by itself, stays.
    """
    defs: dict[str, Schema] = schema.get("$defs", {})
    counts = _local_refs({k: v for k, v in schema.items() if k != "$defs"})
    for body in defs.values():
        counts.update(_local_refs(body))
    once = {name for name in defs if counts[name] == 1 and not _local_refs(defs[name])[name]}

    def walk(node: Schema, inlining: frozenset[str]) -> Schema:
        ref = node.get("$ref")
        name = ref.removeprefix(_LOCAL_DEF) if isinstance(ref, str) else None
        if name in once and name not in inlining:
            rest = {k: v for k, v in node.items() if k != "$ref"}
            body = walk(defs[name], inlining | {name})
            if not set(rest) & set(body):  # a field's note beside the reference stays its own
                out = {**rest, **body}
                return _nullable(out) if fold_nullables else out
        out = _map_subschemas(node, lambda n: walk(n, inlining))
        return _nullable(out) if fold_nullables else out

    root = walk({k: v for k, v in schema.items() if k != "$defs"}, frozenset())
    kept: dict[str, Schema] = {}
    wanted = list(_local_refs(root))
    while wanted:  # the definitions still referenced, from the root down
        name = wanted.pop()
        if name in defs and name not in kept:
            kept[name] = walk(defs[name], frozenset({name}))
            wanted.extend(_local_refs(kept[name]))
    return {**root, "$defs": {k: kept[k] for k in defs if k in kept}} if kept else root


def advertised_output(schema: Schema, policy: OutputPolicy) -> Schema:
    """The output schema as `tools/list` carries it: compact, trimmed as `policy` says."""
    name = schema.get("title")
    out = drop_presence_checks(
        drop_enum_types(
            compact_schema(
                shallow_refs(schema, policy.deep), keep_defaults=False, fold_nullables=True
            )
        )
    )
    defs = out.pop("$defs", None)
    if isinstance(name, str):
        out = _documented(name, out, policy.documented)
    if defs:
        out["$defs"] = {k: _documented(k, v, policy.documented) for k, v in defs.items()}
    return inline_single_refs(out, fold_nullables=True)


_JSON_TYPES = frozenset({"null", "boolean", "object", "array", "number", "string"})


def _accepts_any_json(schema: Any) -> bool:
    """Whether `schema` is `{}` or an `anyOf` of unconstrained branches of every JSON type."""
    if schema == {}:
        return True
    if not isinstance(schema, dict) or set(schema) != {"anyOf"}:
        return False
    kinds: set[str] = set()
    for branch in schema["anyOf"]:
        kind = branch.get("type") if isinstance(branch, dict) else None
        if not isinstance(kind, str) or set(branch) - {"type", "items"}:
            return False
        if "items" in branch and (kind != "array" or branch["items"] != {}):
            return False
        kinds.add(kind)
    return kinds >= _JSON_TYPES


def advertised_input(schema: Schema) -> Schema:
    """The input schema as `tools/list` carries it: what it accepts, stated in fewer bytes.

    Titles go (`compact_schema`). A nested model's default (`"check": {"$ref": ..., "default": {...every field...}}`) is
    left out: each field of the definition states its own default. So is `default: null`
    on a field `required` does not name: left out, a nullable field is null. A map's value
    schema that accepts any JSON value (`configs`' `anyOf` of every type) goes: it is what
    a map without one accepts. Definitions used once are written in place
    (`inline_single_refs`), which function-calling converters without `$ref` read too.
    """

    def walk(node: Schema) -> Schema:
        out = _map_subschemas(node, walk)
        if "$ref" in out and isinstance(out.get("default"), dict):
            del out["default"]
        if _accepts_any_json(out.get("additionalProperties")):
            del out["additionalProperties"]
        properties = out.get("properties")
        if isinstance(properties, dict):
            required = out.get("required", [])
            out["properties"] = {
                name: {k: v for k, v in field.items() if not (k == "default" and v is None)}
                if isinstance(field, dict) and name not in required
                else field
                for name, field in properties.items()
            }
        return out

    compact = walk(compact_schema(schema, keep_defaults=True, fold_nullables=False))
    return inline_single_refs(compact, fold_nullables=False)
