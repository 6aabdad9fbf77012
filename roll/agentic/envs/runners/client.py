"""A minimal client of the endpoint's chat completions, on the standard library (roll's own runners need no
`openai` package; user programs use theirs)."""

import json
import urllib.error
import urllib.request


class EndpointRefused(Exception):
    """The endpoint answered with an error status (the episode is over, the context is full, a bad request)."""

    def __init__(self, status: int, message: str, code: str | None):
        super().__init__(f"HTTP {status} ({code}): {message}")
        self.status, self.message, self.code = status, message, code


def chat_completion(base_url: str, api_key: str, body: dict, timeout: float) -> dict:
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            detail = json.loads(error.read()).get("error", {})
        except (json.JSONDecodeError, AttributeError):
            detail = {}
        raise EndpointRefused(error.code, detail.get("message", error.reason), detail.get("code")) from None
