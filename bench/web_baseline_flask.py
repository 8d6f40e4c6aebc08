"""The lean baseline's work under Flask: what a Flask app pays before any of the product's code
(`bench.web_tier --flask-floor`).

    gunicorn bench.web_baseline_flask:app --worker-class gthread --threads 64 ...

The same three handlers as bench/web_baseline.py (the same statements, LPUSHes, bodies and
answers), reached through Flask instead of a bare WSGI function: Flask's routing, request
context, `request.get_json()` and `Response`; nothing else (no blueprint, no hook, no
validation library, no metrics). The difference between this side and the lean one is the
framework's own cost per submission, a floor any Flask app doing this work pays; the
product's design card names Flask, so its web tier cannot go below it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import psycopg
import redis
from flask import Flask, Response, request

from bench import web_baseline as lean
from web.auth import verify_user_token

Handler = Callable[[int, dict[str, Any], lean.StartResponse], Iterable[bytes]]

app = Flask(__name__)


def _answer(status: str, code: int, message: str) -> Response:
    captured: list[Any] = []
    body = b"".join(lean._reply(lambda s, h: captured.extend((s, h)), status, code, message))
    return Response(body, status=captured[0], headers=captured[1])


def _view(handler: Handler) -> Callable[[], Response]:
    def view() -> Response:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        user_id = verify_user_token(lean._secret, token.strip()) if scheme.lower() == "bearer" else None
        if user_id is None:
            return _answer("401 UNAUTHORIZED", 1002, "缺少身份凭证")
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return _answer("400 BAD REQUEST", 1001, "请求体不是 JSON 对象")
        captured: list[Any] = []
        try:
            chunks = handler(user_id, body, lambda s, h: captured.extend((s, h)))
        except (psycopg.OperationalError, redis.RedisError):
            return _answer("503 SERVICE UNAVAILABLE", 5003, "服务暂不可用")
        return Response(b"".join(chunks), status=captured[0], headers=captured[1])

    view.__name__ = handler.__name__
    return view


for path, handler in lean.ROUTES.items():
    app.add_url_rule(path, view_func=_view(handler), methods=["POST"])
