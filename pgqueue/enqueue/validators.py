"""A task's validator: checks a call's arguments and gives back what the task receives.

`validator=` is a callable or a pydantic model:
- a callable gets the call's arguments (as the task would) and returns None or True (the
  arguments stand as given) or a mapping of parameter names to the values the task gets
  instead (`{"n": int(n)}`); it rejects them by raising ValueError, TypeError or
  AssertionError;
- a pydantic model (anything with `model_validate`) validates the arguments by
  parameter name, and the task receives the model's validated fields: `"5"` declared
  `int` arrives as `5`.
Enqueue validates (and stores the arguments as given, in JSON); the worker validates
again before each attempt and calls the task with the validated values."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pgqueue.enqueue.checks import ValidationError
from pgqueue.errors import InvalidArguments

Validator = Callable[..., Any]


def is_pydantic_model(obj: Any) -> bool:
    return isinstance(obj, type) and hasattr(obj, "model_validate")


def apply(
    task_name: str,
    validator: Validator,
    bound: inspect.BoundArguments,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """Run `validator` over one call; the arguments the task is to be called with."""
    try:
        if is_pydantic_model(validator):
            model = validator.model_validate(dict(bound.arguments))  # type: ignore[attr-defined]
            params = bound.signature.parameters
            fields = type(model).model_fields
            values: Any = {name: getattr(model, name) for name in fields if name in params}
        else:
            values = validator(*args, **kwargs)
    except (ValueError, TypeError, AssertionError) as exc:
        raise ValidationError(f"invalid arguments for task {task_name!r}: {exc}") from None
    if values is None or values is True:
        return args, kwargs
    if not isinstance(values, Mapping):
        raise InvalidArguments(
            f"the validator of task {task_name!r} returned {values!r:.80}: it must return "
            "None (arguments unchanged) or a mapping of parameter names to values, and "
            "raise ValueError to reject them"
        )
    params = bound.signature.parameters
    unknown = [name for name in values if name not in params]
    if unknown:
        raise InvalidArguments(
            f"the validator of task {task_name!r} returned values for {unknown}, which are "
            f"not parameters of the task ({', '.join(params) or 'none'})"
        )
    bound.arguments.update(values)
    return bound.args, bound.kwargs
