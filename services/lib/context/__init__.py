"""The system prompt's assembly, shared by the context service and the runtime that builds prompts in process."""
