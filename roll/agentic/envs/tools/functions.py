"""Function declarations for native tool calling: the OpenAI-style schema a chat template renders in its tools
section, and the check of a call's arguments against it (the subset of JSON Schema that function declarations
use; an MCP server's full schemas are checked with jsonschema by the mcp tool)."""


def function_schema(name: str, description: str, properties: dict, required: list[str]) -> dict:
    """An OpenAI-style function declaration, as `apply_chat_template(tools=...)` takes it."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


JSON_TYPES = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


def check_arguments(arguments: dict, parameters: dict) -> str | None:
    """Why `arguments` do not fit a function's `parameters` schema (required keys, unknown keys when
    additionalProperties is false, each property's JSON type and enum), or None when they fit. A tool whose
    schema needs more (an MCP server's) is checked with jsonschema by that tool."""
    properties = parameters.get("properties", {}) or {}
    missing = [key for key in parameters.get("required", []) if key not in arguments]
    if missing:
        return f"missing argument(s) {missing}"
    if parameters.get("additionalProperties") is False:
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            return f"unknown argument(s) {unknown}; the arguments are {sorted(properties)}"
    for key, value in arguments.items():
        spec = properties.get(key, {})
        kind = spec.get("type")
        kinds = kind if isinstance(kind, list) else [kind] if kind else []
        if kinds and not any(_is_type(value, k) for k in kinds):
            return f"argument {key!r} must be {' or '.join(kinds)}, got {type(value).__name__}"
        if "enum" in spec and value not in spec["enum"]:
            return f"argument {key!r} must be one of {spec['enum']}, got {value!r}"
    return None


def _is_type(value, kind: str) -> bool:
    if kind not in JSON_TYPES:
        return True  # a type this check does not know: left to the tool
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    return isinstance(value, JSON_TYPES[kind])
