"""The LangGraph peer: the same agent workload as cogmesh's built-in local model.

Runs inside the peer's own virtualenv under `langgraph dev` (in-memory mode). The chat
model is langchain-core's GenericFakeChatModel, so there is no network and no latency:

- a message with an arithmetic question ("What is 17 * 23?") makes it call the
  `calculator` tool once, then answer from the result ("17 * 23 = 391."), as cogmesh's
  local model does with its calculator;
- anything else gets exactly REPLY_TOKENS tokens "tok0 tok1 ...", streamed one token
  per chunk.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Iterator
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

REPLY_TOKENS = 100
EXPRESSION = re.compile(r"\d[\d\s+\-*/().]*\d")
OPERATORS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


class TokenStreamingFakeModel(GenericFakeChatModel):
    """GenericFakeChatModel streaming one chunk per token (its own stream also emits every space as a
    chunk) and streaming tool calls, which its own stream drops."""

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        message = self._generate(messages, stop=stop, run_manager=run_manager, **kwargs).generations[0].message
        assert isinstance(message, AIMessage)
        if message.tool_calls:
            chunk = AIMessageChunk(content="", id=message.id, tool_calls=message.tool_calls)
            yield ChatGenerationChunk(message=chunk)
            return
        for token in re.split(r"(?= )", str(message.content)):
            generation = ChatGenerationChunk(message=AIMessageChunk(content=token, id=message.id))
            if run_manager:
                run_manager.on_llm_new_token(token, chunk=generation)
            yield generation


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return float(OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    raise ValueError("unsupported expression")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (+ - * / and parentheses)."""
    value = _evaluate(ast.parse(expression, mode="eval"))
    return str(int(value)) if value == int(value) else str(value)


def reply(messages: list[BaseMessage]) -> AIMessage:
    """What cogmesh's local model would do with this conversation."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        expression = next(c["args"]["expression"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls)
        return AIMessage(content=f"{expression} = {last.content}.")
    found = EXPRESSION.search(str(last.content))
    if found:
        call = {"name": "calculator", "args": {"expression": found.group().strip()}, "id": f"call_{len(messages)}"}
        return AIMessage(content="", tool_calls=[call])
    return AIMessage(content=" ".join(f"tok{i}" for i in range(REPLY_TOKENS)))


def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
    # A fresh fake model per step: its reply depends on the conversation, like cogmesh's local model.
    model = TokenStreamingFakeModel(messages=iter([reply(state["messages"])]))
    return {"messages": [model.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("tools", ToolNode([calculator]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
builder.add_edge("tools", "agent")
graph = builder.compile()
