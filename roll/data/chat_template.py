"""Rendering a tokenizer's chat template, its failures named: a Jinja syntax error or a template that calls
`raise_exception` becomes one line naming the template's file and the reason, not a traceback from inside
jinja2."""

from pathlib import Path

from roll.utils.errors import InputError


def template_source(tokenizer) -> str:
    """Where the tokenizer's template comes from: its directory's chat_template.jinja, else tokenizer_config.json."""
    directory = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    if (directory / "chat_template.jinja").is_file():
        return str(directory / "chat_template.jinja")
    return f"{directory / 'tokenizer_config.json'} (its chat_template)"


def render_chat(tokenizer, messages: list, **kwargs) -> str:
    """tokenizer.apply_chat_template(messages, tokenize=False, **kwargs), with template errors as InputError."""
    import jinja2

    try:
        return tokenizer.apply_chat_template(list(messages), tokenize=False, **kwargs)
    except jinja2.TemplateSyntaxError as error:
        raise InputError(
            f"the chat template {template_source(tokenizer)} is not valid Jinja: {error.message} (line "
            f"{error.lineno}); fix the template or give the tokenizer another one"
        ) from None
    except jinja2.TemplateError as error:  # raise_exception(...) in the template, or an undefined operation
        raise InputError(
            f"the chat template {template_source(tokenizer)} raised an error while rendering "
            f"{[m.get('role') for m in messages]} messages: {error}; fix the template or give the tokenizer "
            f"another one"
        ) from None
