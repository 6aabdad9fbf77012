"""A SandboxFusion-compatible HTTP front for roll's sandbox: `POST /run_code` runs Python in run_python.

    python -m roll.sandbox.server --host 127.0.0.1 --port 8080

Request: {"code": str, "language": "python", "stdin": str, "run_timeout": s, "compile_timeout": s,
"memory_limit_MB": MB}. Response: {"status": "Success" | "Failed" | "SandboxError", "message": str,
"run_result": {"status": "Finished" | "TimeLimitExceeded", "return_code", "stdout", "stderr",
"execution_time"}} — what a code reward with `use_local: false` and `code_url: http://HOST:PORT/run_code`
expects. One machine can so grade for many trainers; it refuses to start where the sandbox cannot isolate.
"""

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from roll.sandbox.isolation import SandboxUnavailable
from roll.sandbox.runner import require_isolation, run_python

MAX_REQUEST_BYTES = 1 << 20
MAX_TIMEOUT_S = 60.0


def run_code(request: dict) -> dict:
    """The /run_code response for one request (a bad request is a SandboxError with the reason)."""
    if request.get("language", "python") not in ("python", "python3"):
        return {"status": "SandboxError", "message": f"language {request.get('language')!r}: only python runs here"}
    code, stdin = request.get("code"), request.get("stdin") or ""
    timeout = float(request.get("run_timeout") or 10.0)
    memory_mb = int(request.get("memory_limit_MB") or 512)
    if not isinstance(code, str) or not isinstance(stdin, str) or not 0 < timeout <= MAX_TIMEOUT_S:
        return {
            "status": "SandboxError",
            "message": f"need code and stdin strings and 0 < run_timeout ≤ {MAX_TIMEOUT_S}",
        }
    try:
        result = run_python(code, timeout=timeout, memory_mb=memory_mb, stdin=stdin)
    except SandboxUnavailable as error:  # the machine could not build or vet a sandbox: not the code's failure
        return {"status": "SandboxError", "message": str(error)}
    run = {
        "status": "TimeLimitExceeded" if result.timed_out else "Finished",
        "return_code": result.returncode,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "execution_time": result.duration,
    }
    ok = not result.timed_out and result.returncode == 0
    return {"status": "Success" if ok else "Failed", "message": "", "run_result": run}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        if self.path.rstrip("/") != "/run_code":
            return self._reply(404, {"status": "SandboxError", "message": f"no endpoint {self.path}; POST /run_code"})
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_REQUEST_BYTES:
            return self._reply(413, {"status": "SandboxError", "message": f"body must be 1..{MAX_REQUEST_BYTES} bytes"})
        try:
            request = json.loads(self.rfile.read(length))
        except ValueError as error:
            return self._reply(400, {"status": "SandboxError", "message": f"body is not JSON: {error}"})
        self._reply(200, run_code(request))

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # one line per request is noise at RL scale
        pass


def make_server(host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    require_isolation()  # a grading service never runs model code unisolated
    return ThreadingHTTPServer((host, port), Handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    server = make_server(args.host, args.port)
    print(f"roll sandbox: POST http://{args.host}:{server.server_address[1]}/run_code", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
