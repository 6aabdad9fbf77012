"""A small OpenAI-compatible judge server: POST /v1/chat/completions answered by a local transformers model.

`python -m roll.workers.rewards.judge_server --model PATH --port 8000` serves a judge for
`judge_model_type: api` without any external service (greedy decoding, one request at a time); it prints
the `judge_api_url` to give the reward domain (`http://HOST:PORT/v1`).
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def make_server(model_path: str, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32).eval()
    lock = threading.Lock()  # one generate at a time on the shared model

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._reply(404, {"error": {"message": f"no route {self.path}"}})
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                ids = tokenizer.apply_chat_template(
                    request["messages"], add_generation_prompt=True, return_tensors="pt"
                )
                if not isinstance(ids, torch.Tensor):  # newer transformers return a BatchEncoding
                    ids = ids["input_ids"]
                with lock, torch.no_grad():
                    out = model.generate(
                        ids, attention_mask=torch.ones_like(ids), do_sample=False,
                        max_new_tokens=int(request.get("max_tokens", 32)), pad_token_id=tokenizer.eos_token_id,
                    )  # fmt: skip
                text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
            except (KeyError, ValueError, TypeError) as error:
                return self._reply(400, {"error": {"message": f"bad request: {error!r}"}})
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            self._reply(200, {"object": "chat.completion", "model": request.get("model"), "choices": [choice]})

        def _reply(self, status: int, body: dict):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # quiet: no line per request
            pass

    return ThreadingHTTPServer((host, port), Handler)


def api_url(server: ThreadingHTTPServer) -> str:
    """What `judge_api_url` is for this server: its base URL ending in /v1 (the worker appends
    /chat/completions)."""
    host, port = server.server_address[:2]
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}/v1"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    server = make_server(args.model, args.host, args.port)
    print(f"judge server ready; in the config: judge_model_type: api, judge_api_url: {api_url(server)}", flush=True)
    server.serve_forever()
