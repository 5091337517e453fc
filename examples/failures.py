"""Failures, timeouts, interrupts and a crashing worker process: every call still gets one result.

Run with ``python examples/failures.py``.
"""

from __future__ import annotations

import os

import anyio

import toolsched as ts


@ts.tool(concurrency_safe=True, timeout=0.1)
async def fetch(url: str) -> str:
    """Fetch a page (a slow server runs past the timeout)."""
    if url.endswith("/slow"):
        await anyio.sleep(60)
    return f"fetched {url}"


@ts.tool(concurrency_safe=True)
async def lint(path: str) -> str:
    """Lint a source file."""
    if path.endswith(".bin"):
        raise ValueError(f"{path} is not a text file")
    return f"{path}: clean"


@ts.tool(concurrency_safe=True, abort_siblings_on_error=True)
async def deploy(region: str) -> str:
    """Deploy to one region; a failure cancels the other deployments of the batch."""
    if region == "eu":
        raise ConnectionError("eu gateway refused the release")
    await anyio.sleep(1)
    return f"deployed to {region}"


@ts.tool
async def announce(message: str) -> str:
    """Post a message (not concurrency-safe: it runs in a batch of its own)."""
    return f"announced {message!r}"


@ts.tool(concurrency_safe=True, interrupt_behavior="cancel")
async def search(query: str) -> str:
    """A long search that is pointless once the user has said something new."""
    await anyio.sleep(60)
    return f"results for {query}"


@ts.tool(concurrency_safe=True)
async def save(note: str) -> str:
    """Saving must not be torn: on an interrupt it finishes."""
    await anyio.sleep(0.1)
    return f"saved {note!r}"


@ts.tool(isolation="process")
def parse_pdf(path: str) -> str:
    """A native parser that crashes its process on this file."""
    os._exit(1)


def advise(exc: BaseException, call: ts.ToolCall) -> str:
    return f"{call.name} failed: {exc}. Check the arguments or try another tool."


def show(outcome: ts.Outcome) -> None:
    for result in outcome.results:
        shown = f"{result.error_kind}: {result.error}" if result.is_error else repr(result.output)
        print(f"  {result.call_id} {shown}")


async def main() -> None:
    print("timeouts and failures are results; siblings keep theirs:")
    executor = ts.Executor([fetch, lint], error_formatter=advise)
    show(
        await executor.run(
            [
                ts.ToolCall("f1", "fetch", {"url": "https://example.com/a"}),
                ts.ToolCall("f2", "fetch", {"url": "https://example.com/slow"}),
                ts.ToolCall("l1", "lint", {"path": "a.py"}),
                ts.ToolCall("l2", "lint", {"path": "b.bin"}),
            ]
        )
    )

    print("a failure that aborts its batch; the next batch still runs:")
    executor = ts.Executor([deploy, announce])
    show(
        await executor.run(
            [
                ts.ToolCall("d1", "deploy", {"region": "us"}),
                ts.ToolCall("d2", "deploy", {"region": "eu"}),
                ts.ToolCall("d3", "deploy", {"region": "ap"}),
                ts.ToolCall("a1", "announce", {"message": "release halted"}),
            ]
        )
    )

    print("on_error='raise': the first failure is raised once its batch settles:")
    try:
        await ts.Executor([lint, announce], on_error="raise").run(
            [
                ts.ToolCall("l1", "lint", {"path": "b.bin"}),
                ts.ToolCall("a1", "announce", {"message": "lint done"}),
            ]
        )
    except ts.ToolCallFailed as error:
        print(f"  raised for {error.result.call_id}; results: {[r.error_kind for r in error.results]}")

    print("the user interrupts: 'cancel' tools stop, 'block' tools finish, the rest is skipped:")
    executor = ts.Executor([search, save], strategy=ts.Partitioned(max_concurrency=2))
    async with anyio.create_task_group() as group:

        async def user_types_a_message() -> None:
            await anyio.sleep(0.05)
            executor.interrupt("the user sent a new message")

        group.start_soon(user_types_a_message)
        show(
            await executor.run(
                [
                    ts.ToolCall("s1", "search", {"query": "flights"}),
                    ts.ToolCall("n1", "save", {"note": "draft"}),
                    ts.ToolCall("n2", "save", {"note": "final"}),
                ]
            )
        )

    print("a crashing worker process fails only its call:")
    show(
        await ts.Executor([parse_pdf, announce]).run(
            [
                ts.ToolCall("p1", "parse_pdf", {"path": "scan.pdf"}),
                ts.ToolCall("a1", "announce", {"message": "parsed"}),
            ]
        )
    )


if __name__ == "__main__":
    anyio.run(main)
