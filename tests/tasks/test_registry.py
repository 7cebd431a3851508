"""The App's registry alone (pgqueue.tasks.registry): queues and their limits, task names,
schedules. No database: an App does not connect until it is used."""

from __future__ import annotations

from typing import Any

import pytest

import pgqueue
from pgqueue.schedules import schedule as _schedules
from pgqueue.tasks import registry as _registry


def make_app() -> pgqueue.App:
    return pgqueue.App("postgresql://nobody@127.0.0.1:1/none")


def double(x: int) -> int:
    return 2 * x


def triple(x: int) -> int:
    return 3 * x


def test_a_declared_queue_is_stored_under_its_name() -> None:
    queues: dict[str, pgqueue.QueueConfig] = {}
    config = _registry.declare_queue(queues, "mail", 5, None)
    assert queues == {"mail": pgqueue.QueueConfig("mail", 5, None)}
    assert config is queues["mail"]


@pytest.mark.parametrize("value", [0, -1, _registry.LIMIT_MAX + 1])
def test_limits_outside_1_to_limit_max_are_out_of_range(value: int) -> None:
    queues: dict[str, pgqueue.QueueConfig] = {}
    with pytest.raises(pgqueue.OutOfRange, match="concurrency must be 1 to"):
        _registry.declare_queue(queues, "mail", value, None)
    with pytest.raises(pgqueue.OutOfRange, match="group_concurrency must be 1 to"):
        _registry.check_limits("mail", None, value)
    assert queues == {}
    _registry.check_limits("mail", 1, _registry.LIMIT_MAX)


def test_a_task_is_named_after_its_module_and_qualname() -> None:
    app = make_app()
    task = app.registry.register(double, workflow=False)
    assert task.name == f"{__name__}.double"
    assert app.tasks == {task.name: task}
    assert task.queue == app.default_queue
    assert _registry.find_task(app.tasks, task.name) is task


def test_two_functions_under_one_name_are_refused_and_one_twice_is_not() -> None:
    app = make_app()
    first = app.registry.register(double, workflow=False, name="math.scale")
    app.registry.register(double, workflow=False, name="math.scale")
    with pytest.raises(ValueError, match=r"two tasks are named 'math\.scale'"):
        app.registry.register(triple, workflow=False, name="math.scale")
    assert app.tasks["math.scale"].fn is first.fn


def test_an_unknown_task_names_the_registered_ones() -> None:
    app = make_app()
    with pytest.raises(pgqueue.UnknownTask, match="this app registers: none"):
        _registry.find_task(app.tasks, "nope")
    app.registry.register(double, workflow=False, name="b")
    app.registry.register(triple, workflow=False, name="a")
    with pytest.raises(pgqueue.UnknownTask, match=r"this app registers: a, b$"):
        _registry.find_task(app.tasks, "nope")


def test_a_schedule_name_holds_one_definition() -> None:
    app = make_app()
    task = app.registry.register(double, workflow=False)
    hourly = _schedules.define(app, "s", "0 * * * *", task, args=(1,))
    schedules: dict[str, _schedules.Schedule] = {}
    assert _registry.add_schedule(schedules, "s", hourly) is hourly
    same = _schedules.define(app, "s", "0 * * * *", task, args=(1,))
    assert _registry.add_schedule(schedules, "s", same) == hourly
    daily = _schedules.define(app, "s", "0 0 * * *", task, args=(1,))
    with pytest.raises(pgqueue.InvalidSchedule, match="two schedules are named 's'"):
        _registry.add_schedule(schedules, "s", daily)
    assert schedules == {"s": hourly}


def test_group_weights_are_kept_sorted_with_their_default() -> None:
    queues: dict[str, pgqueue.QueueConfig] = {}
    app = make_app()
    config = app.queue("api", concurrency=4, group_weights={"gold": 3, "bronze": 1})
    assert config.group_weights == (("bronze", 1), ("gold", 3))
    assert config.default_group_weight == 1
    # an empty map is no weights: the queue takes plain turns
    assert _registry.declare_queue(queues, "q", 1, None, group_weights={}).group_weights is None


@pytest.mark.parametrize(
    ("weights", "default", "error", "fragment"),
    [
        ({"gold": 0}, 1, pgqueue.OutOfRange, "group_weights['gold'] must be 1 to 1000, not 0"),
        ({"gold": 1001}, 1, pgqueue.OutOfRange, "must be 1 to 1000, not 1001"),
        ({"gold": 2.5}, 1, pgqueue.InvalidArguments, "must be an int from 1 to 1000, not float"),
        ({"gold": True}, 1, pgqueue.InvalidArguments, "not bool"),
        ({"": 2}, 1, pgqueue.InvalidArguments, "keys must be group names"),
        ({"gold": 2}, 0, pgqueue.OutOfRange, "default_group_weight must be 1 to 1000, not 0"),
        ([("gold", 2)], 1, pgqueue.InvalidArguments, "must be a dict of group -> weight"),
    ],
)
def test_bad_group_weights_are_refused_in_one_line(
    weights: Any, default: int, error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error) as raised:
        make_app().queue("api", concurrency=4, group_weights=weights, default_group_weight=default)
    assert fragment in str(raised.value) and "\n" not in str(raised.value)


def test_group_weights_need_a_permit_limit() -> None:
    with pytest.raises(pgqueue.InvalidArguments, match="give it concurrency=N or group_conc"):
        make_app().queue("api", rate_limit="5/s", group_weights={"gold": 3})
