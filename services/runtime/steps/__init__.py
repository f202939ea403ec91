"""The steps of a turn, one module per kind, over the driver in services/runtime/loop.py.

    start     PRE_RUN: the system prompt, tools and model the turn runs with
    compact   the context service summarizes a transcript near its budget
    think     one model call (retries, failover, ON_ERROR), POST_THINK, structured output
    decide    local checks, the policy's verdicts and PRE_ACT on the step's tool calls
    act       the calls run (in parallel), POST_ACT, then what the step's end decides
    answers   calls answered from outside: approvals, the user's input, client tools
    delegate  a subagent's task, run inside the turn
    finish    how a turn ends: final answer, typed errors, interruption

Each step reads and changes the run's state (steps/state.py), which the journal
records between steps, so a turn goes on from its last recorded step anywhere.
"""
