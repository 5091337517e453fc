"""Policy: permission rules, hooks, guardrails, approvals and resumable state, resilience (private)."""
