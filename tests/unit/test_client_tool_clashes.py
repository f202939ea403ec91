"""The client tool names the gateway refuses before a turn takes the lease (issue 31, item 4)."""

from __future__ import annotations

from cogmesh.common.v1 import messages_pb2
from services.kit.errors import Violations
from services.lib import turn_options
from services.runtime.assembly import RESERVED_TOOLS


def test_the_gateway_reserves_the_names_the_runtime_reserves() -> None:
    assert turn_options.RUNTIME_TOOLS == RESERVED_TOOLS


def test_a_client_tool_may_not_take_a_listed_or_a_runtime_name() -> None:
    specs = [messages_pb2.ToolSpec(name=name) for name in ("lookup", "calculator", "task", "mcp__gh__issue")]
    problems = Violations()
    turn_options.client_tool_clashes(specs, ["calculator", "ask_user", "mcp__gh__*"], problems, "message.")
    assert problems.items == [
        ("message.client_tools[1].name", "'calculator' is already one of the agent's tools"),
        ("message.client_tools[2].name", "'task' is one of the runtime's own tools"),
    ]  # a name only a pattern reaches is the runtime's to judge: it depends on the tool servers up
