"""Provider adapters: a model's tool calls in, the provider's reply format out.

One module per API, each with ``calls_from(response)``, a ``results_to_*``
builder for its reply format, ``tool_definitions(executor)`` and an async
``execute(executor, response)`` that does all three:

- ``toolsched.providers.anthropic``: Anthropic Messages;
- ``toolsched.providers.openai_responses``: OpenAI Responses;
- ``toolsched.providers.openai_chat``: OpenAI Chat Completions;
- ``toolsched.providers.gemini``: Google Gemini.

They read the official SDKs' objects and plain dicts alike and never import
an SDK, so they work whichever SDK version (or none) is installed.
"""
