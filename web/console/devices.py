"""The device cookie: "this browser signed in with that admin token before".

Set at each successful sign-in (signed with SECRET_KEY, HttpOnly, path /admin, Secure in
production, `MAX_AGE_S`), it names the token's fingerprint only. A sign-in attempt that
carries a valid one is limited per credential instead of per address
(web/console/limits.py): strangers failing from the admins' shared address do not slow
down an admin's browser. It grants nothing by itself: the token is still required.
"""

from __future__ import annotations

from typing import Any

from flask import Response, request
from itsdangerous import BadData, URLSafeTimedSerializer

COOKIE_NAME = "mi_admin_device"
SALT = "console-device"
#: A browser that has not signed in for this long is a stranger again.
MAX_AGE_S = 90 * 24 * 3600
COOKIE_PATH = "/admin"


def _serializer(secret_key: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret_key, salt=SALT)


def device_fingerprint(secret_key: str) -> str | None:
    """The fingerprint named by this request's valid device cookie, else None."""
    raw = request.cookies.get(COOKIE_NAME)
    if not raw or not secret_key:
        return None
    try:
        payload: Any = _serializer(secret_key).loads(raw, max_age=MAX_AGE_S)
    except BadData:
        return None
    fingerprint = payload.get("fp") if isinstance(payload, dict) else None
    return fingerprint if isinstance(fingerprint, str) else None


def remember_device(response: Response, secret_key: str, fingerprint: str, *, secure: bool) -> None:
    response.set_cookie(
        COOKIE_NAME,
        _serializer(secret_key).dumps({"fp": fingerprint}),
        max_age=MAX_AGE_S,
        path=COOKIE_PATH,
        httponly=True,
        secure=secure,
        samesite="Strict",
    )
