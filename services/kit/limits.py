"""How deeply nested JSON from a model may be before it enters the suite's protobuf messages.

Tool-call arguments (and a structured answer) travel as google.protobuf.Struct / Value,
where every JSON object costs three message levels (Struct, its map entry, Value) and
every array two (ListValue, Value). protobuf's decoders (upb in Python, C++, Java) refuse
messages nested deeper than 100 levels, and the arguments sit up to six messages further
in: ConverseResponse > EventBatch > RuntimeEvent > FinalResult > Message > ToolCall, or
CheckToolCallsResponse > ... > ToolCall. Objects nested 32 levels fail on that path
(33 in a SendMessageResponse's ToolCallStarted). MAX_ARGUMENT_DEPTH = 20 uses 66 of the
100 levels (20 * 3 + 6) and leaves 11 levels of objects for wrappers added later, while
it is still deeper than tool arguments usually need.

The depth of a value counts its containers along the deepest path: 0 for a scalar, 1 for
`{}` or `[]`, 2 for `{"a": {}}` or `{"a": [1]}`. Both measures here are iterative, so a
value nested a million levels costs time in proportion to its size and never the
interpreter's recursion limit (which `json.loads` hits at about 1,000 levels).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

MAX_ARGUMENT_DEPTH = 20
# A walk stops here: a value this deep is over every bound, and a cyclic one (not JSON, but an
# in-process interceptor could return one) ends the walk too.
DEPTH_CAP = 1_000_000

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"{": 1, "[": 1, "}": -1, "]": -1}


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON-like value (mappings, lists and tuples are containers); at most DEPTH_CAP + 1."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > DEPTH_CAP:
                return deepest
        stack.extend((child, depth) for child in children if isinstance(child, Mapping | list | tuple))
    return deepest


def json_text_depth(text: str) -> int:
    """The deepest nesting of `{`/`[` in a JSON text, outside strings, without parsing it.

    For valid JSON this is `json_depth(json.loads(text))`; for broken JSON it is an
    estimate that is still safe to compare with a bound before parsing.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def depth_problem(depth: int, what: str = "the arguments are") -> str:
    """The words for a value nested deeper than MAX_ARGUMENT_DEPTH, said so a model can fix it."""
    return f"{what} nested {depth} levels deep; at most {MAX_ARGUMENT_DEPTH} are allowed"


def argument_depth_problem(arguments: Any) -> str:
    """ "" when tool-call arguments are nested at most MAX_ARGUMENT_DEPTH levels, else what is wrong."""
    depth = json_depth(arguments)
    return depth_problem(depth) if depth > MAX_ARGUMENT_DEPTH else ""
