"""The console's blueprint and CSRF protection, apart so that every page module can import them."""

from __future__ import annotations

from flask import Blueprint
from flask_wtf.csrf import CSRFProtect

bp = Blueprint(
    "console",
    __name__,
    url_prefix="/admin",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)

#: Checks only where the console's guard calls `csrf.protect()` (WTF_CSRF_CHECK_DEFAULT is
#: off): the JSON APIs take bearer tokens, which a browser never sends by itself.
csrf = CSRFProtect()
