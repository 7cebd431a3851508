"""Running the CLI in-process: its exit code and output, and the shape of a user error."""

from __future__ import annotations

import pytest

from pgqueue.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    code = exc.value.code if isinstance(exc.value.code, int) else 1
    return code, out, err


def assert_user_error(result: tuple[int, str, str], *fragments: str) -> None:
    code, _, err = result
    assert code == 2, result
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err
