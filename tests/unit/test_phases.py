"""The loop's phases: one enum for the policy and the runtime, one table to the proto's enum."""

from __future__ import annotations

from cogmesh.policy.v1 import policy_pb2
from services.lib.policy import domain
from services.runtime import phases


def test_the_runtime_and_the_policy_share_one_phase_enum() -> None:
    assert phases.Phase is domain.Phase


def test_the_table_covers_every_phase_and_every_proto_value_but_unspecified() -> None:
    assert set(domain.PHASE_TO_PROTO) == set(domain.Phase)
    assert set(domain.PHASE_FROM_PROTO) == set(policy_pb2.Phase.values()) - {policy_pb2.PHASE_UNSPECIFIED}
    for phase, value in domain.PHASE_TO_PROTO.items():
        assert policy_pb2.Phase.Name(value) == f"PHASE_{phase.name}"
        assert domain.PHASE_FROM_PROTO[value] is phase
