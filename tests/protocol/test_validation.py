"""The compiled fast check agrees with jsonschema on every schema it accepts, and both read a
``pattern`` as ECMA-262 does (``$`` is the end of the string, never before a final newline)."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from appdeck.protocol.arguments import ArgumentCheck
from appdeck.protocol.validation import Validator, compile_check, ecma_pattern

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(-5, 5, allow_nan=False)
    | st.text(max_size=4)
    | st.sampled_from(["a\n", "b\n", "ab\n"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=8,
)
types = st.sampled_from(["string", "integer", "number", "boolean", "object", "array", "null"])
leaf = st.fixed_dictionaries(
    {},
    optional={
        "type": types | st.lists(types, min_size=1, max_size=3, unique=True),
        "enum": st.lists(
            st.integers(-2, 2) | st.text(max_size=2) | st.booleans(), min_size=1, max_size=3
        ),
        "minLength": st.integers(0, 3),
        "maxLength": st.integers(0, 3),
        "minimum": st.integers(-3, 3),
        "maximum": st.integers(-3, 3),
        "exclusiveMinimum": st.integers(-3, 3),
        "minItems": st.integers(0, 2),
        "maxItems": st.integers(0, 2),
        "minProperties": st.integers(0, 2),
        "maxProperties": st.integers(0, 2),
        "pattern": st.sampled_from(["^a", "b$", "[0-9]", "^[a-z_]*$", ""]),
        "const": st.integers(-1, 1) | st.sampled_from(["a", "b"]),
        "description": st.text(max_size=5),
    },
)
schemas = st.recursive(
    leaf,
    lambda inner: (
        st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
                "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True),
                "additionalProperties": st.booleans() | inner,
                "propertyNames": st.fixed_dictionaries(
                    {"pattern": st.sampled_from(["^[ab]", "c"])}
                ),
            },
        )
        | st.fixed_dictionaries({"type": st.just("array"), "items": inner})
        | st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)})
        | st.fixed_dictionaries({"oneOf": st.lists(inner, min_size=1, max_size=3)})
    ),
    max_leaves=6,
)


@settings(max_examples=800, deadline=None)
@given(schema=schemas, value=values)
def test_the_fast_check_agrees_with_jsonschema(schema: dict[str, Any], value: Any) -> None:
    check = compile_check(schema)
    assert check is not None, schema
    assert check(value) == Validator(schema).is_valid(value), (schema, value)


def test_the_validator_is_draft_2020_12_but_for_the_dollar_anchor() -> None:
    schema = {"type": "string", "pattern": "^[a-z]+$"}
    assert Draft202012Validator(schema).is_valid("abc\n")  # Python's $: what we replace
    assert not Validator(schema).is_valid("abc\n")
    assert Validator(schema).is_valid("abc")
    assert Validator({"type": "string", "pattern": "b"}).is_valid("abc\n")  # still a search


def test_a_value_with_a_trailing_newline_is_refused_by_an_anchored_pattern() -> None:
    check = ArgumentCheck(
        {"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z]+$"}}}
    )
    assert check.problem({"name": "abc"}) is None
    assert check.problem({"name": "abc\n"}) is not None
    fast = compile_check({"type": "string", "pattern": "^[a-z]+$"})
    assert fast is not None
    assert not fast("abc\n")


def test_only_dollar_anchors_become_end_of_string() -> None:
    assert ecma_pattern("^[a-z]+$") == r"^[a-z]+\Z"
    assert ecma_pattern(r"a\$b$") == r"a\$b\Z"  # an escaped $ is a literal
    assert ecma_pattern("[$]x") == "[$]x"  # so is a $ in a class
    assert ecma_pattern("[]$]$") == r"[]$]\Z"  # ']' first in a class is a literal
    assert ecma_pattern("(a|b$)c?") == r"(a|b\Z)c?"


def test_unsupported_keywords_fall_back_to_jsonschema() -> None:
    assert compile_check({"type": "string", "not": {"const": "a"}}) is None
    assert compile_check({"$ref": "#/$defs/x"}) is None
    assert compile_check({"type": "object", "properties": {"a": {"oneOf": []}}}) is None
    assert compile_check({"if": {"required": ["a"]}, "then": {"required": ["b"]}}) is None


def test_the_echo_schema_is_compiled() -> None:
    check = compile_check(
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    )
    assert check is not None
    assert check({"text": "hi"})
    assert not check({"text": 5})
    assert not check({})
