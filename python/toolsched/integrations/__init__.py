"""Adapters to agent frameworks and observability stacks; each module imports its framework lazily.

- ``toolsched.integrations.langgraph``: ``ToolNode``, a drop-in for LangGraph's prebuilt one;
- ``toolsched.integrations.langchain``: LangChain tools as toolsched tools (``from_langchain``);
- ``toolsched.integrations.agents``: the OpenAI Agents SDK's function tools run through toolsched;
- ``toolsched.integrations.otel``: OpenTelemetry spans and metrics for every call and batch.

MCP servers' tools import through ``toolsched.mcp``.
"""
