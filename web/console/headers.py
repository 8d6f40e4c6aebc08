"""The headers of every answer under /admin: what a browser may load, frame, send and keep.

The pages load their style sheet and script from this origin only and no inline script
(Content-Security-Policy; inline styles are allowed, as on the report page), cannot be
framed (frame-ancestors and X-Frame-Options: no clickjacking of the console's buttons),
are not sniffed into another type, send no Referer (a record id or filter leaves nothing
behind) and are never stored by a browser or a proxy (no-store: a page of records or
dead letters does not outlive the session on a shared computer). Applied by path, so the
error pages of /admin URLs that no view matched get them too.
"""

from __future__ import annotations

from flask import Flask, Response, request

PREFIX = "/admin"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
#: Pages and errors are never stored; the style sheet and script may be cached as usual.
NO_STORE = "no-store"
STATIC_ENDPOINT = "console.static"


def console_headers(response: Response) -> Response:
    path = request.path
    if path != PREFIX and not path.startswith(PREFIX + "/"):
        return response
    for name, value in HEADERS.items():
        response.headers[name] = value
    if request.endpoint != STATIC_ENDPOINT:
        response.headers["Cache-Control"] = NO_STORE
    return response


def install(app: Flask) -> None:
    app.after_request(console_headers)
