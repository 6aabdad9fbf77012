"""ROLL's search tool: the model asks <search>query</search>; the query goes to a retrieval server over HTTP
(the Search-R1 retriever protocol: POST {"queries": [q], "topk": k, "return_scores": true} as JSON, answered by
{"result": [[{"document": {"contents": "title\\ntext"}, "score": s}, ...]]}; a server that refuses JSON with
HTTP 400/415/422 is asked again in msgpack, which GEM's mosec retrieval server, the one ROLL's
start_retrieval_server.sh starts, reads) and the passages come back inside <information>...</information>.

Every request has a time limit (tool_args.timeout). A failed request (unreachable server, time-out, HTTP error,
an answer of another shape) does not stop the episode, as in ROLL: the model reads an error naming the
environment and the URL, the call counts as failed, and the same message is logged as a warning."""

import json
import os
import re
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse

from roll.agentic.envs.tools.base import Tool, ToolCall
from roll.agentic.envs.tools.functions import function_schema
from roll.utils.logging import get_logger

logger = get_logger("roll.agentic")
CALL_RE = re.compile(r"<search>(.*?)</search>", re.DOTALL)
INSTRUCTIONS = (
    "A search engine can help you answer. Think inside <think> ... </think>. When you are missing a fact, ask "
    "for it with <search> your query </search>; the passages found come back inside <information> ... "
    "</information>. Search as often as you need, then give the final short answer inside <answer> ... </answer>."
)

FUNCTION = function_schema(
    "search",
    "Search a document collection; returns the best matching passages.",
    {"query": {"type": "string", "description": "what to look for"}},
    ["query"],
)


class SearchTool(Tool):
    tool_id = "search"
    default_args = {
        "search_url": None,  # null = the SEARCH_URL environment variable (ROLL's fallback)
        "topk": 3,  # passages per query
        "timeout": 5,  # seconds per request
        "num_workers": 1,  # ROLL's (GEM's) worker count; a call here is one request
    }

    def __init__(self, where: str, env_name: str = "", **tool_args):
        super().__init__(where, **tool_args)
        self.env_name = env_name or where
        url = self.optional_str("search_url") or os.environ.get("SEARCH_URL")
        if not url:
            raise ValueError(f"{where}.tool_args.search_url is not set (nor the SEARCH_URL environment variable)")
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"{where}.tool_args.search_url = {url!r}: expected an http:// or https:// URL")
        self.url = url
        self.topk = self.positive_int("topk")
        self.timeout = self.positive_number("timeout")
        self.positive_int("num_workers")

    def instructions(self) -> str:
        return INSTRUCTIONS

    def locate(self, text: str) -> int | None:
        match = CALL_RE.search(text)
        return None if match is None else match.end()

    def call(self, action: str) -> ToolCall | None:
        match = CALL_RE.search(action)
        if match is None:
            return None
        text, ok = self._answer(match.group(1).strip())
        return ToolCall(f"\n\n<information>{text}</information>\n\n", ok, action[: match.end()])

    def _answer(self, query: str) -> tuple[str, bool]:
        try:
            return passages_text(self.search(query)), True
        except SearchError as error:
            message = f"{self.env_name}: search request to {self.url} failed: {error}"
            logger.warning(message)
            return f"[search error: {message}]", False

    # native tool calling: one function, `search`
    def functions(self) -> list[dict]:
        return [FUNCTION]

    def invoke(self, name: str, arguments: dict) -> ToolCall:
        text, ok = self._answer(arguments["query"].strip())
        return ToolCall(text, ok, "")

    def search(self, query: str) -> list[dict]:
        payload = {"queries": [query], "topk": self.topk, "return_scores": True}
        deadline = time.monotonic() + self.timeout  # one limit for the whole search, a second try included
        try:
            raw, kind = self._post(json.dumps(payload).encode(), "application/json", deadline)
        except RefusedBody:  # a retriever that reads msgpack only (GEM's mosec retrieval_server): ask it so
            import msgpack

            raw, kind = self._post(msgpack.packb(payload), "application/msgpack", deadline)
        try:
            if "msgpack" in kind:
                import msgpack

                passages = msgpack.unpackb(raw)["result"][0]
            else:
                passages = json.loads(raw)["result"][0]
            if not isinstance(passages, list):
                raise TypeError(f"result[0] is a {type(passages).__name__}")
            return passages
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise SearchError(f'the answer is not {{"result": [[passages]]}} ({error!r}): {raw[:200]!r}') from None

    def _post(self, body: bytes, content_type: str, deadline: float) -> tuple[bytes, str]:
        """(answer body, its content type); RefusedBody for HTTP 400/415/422, SearchError for other failures."""
        left = deadline - time.monotonic()
        too_slow = f"no answer within {self.timeout:g} s (tool_args.timeout)"
        if left <= 0:
            raise SearchError(too_slow)
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(request, timeout=left) as response:
                return response.read(), response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as error:
            if error.code in (400, 415, 422) and content_type == "application/json":
                raise RefusedBody() from None
            raise SearchError(f"HTTP {error.code} {error.reason}") from None
        except TimeoutError:
            raise SearchError(too_slow) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise SearchError(too_slow if isinstance(reason, TimeoutError) else str(reason)) from None


class RefusedBody(Exception):
    pass


class SearchError(RuntimeError):
    pass


def passages_text(passages: list[dict]) -> str:
    """'Doc i(Title: first line) rest' per passage, as ROLL formats retrieved passages."""
    lines = []
    for index, item in enumerate(passages, start=1):
        document = item.get("document", item) if isinstance(item, dict) else {}
        contents = str(document.get("contents", "")) if isinstance(document, dict) else ""
        title, _, text = contents.partition("\n")
        lines.append(f"Doc {index}(Title: {title}) {text}\n")
    return "".join(lines)
