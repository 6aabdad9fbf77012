"""The OpenAI-compatible endpoint of the proxy env manager (roll.agentic.env_managers.proxy): the HTTP server,
the conversation → token ids bookkeeping, and tool calls read from a reply."""
