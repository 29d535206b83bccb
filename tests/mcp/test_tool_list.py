"""What `tools/list` advertises: small enough for every session, typed enough for every answer.

The answers come from a real job through the real MCP client, which itself re-validates each
structured answer against the advertised output schema; here the schemas are also checked
with jsonschema directly, against answers that were changed to be wrong. The advertised
output schemas check types and enums; presence and extra fields are the models' to check
(nspy_mcp/schemas.py says why), so those are checked against the models here.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from jsonschema.validators import validator_for  # type: ignore[import-untyped, unused-ignore]
from mcp import Client
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nsight_core.diagnosis import Diagnosis, RuleFinding
from nsight_core.host.catalog import MetricsValidation
from nsight_core.host.probe import EnvironmentReport
from nsight_core.request import ConfigValue
from nsight_core.results import ProfileResult, Provenance
from nspy_mcp.answers import ReadResultsAnswer
from nspy_mcp.schemas import (
    OutputPolicy,
    advertised_input,
    advertised_output,
    compact_schema,
    drop_enum_types,
    inline_single_refs,
)
from nspy_mcp.server import build_server
from tests.mcp.test_server import softmax_request, structured

pytestmark = pytest.mark.anyio

TOOLS_LIST_LIMIT = 24_000
"""Bytes of the `tools/list` result (compact JSON, as sent): issue 45's 24 KB, which every
session pays in context before its first call (docs/clients.md). The result is about 23.4 KB,
with provenance and diagnoses still typed to their fields."""

ANSWER_MODELS: dict[str, type[BaseModel]] = {
    "check_environment": EnvironmentReport,
    "validate_metrics": MetricsValidation,
    "profile_candidates": ProfileResult,
    "read_results": ReadResultsAnswer,
}
"""The model each tool's answer is the dump of."""

ERAS = pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


async def _advertised(client: Client) -> dict[str, Any]:
    listed = await client.list_tools()
    dump = listed.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dump


def _validator(schema: dict[str, Any]) -> Any:
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _errors(schema: dict[str, Any], instance: Any) -> list[str]:
    return [e.message for e in _validator(schema).iter_errors(instance)]


def _local_refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _local_refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _local_refs(v)]
    return []


@ERAS
async def test_tools_list_fits_the_budget_in_both_eras(mode: str, tmp_path: Path) -> None:
    async with Client(build_server(tmp_path), mode=mode) as client:
        listed = await _advertised(client)
    assert _size(listed) <= TOOLS_LIST_LIMIT
    for tool in listed["tools"]:
        assert len(tool["description"]) >= 300, tool["name"]  # still says what to do
        for schema in (tool["inputSchema"], tool["outputSchema"]):
            _validator(schema)  # a valid JSON Schema...
            defs = set(schema.get("$defs", {}))
            for ref in _local_refs(schema):  # ...that a client resolves without a registry
                assert ref.removeprefix("#/$defs/") in defs, (tool["name"], ref)


async def test_every_answer_validates_and_wrong_answers_are_still_refused(tmp_path: Path) -> None:
    async with Client(build_server(tmp_path)) as client:
        tools = {t["name"]: t for t in (await _advertised(client))["tools"]}
        with anyio.fail_after(120):
            answers: list[tuple[str, dict[str, Any]]] = [
                ("check_environment", structured(await client.call_tool("check_environment", {}))),
                (
                    "validate_metrics",
                    structured(
                        await client.call_tool(
                            "validate_metrics",
                            {"metrics": ["dram__throughput", "nope"], "chip": "gh100"},
                        )
                    ),
                ),
            ]
            done = structured(
                await client.call_tool("profile_candidates", {"request": softmax_request()})
            )
            answers.append(("profile_candidates", done))
            rid = done["result_id"]
            for args in (
                {"result_id": rid},
                {"result_id": rid, "detail": "full"},
                {"result_id": rid, "config_id": 0, "metric": "events__time_duration"},
                {"result_id": rid, "cancel": True},
                {},
                {"status": "done", "limit": 1},
            ):
                answers.append(
                    ("read_results", structured(await client.call_tool("read_results", args)))
                )

    for name, answer in answers:
        assert _errors(tools[name]["outputSchema"], answer) == [], name
        # Every field is there, and no other: the model reads it back to the same JSON.
        model = ANSWER_MODELS[name]
        assert model.model_validate(answer).model_dump(mode="json") == answer, name

    # Every value is still typed where the advertised schema checked it before.
    schema = tools["profile_candidates"]["outputSchema"]
    store_schema = ProfileResult.model_json_schema()
    assert done["rows"] and done["comparisons"] and done["correctness"]
    wrong: list[dict[str, Any]] = []
    for path, value in (
        (("rows", 0, "Trust"), "great"),
        (("rows", 0, "NumRuns"), "3"),
        (("rows", 0, "AvgValue"), "fast"),
        (("rows", 0, "ErrorClass"), "oops"),
        (("rows", 0, "RawValues"), "1, 2"),
        (("comparisons", 0, "Resolvable"), "yes"),
        (("correctness", 0, "Passed"), None),
        (("status",), "finished"),
        (("provenance", "wall_seconds"), "slow"),
        (("provenance", "command"), "ncu --set full"),
        (("provenance",), "events"),
    ):
        bad = copy.deepcopy(done)
        node: Any = bad
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        wrong.append(bad)
    for bad in wrong:
        assert _errors(store_schema, bad), bad  # the store's schema refuses it...
        assert _errors(schema, bad), bad  # ...and so does the advertised one

    # A missing or extra field: the models refuse it (the store's schema and the SDK's check
    # of each answer before it is sent); the advertised schema leaves that to them.
    missing = copy.deepcopy(done)
    del missing["result_id"]
    extra = copy.deepcopy(done) | {"speed": "fast"}
    extra_in_row = copy.deepcopy(done)
    extra_in_row["rows"][0]["Fast"] = True
    for bad in (missing, extra, extra_in_row):
        assert _errors(store_schema, bad), bad
        with pytest.raises(ValidationError):
            ProfileResult.model_validate(bad)
        assert not _errors(schema, bad), bad


def _fields_of(node: dict[str, Any]) -> dict[str, Any]:
    """The properties an (optionally nullable) object declares, written in place."""
    assert "$ref" not in node and "anyOf" not in node, node  # used once: written in place
    kind = node.get("type")
    assert kind == "object" or kind == ["object", "null"], node
    properties: dict[str, Any] = node["properties"]
    return properties


async def test_provenance_and_diagnoses_are_typed_to_their_fields(tmp_path: Path) -> None:
    async with Client(build_server(tmp_path)) as client:
        tools = {t["name"]: t for t in (await _advertised(client))["tools"]}
    schema = tools["profile_candidates"]["outputSchema"]
    properties = schema["properties"]
    provenance = _fields_of(properties["provenance"])
    assert set(provenance) == set(Provenance.model_fields)
    assert provenance["wall_seconds"] == {"type": ["number", "null"]}
    diagnosis = _fields_of(properties["diagnoses"]["items"])
    assert set(diagnosis) == set(Diagnosis.model_fields)
    assert set(_fields_of(diagnosis["Rules"]["items"])) == set(RuleFinding.model_fields)
    typed = {"anyOf", "$ref", "type", "enum"}
    for fields in (provenance, diagnosis):
        assert all(typed & set(field) for field in fields.values()), fields
    good = {"Annotation": "a", "ConfigId": 0, "Bound": "memory", "Rules": []}
    assert not _errors(
        schema, {"result_id": "r", "status": "done", "created_at": "t", "diagnoses": [good]}
    )
    rule = {"Rule": "r", "Severity": "loud", "Title": "t", "Text": "x"}
    for bad in ({**good, "Bound": "fast"}, {**good, "TimeNs": "1 ms"}, {**good, "Rules": [rule]}):
        answer = {"result_id": "r", "status": "done", "created_at": "t", "diagnoses": [bad]}
        assert _errors(schema, answer), bad
    with pytest.raises(ValidationError):  # an extra field: the model's to refuse
        Diagnosis.model_validate({**good, "Extra": 1})


def test_an_enum_needs_no_type_beside_it() -> None:
    schema = {
        "properties": {
            "a": {"enum": ["x", "y", None], "type": ["string", "null"]},
            "b": {"enum": [1, 2.5], "type": "number"},
            "c": {"enum": ["x", 1], "type": "string"},
        }
    }
    out = drop_enum_types(schema)["properties"]
    assert out["a"] == {"enum": ["x", "y", None]} and out["b"] == {"enum": [1, 2.5]}
    assert out["c"] == schema["properties"]["c"]  # 1 is no string: the type still refuses it


class _Inner(BaseModel):
    size: int | None = Field(None, ge=0, description="How big.")


class _Outer(BaseModel):
    title: str = Field(description="A field named like a keyword.")
    default: list[str] = Field(default_factory=list)
    kind: str | None = Field(None, pattern="^[a-z]+$")
    mode: str | None = None
    inner: _Inner | None = Field(None, description="Nested.")
    items: list[_Inner] = Field(default_factory=list)


def test_compacting_keeps_fields_named_like_keywords_and_what_is_accepted() -> None:
    full = _Outer.model_json_schema()
    small = compact_schema(full, keep_defaults=False, fold_nullables=True)
    assert set(small["properties"]) == set(full["properties"])
    assert small["properties"]["kind"] == {"pattern": "^[a-z]+$", "type": ["string", "null"]}
    assert "title" not in small and "default" not in small["properties"]["mode"]
    samples: list[Any] = [
        {"title": "t"},
        {"title": "t", "kind": None, "mode": None, "inner": None},
        {"title": "t", "kind": "abc", "inner": {"size": 3}, "items": [{"size": None}]},
        {"title": "t", "kind": "ABC"},
        {"title": "t", "kind": 3},
        {"title": "t", "mode": 3},
        {"title": "t", "inner": {"size": -1}},
        {"title": "t", "items": [{"size": "3"}]},
        {"title": 3},
        {"kind": "abc"},
    ]
    for sample in samples:
        assert bool(_errors(full, sample)) == bool(_errors(small, sample)), sample


def test_a_shallow_definition_is_checked_by_type_and_keeps_its_description() -> None:
    full = _Outer.model_json_schema()
    shallow = advertised_output(
        full, OutputPolicy(deep=frozenset(), documented=frozenset({"_Outer"}))
    )
    assert "$defs" not in shallow
    assert shallow["properties"]["inner"]["type"] == ["object", "null"]
    assert shallow["properties"]["inner"]["description"] == "Nested."
    assert shallow["properties"]["items"]["items"] == {"type": "object"}
    assert not _errors(shallow, {"title": "t", "inner": {"size": -1}})  # a superset...
    assert _errors(shallow, {"title": "t", "inner": 3})  # ...of objects only
    deep = advertised_output(full, OutputPolicy(documented=frozenset({"_Inner.size"})))
    assert deep["$defs"]["_Inner"]["properties"]["size"]["description"] == "How big."
    assert "description" not in deep["$defs"]["_Inner"]
    assert "description" not in deep["properties"]["inner"]  # the root is named like the rest


class _Leaf(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: Literal["low", "high"]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int
    note: str | None = None
    once: _Leaf | None = None
    twice: list[_Leaf] = Field(default_factory=list)
    again: _Leaf | None = None


def test_output_schemas_check_types_not_presence() -> None:
    full = _Answer.model_json_schema()
    advertised = advertised_output(full, OutputPolicy())
    assert "required" not in json.dumps(advertised)
    assert "additionalProperties" not in json.dumps(advertised)
    leaf = {"level": "low"}
    answer = {"count": 1, "note": None, "once": leaf, "twice": [leaf], "again": None}
    assert _answer_errors(full, advertised, answer) == (False, False)
    for key, value in (
        ("count", "1"),
        ("note", 3),
        ("once", {"level": "mid"}),
        ("once", "low"),
        ("twice", [{"level": 1}]),
        ("again", [leaf]),
    ):
        assert _answer_errors(full, advertised, answer | {key: value}) == (True, True), key
    for bad in (  # missing or extra fields: the models' to refuse
        {k: v for k, v in answer.items() if k != "count"},
        answer | {"extra": 1},
        answer | {"once": {"level": "low", "extra": 1}},
        answer | {"once": {}},
    ):
        assert _answer_errors(full, advertised, bad) == (True, False), bad
        with pytest.raises(ValidationError):
            _Answer.model_validate(bad)


def _answer_errors(full: dict[str, Any], advertised: dict[str, Any], answer: Any) -> Any:
    return bool(_errors(full, answer)), bool(_errors(advertised, answer))


def test_a_definition_used_once_is_written_in_place() -> None:
    tree = {"type": "object", "properties": {"kids": {"items": {"$ref": "#/$defs/Tree"}}}}
    schema = {
        "properties": {
            "one": {"$ref": "#/$defs/One", "description": "The one."},
            "maybe": {"anyOf": [{"$ref": "#/$defs/Maybe"}, {"type": "null"}]},
            "a": {"$ref": "#/$defs/Two"},
            "b": {"$ref": "#/$defs/Two"},
            "tree": {"$ref": "#/$defs/Tree"},
        },
        "$defs": {
            "One": {"type": "object", "properties": {"x": {"$ref": "#/$defs/Deeper"}}},
            "Deeper": {"type": "integer"},
            "Maybe": {"type": "object", "properties": {"y": {"type": "string"}}},
            "Two": {"type": "string", "maxLength": 3},
            "Tree": tree,
        },
    }
    out = inline_single_refs(schema, fold_nullables=True)
    assert out["properties"]["one"] == {
        "description": "The one.",
        "type": "object",
        "properties": {"x": {"type": "integer"}},
    }
    assert out["properties"]["maybe"] == {
        "type": ["object", "null"],
        "properties": {"y": {"type": "string"}},
    }
    assert out["$defs"] == {"Two": schema["$defs"]["Two"], "Tree": tree}  # used twice, by itself
    samples: list[Any] = [
        {"one": {"x": 1}, "maybe": None, "a": "abc", "tree": {"kids": [{"kids": []}]}},
        {"one": {"x": "1"}},
        {"maybe": {"y": 2}},
        {"maybe": 3},
        {"b": "abcd"},
        {"tree": {"kids": [{"kids": [3]}]}},
    ]
    for sample in samples:
        assert bool(_errors(schema, sample)) == bool(_errors(out, sample)), sample


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    runs: int = 5
    mode: str | None = None
    size: int | None = Field(None, ge=0)
    inner: _Inner = Field(default_factory=_Inner)
    options: list[dict[str, ConfigValue]] = [{}]  # `configs`' value: any JSON


def test_input_schemas_drop_null_defaults_and_keep_what_is_accepted() -> None:
    full = _Request.model_json_schema()
    advertised = advertised_input(full)
    properties = advertised["properties"]
    assert advertised["required"] == ["name"] and advertised["additionalProperties"] is False
    assert properties["runs"]["default"] == 5  # an agent reads what it may leave out
    assert "default" not in properties["mode"] and "default" not in properties["size"]
    assert "anyOf" in properties["mode"]  # some clients read no type lists
    assert "$defs" not in advertised and properties["inner"]["properties"]["size"]
    assert properties["options"]["items"] == {"type": "object"}  # any JSON value
    samples: list[Any] = [
        {"name": "n"},
        {"name": "n", "runs": 3, "mode": None, "size": 0, "inner": {"size": 2}},
        {"name": "n", "options": [{"a": [1, {"b": None}], "c": "d"}]},
        {"name": "n", "options": [3]},
        {"name": "n", "size": -1},
        {"name": "n", "inner": {"size": "2"}},
        {"name": "n", "extra": 1},
        {"runs": 3},
    ]
    for sample in samples:
        assert bool(_errors(full, sample)) == bool(_errors(advertised, sample)), sample
