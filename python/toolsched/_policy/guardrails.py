"""Guardrails: last checks on a call's input (just before it runs) and on its output.

A guardrail is a plain or async callable of a ``GuardrailEvent``. It returns
``None`` (or ``True``) to let the call through, ``Reject(message)`` to fail the
call with ``guardrail_rejected`` and a message for the model, or raises
``GuardrailTripped`` to stop the whole run. Any other exception, or an answer
that is none of these, rejects the call: guardrails fail closed.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from toolsched._values.exception_text import described
from toolsched.errors import GuardrailTripped

__all__ = ["Guardrail", "GuardrailEvent", "Reject"]

logger = logging.getLogger("toolsched")


@dataclass(frozen=True, slots=True)
class GuardrailEvent:
    """What a guardrail sees. ``output`` is set for output guardrails only."""

    stage: Literal["input", "output"]
    call_id: str
    tool_name: str
    args: Mapping[str, Any]
    output: Any = None
    context: Any = None


@dataclass(frozen=True, slots=True)
class Reject:
    """A guardrail's refusal of one call; ``message`` is what the model reads."""

    message: str

    def __post_init__(self) -> None:
        if not isinstance(self.message, str) or not self.message:
            raise TypeError("Reject(message) needs a non-empty message: the model reads it")


Guardrail = Callable[[GuardrailEvent], Any]


class Guardrails:
    """A stage's guardrails, run in order until one refuses (internal)."""

    __slots__ = ("_checks", "stage")

    def __init__(self, stage: Literal["input", "output"], checks: Iterable[Guardrail]) -> None:
        if isinstance(checks, str) or not isinstance(checks, Iterable):
            raise TypeError(f"{stage}_guardrails must be a collection of callables, got {checks!r}")
        self.stage = stage
        self._checks: tuple[tuple[Guardrail, bool, str], ...] = ()
        for check in checks:
            if not callable(check):
                raise TypeError(f"{stage}_guardrails holds {check!r}, which is not callable")
            label = getattr(check, "__qualname__", None) or repr(check)
            self._checks += ((check, inspect.iscoroutinefunction(check), label),)

    def __bool__(self) -> bool:
        return bool(self._checks)

    async def refusal(self, event: GuardrailEvent) -> str | None:
        """The first refusal's message, or None when every guardrail lets the call through.

        ``GuardrailTripped`` propagates, tagged with the call.
        """
        for check, is_async, label in self._checks:
            try:
                answer = await check(event) if is_async else check(event)
                if inspect.isawaitable(answer):
                    answer = await answer
            except GuardrailTripped as exc:
                exc.call_id = event.call_id
                raise
            except Exception as exc:
                logger.warning("%s guardrail %s failed on call %s", self.stage, label, event.call_id, exc_info=True)
                detail = described(exc)
                return f"{self.stage} guardrail {label} failed ({detail}); the call was refused"
            if answer is None or answer is True:
                continue
            if isinstance(answer, Reject):
                return answer.message
            if answer is False:
                return f"refused by {self.stage} guardrail {label}"
            return f"{self.stage} guardrail {label} returned {answer!r}, not None or Reject; the call was refused"
        return None
