"""Images in tool results: sent as each provider's image parts, whole, never as text cut by the budget.

The wire tests run each provider's streaming loop with its official SDK client against a scripted
provider on 127.0.0.1 and read the images back out of the request the SDK sent.
"""

from __future__ import annotations

import base64
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import anyio
import pytest
from sdk_clients import Client

import toolsched as ts
from toolsched import mcp as ts_mcp
from toolsched._values.content import content_parts
from toolsched.providers import anthropic as ts_anthropic
from toolsched.providers import gemini as ts_gemini
from toolsched.providers import openai_chat as ts_chat
from toolsched.providers import openai_responses as ts_responses
from toolsched.testing import Reply, ScriptedProvider, ToolUse

pytestmark = pytest.mark.anyio

PROVIDERS = ["anthropic", "openai_responses", "openai_chat", "gemini"]
SERVER = str(Path(__file__).resolve().parents[1] / "support" / "mcp_server.py")


def png(width: int = 1, height: int = 1, payload: bytes = b"") -> bytes:
    """A valid PNG of ``width`` by ``height`` transparent pixels (``payload`` in a private chunk makes it big)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x00\x00\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    extra = chunk(b"tEXt", b"note\x00" + payload) if payload else b""
    body = chunk(b"IHDR", header) + extra + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


PIXEL = png()
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 20
GIF = b"GIF89a" + b"\x01\x00\x01\x00" + b"\x00" * 10
WEBP = b"RIFF\x20\x00\x00\x00WEBPVP8 " + b"\x00" * 20


# -- the Image value and the forms read as images ---------------------------------------


@pytest.mark.parametrize(
    ("data", "media_type"),
    [(PIXEL, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")],
)
def test_an_image_reads_its_type_from_its_bytes(data: bytes, media_type: str) -> None:
    image = ts.Image(data)
    assert image.media_type == media_type
    assert image.data == data
    assert ts.Image.from_base64(image.base64()) == image
    assert image.data_url() == f"data:{media_type};base64,{base64.b64encode(data).decode()}"
    assert image.to_json() == {"type": "image", "data": image.base64(), "mimeType": media_type}
    # A repr never dumps the bytes.
    assert repr(image) == f"Image(media_type={media_type!r}, {len(data):,} bytes)"


def test_bad_images_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"does not start like a PNG, JPEG, GIF or WEBP.*give media_type"):
        ts.Image(b"%PDF-1.7 not an image")
    with pytest.raises(ValueError, match=r"Image\(media_type\) must be one of image/png"):
        ts.Image(PIXEL, "image/svg+xml")
    with pytest.raises(TypeError, match=r"Image\(data\) takes bytes, got str"):
        ts.Image("iVBORw0KGgo=")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Image\(media_type\) takes a string, got int"):
        ts.Image(PIXEL, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not base64"):
        ts.Image.from_base64("not base64!", "image/png")
    # A declared type is taken as given (a PNG may be labelled by its producer), and views are copied to bytes.
    assert ts.Image(bytearray(PIXEL), "image/webp") == ts.Image(PIXEL, "image/webp")
    assert ts.Image(memoryview(PIXEL)).data == PIXEL


def test_other_spellings_of_the_types_and_wrapped_base64_are_read() -> None:
    assert ts.Image(PIXEL, "image/PNG").media_type == "image/png"
    assert ts.Image(JPEG, "image/jpg").media_type == "image/jpeg"
    wrapped = base64.encodebytes(png(payload=b"z" * 300)).decode()  # a line break every 76 characters
    assert "\n" in wrapped
    block = {"type": "image", "data": wrapped, "mimeType": "Image/Png"}
    assert content_parts(block) == (ts.Image(png(payload=b"z" * 300)),)


def test_the_image_forms_of_each_producer_are_read_as_images() -> None:
    b64 = base64.b64encode(PIXEL).decode()
    anthropic_block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
    mcp_block = {"type": "image", "data": b64, "mimeType": "image/png"}
    image = ts.Image(PIXEL)
    for form in (image, PIXEL, bytearray(PIXEL), anthropic_block, mcp_block, [image], (mcp_block,)):
        assert content_parts(form) == (image,), form
    mixed = ["a caption", {"type": "text", "text": "more"}, anthropic_block, mcp_block]
    assert content_parts(mixed) == ("a caption", "more", image, image)


@pytest.mark.parametrize(
    "output",
    [
        "text",
        None,
        3,
        b"plain bytes",
        b"\xff\xfe not utf-8",
        {"type": "image"},
        {"type": "image", "data": "not base64!", "mimeType": "image/png"},
        {"type": "image", "data": "PHN2Zz4=", "mimeType": "image/svg+xml"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"picture": {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}},
        ["just", "text"],
        [{"type": "text", "text": "only text blocks"}],
        [ts.Image(PIXEL), 3],
        [ts.Image(PIXEL), {"type": "video"}],
        [],
    ],
)
def test_outputs_without_a_readable_image_are_not_content(output: Any) -> None:
    assert content_parts(output) is None


class _Hostile:
    """An output whose every attribute read fails."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no reading {name}")


def test_outputs_that_fail_to_show_themselves_are_sent_as_text_not_a_crash() -> None:
    assert content_parts(_Hostile()) is None and content_parts([_Hostile()]) is None
    calls, results, registry = _results(_Hostile())
    (block,) = ts_anthropic.results_to_blocks(calls, results, registry=registry)
    assert not results[0].is_error and "_Hostile object" in block["content"]
    looped: list[Any] = ["a"]
    looped.append(looped)
    calls, results, registry = _results(looped)
    (block,) = ts_anthropic.results_to_blocks(calls, results, registry=registry)
    assert block["content"] == "['a', [...]]"


# -- the executor: images are never cut by the result budget ------------------------------


def _executor(output: Any, **options: Any) -> ts.Executor:
    @ts.tool(read_only=True, concurrency_safe=True, **options)
    def look(caption: str) -> Any:
        """Returns a picture."""
        return output

    return ts.Executor([look])


async def test_an_image_larger_than_the_budget_arrives_whole() -> None:
    big = png(payload=b"x" * 50_000)
    outcome = await _executor(big, max_result_chars=100).run([ts.ToolCall("c1", "look", {"caption": "x"})])
    (result,) = outcome.results
    assert (result.output, result.truncated, result.is_error) == (big, False, False)


@pytest.mark.parametrize("truncate", ["tail", "middle", "offload"])
async def test_the_text_beside_an_image_is_cut_and_the_image_kept(truncate: str, tmp_path: Path) -> None:
    long_text = "line\n" * 400
    output = [long_text, ts.Image(PIXEL), "short"]
    executor = _executor(output, max_result_chars=200, truncate=truncate)
    if truncate == "offload":
        executor = ts.Executor(list(executor.registry), offload_dir=tmp_path)
    (result,) = (await executor.run([ts.ToolCall("c1", "look", {"caption": "x"})])).results
    assert result.truncated and not result.is_error
    text, image = result.output
    assert isinstance(text, str) and len(text) <= 200 and image == ts.Image(PIXEL)
    if truncate == "offload":
        assert result.offload_path is not None
        assert await anyio.Path(result.offload_path).read_text() == long_text + "\nshort"


async def test_the_text_beside_an_image_within_budget_is_left_as_returned() -> None:
    output = ["a caption", ts.Image(PIXEL)]
    (result,) = (await _executor(output).run([ts.ToolCall("c1", "look", {"caption": "x"})])).results
    assert result.output is output and not result.truncated


# -- each provider's builder ----------------------------------------------------------


def _results(output: Any, *, budget: int = 40_000) -> tuple[list[ts.ToolCall], list[ts.ToolResult], Any]:
    executor = _executor(output, max_result_chars=budget)
    calls = [ts.ToolCall("c1", "look", {"caption": "x"})]
    return calls, anyio.run(executor.run, calls).results, executor.registry


def test_anthropic_sends_text_and_image_blocks_in_order() -> None:
    calls, results, registry = _results(["before", ts.Image(PIXEL), "after"])
    (block,) = ts_anthropic.results_to_blocks(calls, results, registry=registry)
    b64 = base64.b64encode(PIXEL).decode()
    assert block == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": [
            {"type": "text", "text": "before"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
            {"type": "text", "text": "after"},
        ],
    }


def test_responses_sends_input_text_and_input_image_parts() -> None:
    calls, results, registry = _results(ts.Image(PIXEL))
    (item,) = ts_responses.results_to_items(calls, results, registry=registry)
    assert item == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [{"type": "input_image", "image_url": ts.Image(PIXEL).data_url(), "detail": "auto"}],
    }


def test_chat_answers_every_call_first_then_sends_the_images_in_one_user_message() -> None:
    @ts.tool(read_only=True, concurrency_safe=True)
    def look(name: str) -> Any:
        """Returns a picture, or text for `plain`."""
        return "no picture" if name == "plain" else [f"{name}:", ts.Image(PIXEL)]

    calls = [ts.ToolCall(call_id, "look", {"name": call_id}) for call_id in ("a", "plain", "b")]
    calls.append(ts.ToolCall("bad", "look", {"name": 3}))
    results = anyio.run(ts.Executor([look]).run, calls).results
    messages = ts_chat.results_to_messages(calls, results)
    assert [message["role"] for message in messages] == ["tool", "tool", "tool", "tool", "user"]
    assert [message.get("tool_call_id") for message in messages[:4]] == ["a", "plain", "b", "bad"]
    size = f"{len(PIXEL):,}"
    assert messages[0]["content"] == f"a:\n[image/png image, {size} bytes, in the user message that follows]"
    assert messages[1]["content"] == "no picture"
    assert messages[3]["content"].startswith("Error: ")
    url = ts.Image(PIXEL).data_url()
    assert messages[4]["content"] == [
        {"type": "text", "text": "The images returned by tool call a (look):"},
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "The images returned by tool call b (look):"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    # Without images, nothing follows the tool messages.
    assert [m["role"] for m in ts_chat.results_to_messages(calls[1:2], results[1:2])] == ["tool"]


def test_gemini_sends_the_text_as_output_and_the_images_as_inline_data_parts() -> None:
    from google.genai import types as genai_types

    calls, results, registry = _results(["a chart", ts.Image(PIXEL)])
    (part,) = ts_gemini.results_to_parts(calls, results, registry=registry)
    assert part == {
        "functionResponse": {
            "name": "look",
            "id": "c1",
            "response": {"output": "a chart"},
            "parts": [{"inlineData": {"mimeType": "image/png", "data": base64.b64encode(PIXEL).decode()}}],
        }
    }
    # The SDK reads the part as its own type, with the image's bytes.
    parsed = genai_types.Part.model_validate(part)
    assert parsed.function_response is not None and parsed.function_response.parts is not None
    inline = parsed.function_response.parts[0].inline_data
    assert inline is not None and (inline.data, inline.mime_type) == (PIXEL, "image/png")


def test_an_errored_call_and_non_image_bytes_go_as_text_as_before() -> None:
    calls, results, registry = _results(b"caf\xc3\xa9")
    (block,) = ts_anthropic.results_to_blocks(calls, results, registry=registry)
    assert block["content"] == "café"


# -- over real HTTP, with the official SDK clients --------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_each_loop_sends_a_tool_image_as_the_provider_image_part(provider: str) -> None:
    big = png(payload=b"y" * 30_000)

    @ts.tool(read_only=True, max_result_chars=1_000)
    def screenshot(page: str) -> Any:
        """A screenshot of a page."""
        return [f"screenshot of {page}", ts.Image(big)]

    turn = Reply(tool_uses=[ToolUse("screenshot", {"page": "home"}, id="call_1")])
    with ScriptedProvider([turn, Reply(text="A blank page.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            result = await client.loop(ts.Executor([screenshot]), "what is on the home page?")
    assert (result.stop, result.text) == ("done", "A blank page.")
    sent = scripted.requests[1].body
    b64 = base64.b64encode(big).decode()
    if provider == "anthropic":
        (answer,) = sent["messages"][-1]["content"]
        assert answer["tool_use_id"] == "call_1"
        assert answer["content"] == [
            {"type": "text", "text": "screenshot of home"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
        ]
    elif provider == "openai_responses":
        (answer,) = [item for item in sent["input"] if item.get("type") == "function_call_output"]
        assert answer["output"] == [
            {"type": "input_text", "text": "screenshot of home"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{b64}", "detail": "auto"},
        ]
    elif provider == "openai_chat":
        tool_message, user_message = sent["messages"][-2:]
        assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
        assert tool_message["content"].startswith("screenshot of home\n[image/png image")
        assert user_message["role"] == "user"
        assert user_message["content"][1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}}
    else:
        (part,) = sent["contents"][-1]["parts"]
        response = part["functionResponse"]
        assert response["response"] == {"output": "screenshot of home"}
        # The SDK spells the part's fields its own way (snake case here); the API reads either.
        (media,) = response["parts"]
        blob = media.get("inlineData") or media["inline_data"]
        assert (blob.get("mimeType") or blob["mime_type"], blob["data"]) == ("image/png", b64)
    # Whole, though fifty times the tool's character budget.
    assert len(b64) > 40_000


# -- MCP ImageContent, journals and run states --------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_mcp_servers_image_reaches_the_model_as_an_image() -> None:
    with anyio.fail_after(60):
        async with ts_mcp.connect_stdio(sys.executable, [SERVER]) as server:
            tools = await server.tools()
            calls = [ts.ToolCall("m1", "snapshot", {"caption": "a pixel"})]
            outcome = await ts.Executor(tools).run(calls)
    (result,) = outcome.results
    assert not result.is_error, result.error
    (block,) = ts_anthropic.results_to_blocks(calls, outcome.results)
    text, image = block["content"]
    assert text == {"type": "text", "text": "a pixel"}
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]).startswith(b"\x89PNG\r\n\x1a\n")


async def test_a_journaled_image_recovers_as_the_same_image(tmp_path: Path) -> None:
    calls = [ts.ToolCall("c1", "look", {"caption": "x"})]
    async with ts.SqliteJournal(tmp_path / "journal.db") as journal:
        executor = ts.Executor(list(_executor(["shot", PIXEL]).registry), journal=journal)
        await executor.run(calls, run_id="pictures")
        recovered = await executor.recover("pictures")
    (result,) = recovered.results
    assert content_parts(result.output) == ("shot", ts.Image(PIXEL))
    (item,) = ts_responses.results_to_items(calls, recovered.results)
    assert item["output"][1]["image_url"] == ts.Image(PIXEL).data_url()


async def test_an_image_result_held_in_a_run_state_survives_its_json() -> None:
    @ts.tool(read_only=True)
    def look(caption: str) -> Any:
        """Returns a picture."""
        return ts.Image(PIXEL)

    @ts.tool(needs_approval=True)
    def publish(caption: str) -> str:
        """Publishes."""
        return "published"

    executor = ts.Executor([look, publish])
    calls = [ts.ToolCall("c1", "look", {"caption": "x"}), ts.ToolCall("c2", "publish", {"caption": "x"})]
    paused = await executor.run(calls)
    assert paused.state is not None
    state = ts.RunState.from_json(paused.state.to_json())
    state.approve("c2")
    finished = await executor.resume(state)
    blocks = ts_anthropic.results_to_blocks(calls, finished.results)
    assert blocks[0]["content"] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PIXEL).decode()},
        }
    ]
    assert blocks[1]["content"] == "published"
