"""Interceptors: composable middleware at the seven phases of the agent loop."""

from services.lib.policy.interceptors.audit import LoggingInterceptor
from services.lib.policy.interceptors.base import Action, Chain, Interceptor, InterceptResult, PhaseOutcome
from services.lib.policy.interceptors.budget import BudgetGuard
from services.lib.policy.interceptors.context import ContextCompressor, TokenLimiter
from services.lib.policy.interceptors.gates import ConversationGate, PatternGate, PermissionGate, ToolGate
from services.lib.policy.interceptors.hitl import HITLInterceptor
from services.lib.policy.interceptors.prompts import ContextPrompt, ConversationPrompt, LambdaPrompt
from services.lib.policy.interceptors.ratelimit import RateLimiter, ThrottleInterceptor
from services.lib.policy.interceptors.resilience import CircuitBreaker, Failover
from services.lib.policy.interceptors.security import ContentFilter, PIIShield
from services.lib.policy.interceptors.seed_gates import RoleGate, SafeGate

__all__ = [
    "Action",
    "BudgetGuard",
    "Chain",
    "CircuitBreaker",
    "ContentFilter",
    "ContextCompressor",
    "ContextPrompt",
    "ConversationGate",
    "ConversationPrompt",
    "Failover",
    "HITLInterceptor",
    "InterceptResult",
    "Interceptor",
    "LambdaPrompt",
    "LoggingInterceptor",
    "PIIShield",
    "PatternGate",
    "PermissionGate",
    "PhaseOutcome",
    "RateLimiter",
    "RoleGate",
    "SafeGate",
    "ThrottleInterceptor",
    "TokenLimiter",
    "ToolGate",
]
