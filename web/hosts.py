"""Which client and which host the app believes: ProxyFix for proxies, no absolute URL from Host.

* TRUSTED_PROXIES = N (default 0): Werkzeug's ProxyFix takes the client address from the
  N-th last entry of X-Forwarded-For and the scheme from X-Forwarded-Proto, as N proxies
  in front append them (nginx: ``proxy_set_header X-Forwarded-For
  $proxy_add_x_forwarded_for; proxy_set_header X-Forwarded-Proto $scheme;``). With 0 the
  headers are ignored: whoever can reach the port directly cannot choose the address the
  console's sign-in limit counts. X-Forwarded-Host and -Prefix are never trusted.
* The Host header names no URL the app hands out: a redirect's Location that Werkzeug made
  absolute from it (the slash redirect of ``/admin`` -> ``/admin/``) is made relative, so
  ``Host: evil.example`` cannot send a browser elsewhere. Every other link the app builds
  is relative already (``url_for`` without ``_external``).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from flask import Flask, Response, request
from werkzeug.middleware.proxy_fix import ProxyFix


def relative_location(response: Response) -> Response:
    location = response.headers.get("Location")
    if location:
        parts = urlsplit(location)
        if parts.scheme or parts.netloc:
            if parts.netloc.lower() != request.host.lower():
                return response  # not made from this request's Host: the app's own choice
            response.headers["Location"] = urlunsplit(
                ("", "", parts.path or "/", parts.query, parts.fragment)
            )
    return response


def install(app: Flask, *, trusted_proxies: int) -> None:
    if trusted_proxies > 0:
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=trusted_proxies, x_proto=trusted_proxies, x_host=0, x_port=0, x_prefix=0
        )
    app.after_request(relative_location)
