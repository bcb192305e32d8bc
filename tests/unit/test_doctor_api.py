"""`doctor` on [api] listen: whether this installation can serve the API it is asked to."""

from __future__ import annotations

from pathlib import Path

import taskherd.api
from taskherd import doctor
from taskherd.config import parse_config


def config(listen: str | None):
    return parse_config({"api": {"listen": listen}} if listen else {}, base_dir=Path("/srv"))


def test_listen_without_the_api_extra_is_named(monkeypatch):
    monkeypatch.setattr(taskherd.api, "missing_packages", lambda: ["starlette", "uvicorn"])
    check = doctor.check_api(config("127.0.0.1:8765"))
    assert check.status == doctor.WARN
    assert check.line() == ("warn    api 127.0.0.1:8765: not served: the api extra is not "
                            "installed (starlette, uvicorn missing) → pip install "
                            "'taskherd[api]', or remove [api] listen")


def test_listen_with_the_extra_and_no_listen_at_all():
    assert doctor.check_api(config("127.0.0.1:8765")).status == doctor.OK
    assert doctor.check_api(config(None)) is None
