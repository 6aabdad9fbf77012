"""The OpenAI-compatible HTTP endpoint of an environment worker (ROLL's ProxyServer), on the standard library.

One server per environment worker process, shared by its proxy env managers. Every request carries a bearer
token; each running episode registers its own random token with the handler that serves it, so the token both
admits a request and says which episode it belongs to (ROLL routes on the env id in plain text instead). A token
is revoked when its episode ends: a late request gets 410 with the reason, an unknown token 401. The server binds
the loopback address unless told otherwise.

    POST /v1/chat/completions   (token)  the episode's handler answers
    GET  /v1/models             (token)  the one model served
    GET  /health                         {"status": "ok"}
"""

import hashlib
import ipaddress
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger("roll.agentic.proxy")

MAX_BODY_BYTES = 16 << 20  # a request body larger than this is refused (413)
RETIRED_TOKENS = 100_000  # revoked tokens remembered for their 410 reason (oldest forgotten first)
MODEL_NAME = "roll-policy"  # what /v1/models lists; a request's `model` is echoed back, not checked

Handler = Callable[[dict], tuple[int, dict]]  # the request's JSON body → (HTTP status, JSON answer)


def error_body(message: str, code: str, kind: str = "invalid_request_error") -> dict:
    """OpenAI's error shape (the `openai` client raises it as an APIStatusError with this message)."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ProxyServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._routes: dict[str, Handler] = {}
        self._retired: OrderedDict[str, str] = OrderedDict()  # digest → why its episode ended
        self._lock = threading.Lock()
        self._httpd = _HTTPServer((host, port), _RequestHandler)
        self._httpd.proxy = self
        self.host, self.port = self._httpd.server_address[:2]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="roll-proxy-server", daemon=True)
        self._thread.start()
        logger.info("OpenAI-compatible endpoint listening on %s", self.base_url)
        if not ipaddress.ip_address(self.host).is_loopback:
            logger.warning(
                "the endpoint listens on %s, beyond this machine: only the episode tokens guard it", self.host
            )

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def register(self, token: str, handler: Handler) -> None:
        with self._lock:
            self._routes[_digest(token)] = handler

    def revoke(self, token: str, reason: str) -> None:
        """The token's episode is over: later requests with it get 410 naming `reason`."""
        digest = _digest(token)
        with self._lock:
            self._routes.pop(digest, None)
            self._retired[digest] = reason
            while len(self._retired) > RETIRED_TOKENS:
                self._retired.popitem(last=False)

    def dispatch(self, method: str, path: str, authorization: str | None, body: bytes | None) -> tuple[int, dict]:
        """One request → (status, JSON answer); blocks while the episode's handler waits for its reply."""
        path = path.split("?", 1)[0].rstrip("/")
        if method == "GET" and path == "/health":
            return 200, {"status": "ok"}
        if (method, path) not in (("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
            return 404, error_body(f"{method} {path} is not served (POST /v1/chat/completions is)", "not_found")
        handler, refusal = self._route(authorization)
        if handler is None:
            return refusal
        if method == "GET":
            return 200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "created": 0,
                                                     "owned_by": "roll"}]}  # fmt: skip
        try:
            request = json.loads(body or b"")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return 400, error_body(f"the request body is not JSON: {error}", "invalid_json")
        if not isinstance(request, dict):
            return 400, error_body("the request body must be a JSON object", "invalid_json")
        return handler(request)

    def _route(self, authorization: str | None) -> tuple[Handler | None, tuple[int, dict] | None]:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None, (401, error_body("missing 'Authorization: Bearer <token>'", "missing_token",
                                          "authentication_error"))  # fmt: skip
        digest = _digest(token.strip())
        with self._lock:
            handler, reason = self._routes.get(digest), self._retired.get(digest)
        if handler is not None:
            return handler, None
        if reason is not None:
            return None, (410, error_body(f"this episode is over ({reason})", "episode_over"))
        return None, (401, error_body("invalid token (a token is valid only while its episode runs)",
                                      "invalid_token", "authentication_error"))  # fmt: skip

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler waiting for its reply never keeps the process alive
    request_queue_size = 1024  # every agent of a worker connects at the start of a step (the default 5 drops some)
    proxy: ProxyServer


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: an agent's client reuses its connection
    server: _HTTPServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True  # the body's end is unknown: the connection cannot be reused
            return self._send(411, error_body("a Content-Length header is required", "length_required"))
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            return self._send(413, error_body(f"the body is over {MAX_BODY_BYTES} bytes", "too_large"))
        body = self.rfile.read(int(length))
        self._send(*self.server.proxy.dispatch("POST", self.path, self.headers.get("Authorization"), body))

    def do_GET(self) -> None:  # noqa: N802
        self._send(*self.server.proxy.dispatch("GET", self.path, self.headers.get("Authorization"), None))

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        logger.debug("%s %s", self.address_string(), format % args)


_SHARED: dict[tuple[str, int], ProxyServer] = {}
_SHARED_LOCK = threading.Lock()


def shared_server(host: str, port: int) -> ProxyServer:
    """This process's endpoint on (host, port), started on first use (the env managers of one worker share it)."""
    with _SHARED_LOCK:
        if (host, port) not in _SHARED:
            try:
                _SHARED[(host, port)] = ProxyServer(host, port)
            except OSError as error:
                raise OSError(
                    f"the proxy env manager's endpoint cannot listen on {host}:{port}: {error} (proxy_host / "
                    "proxy_port of the env manager block; proxy_port 0 takes any free port)"
                ) from error
        return _SHARED[(host, port)]
