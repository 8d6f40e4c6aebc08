"""Credentials: admin bearer tokens and signed user tokens.

Both travel as ``Authorization: Bearer <token>``; they are told apart by what they are:

* an admin token is one of ``settings.admin_tokens`` (ADMIN_TOKENS), compared in
  constant time; with none configured the admin API refuses every call;
* a user token is ``issue_user_token(secret_key, user_id)``: the user id signed with
  itsdangerous under SECRET_KEY and the salt "user-token"; with an empty SECRET_KEY
  every user call is refused.

Missing or invalid credentials answer 401; a valid credential of the other kind 403.
The blueprints install `require_admin` / `require_user` as `before_request` hooks, so
no endpoint of theirs can be left unguarded.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import string
import time
from collections.abc import Sequence

from flask import g, request
from itsdangerous import BadData, URLSafeTimedSerializer
from werkzeug.exceptions import Forbidden, Unauthorized

from services.domain.limits import MAX_ID, is_strict_int
from services.domain.opsmodel import AdminActor
from web import deps

USER_TOKEN_SALT = "user-token"  # noqa: S105 - a namespace for signatures, not a secret
#: A user token is accepted for this long after it was issued.
USER_TOKEN_MAX_AGE_S = 30 * 24 * 3600
#: Hex digits of an admin token's fingerprint (what the event log records, never the token).
FINGERPRINT_HEX_DIGITS = 12

MSG_MISSING = "缺少身份凭证（Authorization: Bearer <token>）"
MSG_INVALID_USER = "用户凭证无效或已过期"
MSG_INVALID_ADMIN = "管理员凭证无效"
MSG_USER_AUTH_DISABLED = "用户接口未启用：服务端未配置 SECRET_KEY"
MSG_ADMIN_AUTH_DISABLED = "管理接口未启用：服务端未配置 ADMIN_TOKENS"
MSG_ADMIN_ON_USER_API = "管理员凭证不能用于用户接口"
MSG_USER_ON_ADMIN_API = "用户凭证不能用于管理接口"


@functools.lru_cache(maxsize=4)
def _serializer(secret_key: str) -> URLSafeTimedSerializer:
    # One per secret: built on every request it would be a measurable share of a user call's CPU.
    # It holds no per-call state (its signers are made per call), so threads may share it.
    return URLSafeTimedSerializer(secret_key, salt=USER_TOKEN_SALT)


def issue_user_token(secret_key: str, user_id: int) -> str:
    """A user token for `user_id` (what the login of the mini-program would hand out)."""
    if not secret_key:
        raise ValueError("SECRET_KEY is empty: user tokens cannot be signed")
    if not is_strict_int(user_id) or not 1 <= user_id <= MAX_ID:
        raise ValueError(f"user id must be an integer in 1..{MAX_ID}, got {user_id!r}")
    return _serializer(secret_key).dumps({"uid": user_id})


def verify_user_token(secret_key: str, token: str) -> int | None:
    """The user id of a valid, unexpired user token, else None."""
    if not secret_key or len(token) > MAX_USER_TOKEN_CHARS:
        return None
    verified = _verified_user_token(secret_key, token)
    if verified is None:
        return None
    user_id, signed_at = verified
    # itsdangerous' max_age check, made on every call: a cached token expires on time.
    age = int(time.time()) - signed_at
    if age > USER_TOKEN_MAX_AGE_S or age < 0:
        return None
    return user_id


#: Signature checks remembered per process (the last ones used): a user's calls carry the same
#: token, whose HMAC check, base64 and JSON cost ~3 % of a web worker's CPU under submissions
#: (py-spy, `python -m bench.profile_web`). Bounded, so a flood of forged tokens only evicts.
VERIFIED_TOKENS_KEPT = 4096
#: Longer than any token `issue_user_token` signs (~80 characters for the largest user id):
#: refused before its signature is checked, so what the cache keeps stays small (~1 MB).
MAX_USER_TOKEN_CHARS = 256


@functools.lru_cache(maxsize=VERIFIED_TOKENS_KEPT)
def _verified_user_token(secret_key: str, token: str) -> tuple[int, int] | None:
    """(user id, when signed, epoch seconds) of a token signed with `secret_key` whose payload is
    a user id, else None; its age is checked by the caller, on every use. Keyed by the secret
    too: a token signed with an older SECRET_KEY is not accepted under a new one."""
    try:
        payload, signed_at = _serializer(secret_key).loads(token, return_timestamp=True)
    except BadData:
        return None
    user_id: object = payload.get("uid") if isinstance(payload, dict) else None
    if not is_strict_int(user_id) or not 1 <= user_id <= MAX_ID:
        return None
    return user_id, int(signed_at.timestamp())


def is_admin_token(admin_tokens: Sequence[str], token: str) -> bool:
    """Constant-time membership; bytes because compare_digest refuses non-ASCII str."""
    candidate = token.encode("utf-8", "surrogateescape")
    matched = False
    for expected in admin_tokens:
        matched |= hmac.compare_digest(expected.encode("utf-8", "surrogateescape"), candidate)
    return matched


#: Least randomness of an admin token, in bits: the barrier against guessing is this, not the
#: sign-in limit (docs/security.md): 2^128 guesses are out of reach at any rate.
MIN_TOKEN_BITS = 128
#: The usual alphabets of generated tokens, smallest first: a token is judged by the
#: smallest one that holds all its characters.
_ALPHABETS = (
    string.digits,
    string.digits + "abcdef",
    string.digits + "ABCDEF",
    string.ascii_lowercase + string.digits,
    string.ascii_letters + string.digits,
    string.ascii_letters + string.digits + "-_",
    string.ascii_letters + string.digits + "+/=",
    string.ascii_letters + string.digits + "-_+/=.~",
    "".join(chr(c) for c in range(0x21, 0x7F)),
)


def token_strength_bits(token: str) -> float:
    """The most randomness `token` can carry, in bits: its length times the bits of a character
    of the smallest usual alphabet holding all of it (digits, hex, base64, printable ASCII; 8
    per byte beyond ASCII), or 0 when its characters repeat as a random token's would not
    (fewer distinct ones than half of what one of that length and alphabet shows). How a
    token was made cannot be known; one that cannot hold `MIN_TOKEN_BITS` is refused."""
    if not token:
        return 0.0
    chars = set(token)
    alphabet = next((a for a in _ALPHABETS if chars <= set(a)), None)
    size = len(alphabet) if alphabet is not None else 256
    length = len(token) if alphabet is not None else len(token.encode("utf-8", "surrogateescape"))
    expected_distinct = size * (1 - (1 - 1 / size) ** length)
    if len(chars) < expected_distinct / 2:
        return 0.0
    return length * math.log2(size)


def weak_tokens(tokens: Sequence[str]) -> list[int]:
    """The 1-based positions of the tokens below MIN_TOKEN_BITS."""
    return [i for i, token in enumerate(tokens, 1) if token_strength_bits(token) < MIN_TOKEN_BITS]


def token_fingerprint(token: str) -> str:
    """A short, stable, one-way name for an admin token: tells admins apart in the event log
    without storing anything that could be replayed (a prefix of its SHA-256)."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()[:FINGERPRINT_HEX_DIGITS]


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def require_admin() -> None:
    settings = deps.current().settings
    token = bearer_token()
    if token is None:
        raise Unauthorized(MSG_MISSING)
    if is_admin_token(settings.admin_tokens, token):
        g.admin_fingerprint = token_fingerprint(token)
        return
    if verify_user_token(settings.secret_key, token) is not None:
        raise Forbidden(MSG_USER_ON_ADMIN_API)
    raise Unauthorized(MSG_INVALID_ADMIN if settings.admin_tokens else MSG_ADMIN_AUTH_DISABLED)


def require_user() -> None:
    settings = deps.current().settings
    if not settings.secret_key:
        raise Unauthorized(MSG_USER_AUTH_DISABLED)
    token = bearer_token()
    if token is None:
        raise Unauthorized(MSG_MISSING)
    if is_admin_token(settings.admin_tokens, token):
        raise Forbidden(MSG_ADMIN_ON_USER_API)
    user_id = verify_user_token(settings.secret_key, token)
    if user_id is None:
        raise Unauthorized(MSG_INVALID_USER)
    g.user_id = user_id


def current_actor() -> str:
    """Who is calling, as the event log names them: "user:<id>" or "admin:<fingerprint>"."""
    fingerprint = g.get("admin_fingerprint")
    if isinstance(fingerprint, str):
        return f"admin:{fingerprint}"
    return f"user:{current_user_id()}"


def current_admin() -> AdminActor:
    """The admin calling, for the audit: named by their token's fingerprint, never the token."""
    fingerprint = g.get("admin_fingerprint")
    if not isinstance(fingerprint, str):
        raise RuntimeError("current_admin() outside an admin endpoint")
    return AdminActor(name=f"admin:{fingerprint}", credential=f"admin-token {fingerprint}")


def current_user_id() -> int:
    """The id of the authenticated user (set by `require_user`)."""
    user_id = g.get("user_id")
    if not isinstance(user_id, int):
        raise RuntimeError("current_user_id() outside a user endpoint")
    return user_id
