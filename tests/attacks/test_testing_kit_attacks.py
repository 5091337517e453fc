"""Attacks on the public test kit, ``toolsched.testing``: what docs/testing.md and its docstrings promise when a
script or an option is wrong. A failure of the scripted server mid-answer drops the connection, and the
official SDKs send a dropped request again (twice, by default): the code under test then got the next
entry's answer for this one, and the test saw a script that worked."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from openai import APITimeoutError, BadRequestError, OpenAI

import toolsched as ts
from toolsched.testing import Reply, Request, ScriptedProvider, ToolUse, response_body, stream_events


class GaveUp(BaseException):
    """What ``pytest.fail`` and ``pytest.skip`` raise is a ``BaseException`` of this kind."""


def _ask(model: ScriptedProvider) -> str | None:
    client = OpenAI(api_key="unused", base_url=model.url)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return answer.choices[0].message.content


def test_a_script_function_that_raises_a_base_exception_is_a_400_not_a_retry_that_takes_the_next_entry() -> None:
    """Promise: a request whose function raised is answered with the API's 400 error naming why, which the SDK
    raises and does not retry. A ``BaseException`` (``pytest.fail`` in a model function) killed the server's
    thread: the SDK sent the request again and got the next entry's answer."""

    def model_logic(request: Request) -> Reply:
        raise GaveUp("no answer for this question")

    with ScriptedProvider([model_logic, Reply(text="the second answer")]) as model:
        with pytest.raises(BadRequestError, match=r"script entry 0 raised GaveUp\('no answer for this question'\)"):
            _ask(model)
        assert len(model.requests) == 1
        assert model.unused == 1
        assert _ask(model) == "the second answer"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"choices": {1, 2}}, r"script entry 0 is not JSON: Object of type set"),
        ({"usage": float("nan")}, r"script entry 0 is not JSON"),
        ([(-1, None, {"a": 1})], r"script entry 0, event 0: the delay must be a finite number"),
        ([(0, None, "x"), (float("inf"), None, "y")], r"script entry 0, event 1: the delay"),
        ([(0, 7, {"a": 1})], r"script entry 0, event 0: the name must be a string or None"),
        ([(0, "delta", {"a": object()})], r"script entry 0, event 0: the data is not JSON"),
        ([(0, None, "half a pair \ud800")], r"script entry 0, event 0: .* cannot be sent as UTF-8"),
    ],
)
def test_an_exact_answer_that_cannot_be_sent_is_refused_at_once(entry: Any, message: str) -> None:
    """Promise (docs/testing.md): a script entry of the wrong kind is refused at once with ``ts.OptionError``.
    A JSON body or an event that cannot be written was taken, and failed the server mid-answer: the SDK sent
    the request again and took the next entry's answer for it."""
    with pytest.raises(ts.OptionError, match=message):
        ScriptedProvider([entry, Reply(text="the second answer")])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"break_after": {0: "2"}}, r"break_after\[0\] must be a number of events"),
        ({"break_after": {0: -1}}, r"break_after\[0\] must be a number of events"),
        ({"end_after": {"0": 2}}, r"end_after keys are script positions"),
        ({"end_after": {0: 1.5}}, r"end_after\[0\] must be a number of events"),
        ({"gates": {0: "set"}}, r"gates\[0\] must be a threading.Event"),
        ({"gates": {-1: threading.Event()}}, r"gates keys are script positions"),
        ({"gate_limit": -1}, r"gate_limit must be a finite number of seconds"),
        ({"gate_limit": "20"}, r"gate_limit must be a finite number of seconds"),
    ],
)
def test_stream_options_of_the_wrong_kind_are_refused_at_once(options: dict[str, Any], message: str) -> None:
    """Promise: bad input gets a typed readable error. These options were taken as given and failed the
    server's thread while it answered the entry they name (``'>=' not supported``, ``sleep length``), which the
    SDK, seeing the connection drop, answered by sending the request again."""
    with pytest.raises(ts.OptionError, match=message):
        ScriptedProvider([Reply(text="hi", tokens_per_second=100)], **options)


def test_a_streamed_openai_responses_text_comes_in_pieces_at_the_replys_pace() -> None:
    """Promise (docs/testing.md): streamed, text and arguments go out in pieces of ``token_chars`` characters
    at ``tokens_per_second``. The OpenAI Responses stream sent a reply's text whole, in its item's
    ``response.output_item.done``, with no ``response.output_text.delta`` at all: code that shows the text as
    it streams saw nothing until the end, and the reply's pace was not kept."""
    reply = Reply(text="It is 18°C in Paris.", tokens_per_second=50, token_chars=5)
    deltas = [event for event in stream_events("openai_responses", reply) if event.name.endswith(".delta")]
    assert [(event.delay, event.data["delta"]) for event in deltas] == [
        (0.02, "It is"),
        (0.02, " 18°C"),
        (0.02, " in P"),
        (0.02, "aris."),
    ]
    with ScriptedProvider([reply]) as model:
        client = OpenAI(api_key="unused", base_url=model.url)
        events = list(client.responses.create(model="m", input="weather?", stream=True))
    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.output_item.added", "response.content_part.added"]
    assert [event.delta for event in events if event.type == "response.output_text.delta"] == [
        "It is",
        " 18°C",
        " in P",
        "aris.",
    ]
    (text_done,) = [event for event in events if event.type == "response.output_text.done"]
    assert text_done.text == "It is 18°C in Paris."
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "It is 18°C in Paris."


@pytest.mark.parametrize("arguments", [{"city": "Paris"}, {}, {"q": "x" * 9}])
def test_a_gemini_call_comes_once_the_model_would_have_produced_all_of_it(arguments: dict[str, Any]) -> None:
    """Promise (docs/testing.md): Gemini sends each call whole, once the model would have produced all of it,
    at the reply's pace, as the other APIs stream its arguments. It counted the arguments' tokens rounding
    down: a call whose arguments end in a partial token came one token early."""
    reply = Reply(tool_uses=[ToolUse("lookup", arguments)], tokens_per_second=10, token_chars=4)
    chat_gaps = [event.delay for event in stream_events("openai_chat", reply)]
    gemini_call = stream_events("gemini", reply)[0]
    assert "functionCall" in gemini_call.data["candidates"][0]["content"]["parts"][0]
    assert gemini_call.delay == pytest.approx(sum(chat_gaps))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Reply(tool_uses=ToolUse("lookup")), r"Reply tool_uses must be a list of ToolUse values, not ToolUse"),
        (lambda: Reply(tool_uses=None), r"Reply tool_uses must be a list of ToolUse values, not NoneType"),
        (lambda: Reply(tool_uses={"name": "lookup"}), r"Reply tool_uses must be a list of ToolUse values, not dict"),
        (lambda: Reply(tool_uses="lookup"), r"Reply tool_uses must be a list of ToolUse values, not str"),
    ],
    ids=["one ToolUse", "None", "a dict", "a name"],
)
def test_reply_tool_uses_that_are_no_list_of_calls_are_refused_with_an_option_error(make: Any, message: str) -> None:
    """Promise (docs/testing.md): a ``ToolUse``, ``Reply`` or script entry of the wrong kind is refused at once
    with ``ts.OptionError``. A single ``ToolUse`` (the list forgotten) or None raised ``TypeError: ... is not
    iterable``; a dict was read as its keys and refused as 'not str'."""
    with pytest.raises(ts.OptionError, match=message):
        make()


@pytest.mark.parametrize(
    ("script", "options", "message"),
    [
        (Reply(text="hi"), {}, r"the script must be a list of entries, not Reply"),
        (None, {}, r"the script must be a list of entries, not NoneType"),
        ([Reply(text="hi")], {"break_after": [2]}, r"break_after must be a mapping of script positions, not list"),
        ([Reply(text="hi")], {"end_after": 2}, r"end_after must be a mapping of script positions, not int"),
        ([Reply(text="hi")], {"gates": [threading.Event()]}, r"gates must be a mapping of script positions, not list"),
    ],
    ids=["one Reply", "None", "break_after as a list", "end_after as a number", "gates as a list"],
)
def test_a_script_or_stream_options_that_are_no_collection_are_refused_with_an_option_error(
    script: Any, options: dict[str, Any], message: str
) -> None:
    """The same promise for the script itself (one ``Reply`` given where a list of them goes) and for
    ``break_after``, ``end_after`` and ``gates`` given as something other than a mapping: each raised
    ``TypeError`` from inside (``'Reply' object is not iterable``, ``cannot convert dictionary update sequence``)."""
    with pytest.raises(ts.OptionError, match=message):
        ScriptedProvider(script, **options)


@pytest.mark.parametrize("build", [response_body, stream_events])
@pytest.mark.parametrize("reply", ["It is 18°C.", None, {"text": "It is 18°C."}], ids=["text", "None", "a dict"])
def test_a_wire_format_asked_for_what_is_no_reply_is_refused_with_an_option_error(build: Any, reply: Any) -> None:
    """Promise: bad input gets a typed error naming the argument. ``response_body`` and ``stream_events`` given
    text, None or a dict in place of a ``Reply`` raised ``AttributeError: ... has no attribute 'text'``."""
    with pytest.raises(ts.OptionError, match=r"reply must be a Reply"):
        build("anthropic", reply)


def test_a_gate_limit_longer_than_the_platform_can_wait_holds_the_stream_as_a_shorter_one_does() -> None:
    """Promise (docs/testing.md): ``gate_limit`` is a finite number of seconds, and a gate holds its entry's end
    until it is set; an option the server cannot use is refused at once, never a failure mid-answer. A
    ``gate_limit`` past what ``threading.Event.wait`` takes (about 292 years: 1e10 seconds, "wait for ever")
    was taken, and the server's thread failed at the gate with ``OverflowError``: the stream broke instead of
    ending once the gate was set."""
    gate = threading.Event()
    with ScriptedProvider([Reply(text="It is 18°C.")], end_after={0: 1}, gates={0: gate}, gate_limit=1e10) as model:
        client = OpenAI(api_key="unused", base_url=model.url, max_retries=0)
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        chunks = []
        for chunk in stream:
            chunks.append(chunk)
            gate.set()
    assert [chunk.choices[0].delta.role for chunk in chunks] == ["assistant"]
    assert len(model.sent_at) == 1


def test_a_first_token_later_than_the_platform_can_sleep_keeps_the_client_waiting() -> None:
    """The same for a ``Reply``'s delays (``first_token``, the gaps ``tokens_per_second`` makes) and an exact
    answer's event delays: finite, so taken, but past what ``time.sleep`` takes. The server's thread failed with
    ``OverflowError`` and dropped the connection, so the client saw a dropped stream at once (which the SDK may
    send again, taking the next entry) rather than a model that has not answered yet."""
    with ScriptedProvider([Reply(text="late", first_token=1e12), Reply(text="the second answer")]) as model:
        client = OpenAI(api_key="unused", base_url=model.url, max_retries=0, timeout=1.0)
        with pytest.raises(APITimeoutError):
            list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
        assert model.unused == 1
