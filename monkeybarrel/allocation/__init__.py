"""Compute-optimal test-time allocation: which problems get the next samples.

Sampling runs in rounds; after each round a policy reads what the store knows about every
(generator, problem) cell — samples drawn, checker passes, the answer distribution — and grants
the next round's samples. Policies are arithmetic on those arrays (no model, no store): the
orchestrator runs the rounds, and ``simulate`` replays the same policies on recorded outcomes.
"""

from .policies import (
    POLICIES,
    AllocationPolicy,
    ConfidentMajority,
    Difficulty,
    Uniform,
    UntilSolved,
    build_policy,
)
from .state import AllocationState

__all__ = ["POLICIES", "AllocationPolicy", "AllocationState", "ConfidentMajority", "Difficulty", "Uniform",
           "UntilSolved", "build_policy"]
