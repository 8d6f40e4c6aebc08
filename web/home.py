"""`/`: what this server is and where to go (the banner's URL opens here), and `/favicon.ico`.

A browser gets a short page with links (the console, the API's description, the probes);
a client that asks for JSON gets the same in the envelope. No credential: it says nothing
an anonymous visitor could not find in the OpenAPI document.
"""

from __future__ import annotations

from importlib import resources

from flask import Blueprint, Response, render_template, request, url_for

from web.envelope import ok
from web.spec import META, media_operation

bp = Blueprint("home", __name__, template_folder="templates")

#: Where to go, in the order shown: path and what it is.
LINKS = (
    ("/admin/", "管理后台（队列、记录、死信、审计）"),
    ("/openapi.json", "API 描述（OpenAPI 3.1）"),
    ("/readyz", "就绪检查（数据库、Redis）"),
    ("/healthz/workers", "后台进程存活情况"),
)


@bp.get("/")
@media_operation(
    {200: ("the page, or the links as JSON (the envelope)", ("text/html", "application/json"))}, tag=META
)
def home() -> Response | str:
    """What this server is, and links to the console, this document and the probes

    An HTML page for a browser; the envelope (data: service, links) for JSON.
    """
    accepted = request.accept_mimetypes
    if accepted.best_match(["text/html", "application/json"]) == "application/json":
        return ok({"service": "mi-assessment", "links": {path: text for path, text in LINKS}})
    return render_template("home.html", links=LINKS, icon=url_for("console.static", filename="favicon.svg"))


@bp.get("/favicon.ico")
@media_operation({200: ("the icon", ("image/svg+xml",))}, tag=META)
def favicon() -> Response:
    """The site's icon (SVG)

    The console's icon (browsers ask for /favicon.ico by themselves).
    """
    icon = resources.files("web.console").joinpath("static", "favicon.svg").read_bytes()
    return Response(icon, mimetype="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})
