"""Run a tool loop offline: a scripted model that the official SDK clients talk to over HTTP on 127.0.0.1.

A script is a list of ``Reply`` values, one per model request: "call
``get_weather`` with ``{"city": "Paris"}``", then "say *It is 18°C*". A
``ScriptedProvider`` serves it in the wire format of whichever API the client
speaks (Anthropic Messages, OpenAI Responses, OpenAI Chat Completions,
Gemini), streamed or not, so the code under test is the code that runs
against the real service; only the client's ``base_url`` changes::

    from anthropic import AsyncAnthropic
    from toolsched.testing import Reply, ScriptedProvider, ToolUse

    script = [Reply(tool_uses=[ToolUse("get_weather", {"city": "Paris"})]), Reply(text="It is 18°C.")]
    with ScriptedProvider(script) as model:
        client = AsyncAnthropic(api_key="unused", base_url=model.url)
        ...  # the tool loop under test
    assert model.requests[1].tool_outputs() == ["Paris: 18°C"]

A script entry may also be a function of the ``Request`` (what the model was
sent) that returns the ``Reply``. ``response_body`` and ``stream_events`` give
a reply's wire format without a server. This package imports only the
standard library and toolsched: the SDK clients are the caller's.
"""

from toolsched.testing._script import Api, Reply, Request, Script, ToolUse
from toolsched.testing._server import ScriptedProvider, api_of
from toolsched.testing._wire import StreamEvent, error_body, response_body, stream_events

__all__ = [
    "Api",
    "Reply",
    "Request",
    "Script",
    "ScriptedProvider",
    "StreamEvent",
    "ToolUse",
    "api_of",
    "error_body",
    "response_body",
    "stream_events",
]
