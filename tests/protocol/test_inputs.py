"""Input-required results without a server-side memory: the signed request state and the
answers a handler finds, round after round (``protocol/inputs.py``)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from appdeck.protocol.errors import InvalidParams
from appdeck.protocol.inputs import (
    MAX_KEYS,
    InputRequired,
    Inputs,
    StateCodec,
    binding,
    input_required,
    inputs_of,
)

KEY = b"k" * 32
BOB = ("acme", "bob")
ASK_NAME = {"method": "elicitation/create", "params": {"message": "name?"}}
ASK_ROOTS = {"method": "roots/list", "params": {}}
NAME = {"action": "accept", "content": {"name": "Ada"}}
PARAMS: dict[str, Any] = {"name": "greet", "arguments": {"x": 1}}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_sealed_state_opens_for_the_same_caller_and_request() -> None:
    codec = StateCodec(KEY)
    bound = binding(BOB, "tools/call", PARAMS)
    assert codec.open(codec.seal(bound, {"a": NAME}), bound) == {"a": NAME}


def test_the_binding_ignores_meta_and_the_answers_but_not_the_arguments() -> None:
    base = binding(BOB, "tools/call", PARAMS)
    retried = {**PARAMS, "_meta": {"x": 1}, "inputResponses": {}, "requestState": "s"}
    assert binding(BOB, "tools/call", retried) == base
    assert binding(("acme", "eve"), "tools/call", PARAMS) != base
    assert binding(("globex", "bob"), "tools/call", PARAMS) != base
    assert binding(BOB, "prompts/get", PARAMS) != base
    assert binding(BOB, "tools/call", {**PARAMS, "arguments": {"x": 2}}) != base


def test_a_state_carries_the_sha256_of_the_binding_so_states_sealed_by_other_replicas_open() -> (
    None
):
    bound = binding(BOB, "tools/call", PARAMS)
    token = StateCodec(KEY).seal(bound, {})
    payload = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    digest = base64.urlsafe_b64encode(hashlib.sha256(bound).digest()).rstrip(b"=").decode()
    assert payload["b"] == digest
    assert bound == b'["acme","bob","tools/call",{"arguments":{"x":1},"name":"greet"}]'


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # the MAC
        lambda t: t.replace("s1.", "s1.e", 1),  # the payload
        lambda t: "s2" + t[2:],  # the version
        lambda t: t.rsplit(".", 1)[0],  # no MAC
        lambda t: "",
        lambda t: "x" * 200_000,
    ],
)
def test_a_tampered_state_is_refused(mangle: Any) -> None:
    codec = StateCodec(KEY)
    bound = binding(BOB, "tools/call", PARAMS)
    token = codec.seal(bound, {"a": NAME})
    with pytest.raises(InvalidParams):
        codec.open(mangle(token), bound)


def test_a_state_of_another_key_caller_or_request_is_refused() -> None:
    bound = binding(BOB, "tools/call", PARAMS)
    token = StateCodec(KEY).seal(bound, {})
    with pytest.raises(InvalidParams):
        StateCodec(b"o" * 32).open(token, bound)
    with pytest.raises(InvalidParams, match="another request"):
        StateCodec(KEY).open(token, binding(("acme", "eve"), "tools/call", PARAMS))


def test_a_state_expires() -> None:
    clock = Clock()
    codec = StateCodec(KEY, ttl_seconds=60, clock=clock)
    bound = binding(BOB, "tools/call", PARAMS)
    token = codec.seal(bound, {})
    clock.now += 61
    with pytest.raises(InvalidParams, match="expired"):
        codec.open(token, bound)


def test_answers_too_large_to_carry_are_refused() -> None:
    codec = StateCodec(KEY)
    with pytest.raises(InvalidParams, match="too large"):
        codec.seal(b"b", {"a": "x" * 200_000})


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        StateCodec(b"short")


def test_take_returns_the_answers_when_all_are_there_and_ignores_extra_keys() -> None:
    inputs = Inputs({"name": NAME, "junk": 42})
    assert inputs.take({"name": ASK_NAME}) == {"name": NAME}
    assert inputs.consumed == {"name": NAME}


def test_take_asks_for_what_is_missing_and_carries_what_was_answered() -> None:
    inputs = Inputs({"name": NAME})
    with pytest.raises(InputRequired) as raised:
        inputs.take({"name": ASK_NAME, "roots": ASK_ROOTS})
    assert raised.value.requests == {"roots": ASK_ROOTS}
    assert raised.value.answers == {"name": NAME}


@pytest.mark.parametrize(
    ("asked", "answer"),
    [
        (ASK_NAME, 12345),
        (ASK_NAME, {"action": "maybe"}),
        (ASK_NAME, {"action": "accept", "content": "yes"}),
        (ASK_ROOTS, {"roots": "none"}),
    ],
)
def test_an_answer_of_the_wrong_shape_is_invalid_params(asked: Any, answer: Any) -> None:
    with pytest.raises(InvalidParams):
        Inputs({"k": answer}).take({"k": asked})


def test_two_rounds_carry_the_first_answer_in_the_state() -> None:
    codec = StateCodec(KEY)
    first, bound = inputs_of(codec, BOB, "tools/call", PARAMS)
    with pytest.raises(InputRequired) as round1:
        first.take({"step1": ASK_NAME})
    result = input_required(codec, bound, round1.value)
    assert result["resultType"] == "input_required"
    assert result["inputRequests"] == {"step1": ASK_NAME}
    retry = {**PARAMS, "inputResponses": {"step1": NAME}, "requestState": result["requestState"]}
    second, bound2 = inputs_of(codec, BOB, "tools/call", retry)
    assert second.take({"step1": ASK_NAME}) == {"step1": NAME}
    with pytest.raises(InputRequired) as round2:
        second.take({"step2": ASK_ROOTS})
    state = input_required(codec, bound2, round2.value)["requestState"]
    last = {**PARAMS, "inputResponses": {"step2": {"roots": []}}, "requestState": state}
    third, _ = inputs_of(codec, BOB, "tools/call", last)  # only step2 sent: step1 from the state
    assert third.take({"step1": ASK_NAME}) == {"step1": NAME}
    assert third.take({"step2": ASK_ROOTS}) == {"step2": {"roots": []}}


@pytest.mark.parametrize("responses", [None, [], "x", {f"k{i}": {} for i in range(MAX_KEYS + 1)}])
def test_input_responses_must_be_a_bounded_object(responses: Any) -> None:
    with pytest.raises(InvalidParams):
        inputs_of(StateCodec(KEY), BOB, "tools/call", {**PARAMS, "inputResponses": responses})


def test_params_nested_past_the_limit_are_invalid_params_not_a_crash() -> None:
    deep: Any = 1
    for _ in range(600):
        deep = {"a": deep}
    with pytest.raises(InvalidParams, match="nested"):
        binding(BOB, "tools/call", {"name": "x", "arguments": deep})
