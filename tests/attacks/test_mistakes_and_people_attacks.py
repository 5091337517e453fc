"""Attacks on what docs/concepts/model-mistakes.md, argument-repair.md and permissions.md promise when the model
gets it wrong and a person decides: a model's mistake (`ts.ModelRetry`) under a retry policy whose `on=` is
broad, user callbacks that change the arguments they are shown (a repair function, `needs_approval`, a tool's
`check_permissions` and `validate_input`), caps of the wrong type set after a `Limits` is made, a cap of 0 on
repeats, and a person's arguments whose keys are not text."""

from __future__ import annotations

from typing import Any

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


# -- a model's mistake is not a downstream's failure ----------------------------------------------------


async def test_a_model_retry_is_neither_retried_nor_counted_by_the_circuit_under_a_broad_on(anyio_backend: str) -> None:
    """Promise: retries are for transient failures, the circuit counts transient failures, and `ts.ModelRetry`
    tells the model what to fix. A retry policy whose `on=` takes every exception must not run the body again
    for a mistake only the model can fix, nor let the model's mistakes open the tool's circuit for every run."""
    ran: list[str] = []

    @ts.tool(
        idempotent=True,
        retry=ts.Retry(attempts=3, backoff=0.001, on=(Exception,)),
        circuit=ts.CircuitBreaker(failures=2, cooldown=60),
    )
    async def find_user(handle: str) -> str:
        """Looks a user up."""
        ran.append(handle)
        if handle != "ada":
            raise ts.ModelRetry(f"no user {handle!r}; known: ada")
        return "Ada Lovelace"

    executor = ts.Executor([find_user])
    limits = ts.Limits()
    answers = []
    for turn, handle in enumerate(["ad", "adda", "ada"]):
        outcome = await executor.run([ts.ToolCall(f"c{turn}", "find_user", {"handle": handle})], limits=limits)
        answers.append((outcome.results[0].error_kind, outcome.results[0].attempts))
    assert answers == [("model_retry", 1), ("model_retry", 1), (None, 1)]
    assert ran == ["ad", "adda", "ada"]
