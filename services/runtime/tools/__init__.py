"""Tools the agent loop can call: built-in, MCP (stdio and streamable HTTP), remote ToolService."""
