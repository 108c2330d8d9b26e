"""Answers to a task's questions are checked before they are stored (``tasks/update``)."""

from __future__ import annotations

from typing import Any

import pytest

from appdeck.protocol.errors import InvalidParams
from appdeck.protocol.task_inputs import MAX_RESPONSE_BYTES, _check

ELICIT = {"method": "elicitation/create", "params": {"message": "ok?"}}


def test_a_well_formed_answer_passes() -> None:
    _check("k", ELICIT, {"action": "accept", "content": {"ok": True}})


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (7, "must be an object"),
        ({"action": "accept", "content": {"x": "y" * MAX_RESPONSE_BYTES}}, "too large"),
        ({"action": "maybe"}, "action"),
    ],
)
def test_a_malformed_answer_is_invalid_params(answer: Any, why: str) -> None:
    with pytest.raises(InvalidParams, match=why):
        _check("k", ELICIT, answer)


def test_an_answer_nested_past_the_limit_is_invalid_params_not_a_crash() -> None:
    deep: Any = 1
    for _ in range(900):  # orjson.loads takes 1,024 levels; json.dumps recursed at about 1,000
        deep = {"a": deep}
    with pytest.raises(InvalidParams, match="nests too deeply"):
        _check("k", ELICIT, {"action": "accept", "content": deep})
