"""Interceptors: composable middleware at the seven phases of the agent loop."""

from services.policy.interceptors.audit import LoggingInterceptor
from services.policy.interceptors.base import Action, Chain, Interceptor, InterceptResult, PhaseOutcome
from services.policy.interceptors.budget import BudgetGuard
from services.policy.interceptors.context import ContextCompressor, TokenLimiter
from services.policy.interceptors.gates import ConversationGate, PatternGate, PermissionGate, ToolGate
from services.policy.interceptors.hitl import HITLInterceptor
from services.policy.interceptors.prompts import ContextPrompt, ConversationPrompt, LambdaPrompt
from services.policy.interceptors.ratelimit import RateLimiter, ThrottleInterceptor
from services.policy.interceptors.resilience import CircuitBreaker, Failover
from services.policy.interceptors.security import ContentFilter, PIIShield
from services.policy.interceptors.seed_gates import RoleGate, SafeGate

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
