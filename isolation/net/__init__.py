"""Network access for sandboxes: an egress proxy inside each sandbox's namespace, under a per-host policy.

    policy = NetworkPolicy("ask", allow=["pypi.org", "*.pythonhosted.org"], decide=ask_the_user,
                           on_allow_always=save_network_allow)
    handle = default_proxy().attach(sandbox, policy)       # port 3128 inside, served from here
    env = handle.environment(sandbox.env)                  # HTTP(S)_PROXY, NO_PROXY, git, npm
    handle.set_mode("off")                                 # live; closes open tunnels
    handle.records()                                       # the request log, for the trajectory
    handle.detach()                                        # before the sandbox goes

The parts: policy (rules, modes, approval), refusal (what a refusal says), addr (what counts as this
machine), http (heads), conn (one connection), relay (bytes both ways), proxy (the loop).
Credentials the proxy adds for named hosts: credentials (config and secrets), ca (the sandbox CA),
tls (TLS over the proxy's sockets), intercept (requests inside a TLS session the proxy ended).

May import: isolation.spec, isolation.records, isolation.extras. Not the sandbox: the proxy
is attached to a sandbox it is given.
"""
from __future__ import annotations

from .addr import is_internal
from .conn import RequestRecord
from .decision import Answer, CredentialUse, Decision, NetworkRequest, QuestionAnswered
from .policy import ANSWERS, HostRule, NetworkError, NetworkPolicy
from .refusal import AllowWords, Refusal, refusal
from .proxy import NO_PROXY, PROXY_PORT, EgressProxy, ProxyHandle, default_proxy, proxy_env

__all__ = ["ANSWERS", "AllowWords", "Answer", "CredentialUse", "Decision", "EgressProxy", "HostRule", "NO_PROXY",
           "NetworkError", "NetworkPolicy", "NetworkRequest", "PROXY_PORT", "ProxyHandle", "QuestionAnswered",
           "RequestRecord", "default_proxy", "Refusal", "is_internal", "proxy_env", "refusal"]
