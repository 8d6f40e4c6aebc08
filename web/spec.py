"""The HTTP contract at work: request validation, response serialisation and the OpenAPI
3.1 document (``GET /openapi.json``), all from the models of web/request_models.py and
web/response_models.py, through SpecTree.

An endpoint says what it reads and answers once::

    @bp.post("/startAssessment")
    @user_operation(Record, 404, 409)
    def start_assessment(json: RecordIdRequest) -> Reply:
        \"\"\"Summary line of the document.

        Its description (every paragraph after the first).\"\"\"

SpecTree reads `json` / `query` from the view's annotations, validates the request against
them before the view runs and documents them; the first argument of the operation is the
model of the success's `data`, which serialises the view's result (a service view, read by
attribute) and documents it; the numbers are the error statuses the endpoint may answer
beside those every endpoint of its kind may (credentials, bad input, a server down).

Three things differ from SpecTree's stock Flask plugin (`_Plugin`): a body is read by
`read_json_object` (415 for another content type, 413 over the cap even without a
Content-Length, 1001 for malformed JSON or another JSON value than an object); a query
parameter given twice is refused rather than folded; and a validation error becomes the
1001 envelope in one place, `_Plugin.request_validation`, in the words of web/fields.py,
before SpecTree could build its own answer from the error (which carries the input: a
lone surrogate in it cannot be encoded, and the answer would be a 500).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from http import HTTPStatus
from typing import Any, TypeVar

from flask import Blueprint, Flask, Request, Response, current_app, jsonify, make_response, request
from pydantic import BaseModel, ValidationError
from spectree import Response as Responses
from spectree import SecurityScheme, SecuritySchemeData, SpecTree, Tag
from spectree.model_adapter.pydantic_adapter import PydanticModelAdapter
from spectree.models import SecureType
from spectree.plugins.base import Context
from spectree.plugins.flask_plugin import FlaskPlugin
from spectree.plugins.werkzeug_utils import flask_response_unpack
from werkzeug.exceptions import RequestEntityTooLarge, UnsupportedMediaType

from services.domain.errors import ParamError
from web import deps
from web.errors import RETRY_AFTER_S
from web.fields import MAX_CONTENT_LENGTH, ZONE, error_message, query_values
from web.response_models import Error, Ok

F = TypeVar("F", bound=Callable[..., Any])

#: What a view returns: `success(...)`, the envelope its operation's model reads (or a
#: Response it wrote itself, e.g. a probe's 503). No forward reference in it: SpecTree
#: resolves the views' annotations.
Reply = Response | dict[str, object] | tuple[dict[str, object], int]

# -- reading a request ------------------------------------------------------------------


def refuse_oversized_body() -> None:
    """Before every view (`before_request`): a body over MAX_CONTENT_LENGTH is 413 whether the
    view reads it or not; the web worker then closes the connection (web/gunicorn_worker.py)."""
    if request.content_length is not None:
        if request.content_length > MAX_CONTENT_LENGTH:
            raise RequestEntityTooLarge()
        return
    request_body(request)


def request_body(req: Request) -> bytes:
    """The body, read once and kept (413 over the cap, with or without a Content-Length)."""
    raw = req.get_data(cache=True)  # raises 413 when Content-Length is beyond MAX_CONTENT_LENGTH
    if req.content_length is None and len(raw) >= MAX_CONTENT_LENGTH and _more_body(req):
        # A chunked body has no Content-Length: Werkzeug stops reading at the cap and
        # hands over the truncated part without a word (it would fail as bad JSON, 400).
        raise RequestEntityTooLarge()
    return raw


def read_json_object(req: Request) -> dict[str, Any]:
    """The request body as a JSON object (415 for another content type, 1001 if malformed)."""
    if not req.is_json:
        raise UnsupportedMediaType()
    raw = request_body(req)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: "[[[[...", deeper than the stack
        raise ParamError("请求体不是合法的 JSON") from None
    if not isinstance(data, dict):
        raise ParamError("请求体必须是 JSON 对象")
    return data


def _more_body(req: Request) -> bool:
    """Whether the server's input stream holds a byte beyond what was read."""
    stream = req.environ.get("wsgi.input")
    return stream is not None and bool(stream.read(1))


@cache
def _parameter_names(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(field.alias or name for name, field in model.model_fields.items())


@cache
def _reads_times(model: type[BaseModel]) -> bool:
    return "date-time" in json.dumps(model.model_json_schema())


def _context(*models: type[BaseModel] | None) -> dict[str, object] | None:
    """What the validators may need: the zone of a time given without an offset (only
    looked up for a model that reads times)."""
    if any(model is not None and _reads_times(model) for model in models):
        return {ZONE: deps.current().settings.admin_zone}
    return None


class _Adapter(PydanticModelAdapter):
    def dump_json(self, value: Any) -> bytes:
        # A newline at the end, as Flask's jsonify writes every other body of the API.
        return super().dump_json(value) + b"\n"


class _Plugin(FlaskPlugin):
    def request_validation(  # noqa: PLR0917 (SpecTree's signature)
        self, request: Request, query: Any, json: Any, form: Any, headers: Any, cookies: Any
    ) -> None:
        context = _context(query, json)
        try:
            request.context = Context(  # type: ignore[attr-defined]
                query.model_validate(query_values(request.args, _parameter_names(query)), context=context)
                if query
                else None,
                json.model_validate(read_json_object(request), context=context) if json else None,
                None,
                None,
                None,
            )
        except ValidationError as error:
            raise ParamError(error_message(error)) from None

    def validate_response(
        self, resp: Any, resp_model: Responses | None, skip_validation: bool, force_resp_serialize: bool
    ) -> tuple[Response, Exception | None]:
        """The success's envelope, written by its model: `success(...)` gives the data, the
        model reads them and writes the body once (SpecTree's own would go through
        `make_response` twice). A Response the view wrote itself (a probe's 503) goes as it is."""
        payload, status, headers = flask_response_unpack(resp)
        model = resp_model.find_model(status) if resp_model is not None else None
        if model is None or isinstance(payload, Response):
            return make_response(resp), None
        try:
            body = self.model_adapter.dump_json(self.model_adapter.validate_obj(model, payload))
        except ValidationError as error:
            return Response(status=500), error
        return current_app.response_class(
            body, status=status, headers=headers, mimetype="application/json"
        ), None


def _broken_response(req: Any, resp: Any, error: Exception | None, instance: Any, adapter: Any) -> None:
    """A view's result its model refuses is a bug: the generic 500, the details in the log."""
    if error is not None:
        raise error


# -- the document's parts ---------------------------------------------------------------

#: Document and validator; the views register with it by decorating themselves.
api = SpecTree(
    "flask",
    backend=_Plugin,
    # SpecTree types the adapter with its error class as a bare Exception.
    model_adapter=_Adapter(),  # type: ignore[arg-type]
    after=_broken_response,
    validation_error_status=400,
    validation_error_model=Error,
    naming_strategy=lambda model: model.__name__,
    nested_naming_strategy=lambda parent, child: child,
    mode="strict",
    title="mi-assessment API",
    version="1.0.0",
    description=(
        'Every response is the envelope {"code", "message", "data"}: code 0 and message "success" '
        "on success. JSON fields are camelCase; datetimes ISO-8601 with their offset. Bodies are "
        f"JSON objects sent as application/json, at most {MAX_CONTENT_LENGTH} bytes; unknown "
        "fields are ignored; ids are integers in 1..2^63-1 (booleans, floats and strings are "
        "rejected)."
    ),
    security_schemes=[
        SecurityScheme(
            name="userToken",
            data=SecuritySchemeData(
                type=SecureType.HTTP,
                scheme="bearer",
                description="a user token, from `flask --app web issue-user-token USER_ID`",
            ),
        ),
        SecurityScheme(
            name="adminToken",
            data=SecuritySchemeData(
                type=SecureType.HTTP, scheme="bearer", description="one of the server's ADMIN_TOKENS"
            ),
        ),
    ],
)

ASSESSMENT = Tag(name="assessment", description="the mini-program's user API (user token)")
ADMIN = Tag(name="admin", description="the admin API (admin token)")
HEALTH = Tag(name="health", description="probes, no authentication")
META = Tag(name="meta", description="this document")
REPORT = Tag(name="report", description="the report as a page")

#: What each error status means, in the document.
ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "1001: bad input (wrong type, out of range, malformed JSON, duplicate ids, ...)",
    401: "missing or invalid credential (code 401)",
    403: "a valid credential of the other kind (code 403)",
    404: "3241: the record does not exist, is soft-deleted or is another user's",
    409: "2005: the record's status does not allow the operation",
    413: f"body over {MAX_CONTENT_LENGTH} bytes, with or without Content-Length (code 413)",
    415: "body not sent as application/json (code 415)",
    503: "5003: a server the call needs is unreachable: PostgreSQL, or Redis for the report queue "
    f"and the autosave store; Retry-After: {RETRY_AFTER_S}",
}
AUTH_ERRORS = (401, 403)
BODY_ERRORS = (400, 413, 415)


#: Media types of the routes that answer something else than the envelope, by view.
_MEDIA: dict[Callable[..., Any], dict[int, tuple[str, ...]]] = {}
#: The query parameters such a view reads by itself (name: description), by view.
_QUERY: dict[Callable[..., Any], Mapping[str, str]] = {}


def responses(
    data: Any,
    errors: Iterable[int] = (),
    *,
    status: int = 200,
    others: Mapping[int, tuple[Any, str]] | None = None,
) -> Responses:
    """A success with `data` (in `Ok`) and these errors; `others`: other answers, by status
    (their model, or None for a body that is no JSON, and their description)."""
    answers: dict[str, Any] = {f"HTTP_{status}": (Ok[data], "success")}
    for code in sorted(set(errors)):
        answers[f"HTTP_{code}"] = (Error, ERROR_DESCRIPTIONS.get(code) or HTTPStatus(code).phrase)
    for code, answer in (others or {}).items():
        answers[f"HTTP_{code}"] = answer
    return Responses(**answers)


def operation(
    data: Any,
    *errors: int,
    tag: Tag,
    security: str | None = None,
    status: int = 200,
    others: Mapping[int, tuple[Any, str]] | None = None,
) -> Callable[[F], F]:
    """Validate and document a view of `tag`: see the module's docstring. Bodies and query
    strings add their refusals by themselves; an authenticated endpoint reads the database."""

    def decorate(view: F) -> F:
        reads = inspect.signature(view).parameters
        statuses = set(errors)
        if "json" in reads:
            statuses.update(BODY_ERRORS)
        if "query" in reads:
            statuses.add(400)
        if security is not None:
            statuses.update((*AUTH_ERRORS, 503))
        validate = api.validate(
            resp=responses(data, statuses, status=status, others=others),
            tags=[tag],
            security={security: []} if security else None,
            force_resp_serialize=True,
        )
        return validate(view)  # type: ignore[no-any-return]

    return decorate


def user_operation(data: Any, *errors: int, status: int = 200) -> Callable[[F], F]:
    return operation(data, *errors, tag=ASSESSMENT, security="userToken", status=status)


def admin_operation(data: Any, *errors: int, status: int = 200) -> Callable[[F], F]:
    return operation(data, *errors, tag=ADMIN, security="adminToken", status=status)


def media_operation(
    answers: Mapping[int, tuple[str, tuple[str, ...]]],
    *,
    tag: Tag,
    security: str | None = None,
    parameters: Mapping[str, str] | None = None,
    query: Mapping[str, str] | None = None,
) -> Callable[[F], F]:
    """Document a view that answers other media than the envelope (a page, an icon, the
    metrics): `answers` maps a status to its description and media types (an error with no
    media type is the JSON envelope); `parameters` describes the path's, `query` the optional
    query parameters the view reads itself."""

    def decorate(view: F) -> F:
        _MEDIA[view] = {code: media for code, (_, media) in answers.items() if media}
        _QUERY[view] = query or {}
        documented = {
            f"HTTP_{code}": (None if media else Error, description)
            for code, (description, media) in answers.items()
        }
        validate = api.validate(
            resp=Responses(**documented),
            tags=[tag],
            security={security: []} if security else None,
            path_parameter_descriptions=parameters,
        )
        return validate(view)  # type: ignore[no-any-return]

    return decorate


def success(data: object = None, status: int = 200) -> Reply:
    """A success: the operation's model reads `data` (a service view, a dict of them)."""
    envelope: dict[str, object] = {"code": 0, "message": "success", "data": data}
    return envelope if status == 200 else (envelope, status)


# -- the document -----------------------------------------------------------------------

bp = Blueprint("openapi", __name__)


def document(app: Flask | None = None) -> dict[str, Any]:
    """The OpenAPI document of `app` (by default the app being served): SpecTree's, from the
    decorated views and their models, completed with what SpecTree cannot state (computed
    once per process: every app of the process has the same views)."""
    if app is not None:
        with app.app_context():
            return document()
    return _completed(api.spec)


_RETRY_AFTER = {
    "Retry-After": {
        "description": f"seconds to wait before trying again ({RETRY_AFTER_S})",
        "schema": {"type": "integer", "minimum": 1},
    }
}


#: The shared error answers, under components/responses.
ERROR_RESPONSE_NAMES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    503: "ServiceUnavailable",
}
_ERROR_CODES = {str(code) for code in ERROR_RESPONSE_NAMES}


def _error_response(code: int, *, headers: bool = True) -> dict[str, Any]:
    """An error answer as SpecTree writes it (`responses`), with Retry-After for a 503."""
    answer: dict[str, Any] = {
        "description": ERROR_DESCRIPTIONS[code],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    if headers and code == 503:
        answer["headers"] = _RETRY_AFTER
    return answer


#: The documents completed already (SpecTree makes one per instance, then keeps it).
_COMPLETED: set[int] = set()


def _completed(spec: dict[str, Any]) -> dict[str, Any]:
    if id(spec) in _COMPLETED:
        return spec
    views = current_app.view_functions
    for rule in current_app.url_map.iter_rules():
        view = _unwrapped(views[rule.endpoint])
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        for method, op in spec["paths"].get(path, {}).items():
            if method.upper() not in (rule.methods or ()):
                continue
            for code, types in _MEDIA.get(view, {}).items():
                op["responses"][str(code)]["content"] = {media_type: {} for media_type in types}
            for name, description in _QUERY.get(view, {}).items():
                op["parameters"].append(
                    {
                        "name": name,
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string"},
                        "description": description,
                    }
                )
    spec["components"]["responses"] = {
        name: _error_response(code) for code, name in ERROR_RESPONSE_NAMES.items()
    }
    for item in spec["paths"].values():
        for op in item.values():
            reads = "requestBody" in op or any(p["in"] == "query" for p in op.get("parameters", ()))
            if not reads:
                # SpecTree adds the validation error to every operation; here nothing is read.
                op["responses"].pop("400", None)
            for code, answer in op["responses"].items():
                if code in _ERROR_CODES and answer == _error_response(int(code), headers=False):
                    op["responses"][code] = {
                        "$ref": f"#/components/responses/{ERROR_RESPONSE_NAMES[int(code)]}"
                    }
                elif code == "503":
                    answer["headers"] = _RETRY_AFTER
    # SpecTree leaves out the routes of a blueprint named "openapi": this one.
    spec["paths"]["/openapi.json"] = {
        "get": {
            "summary": openapi_json.__doc__,
            "tags": [META.name],
            "responses": {
                "200": {"description": "the OpenAPI document", "content": {"application/json": {}}}
            },
        }
    }
    _COMPLETED.add(id(spec))
    return spec


def _unwrapped(view: Callable[..., Any]) -> Callable[..., Any]:
    while hasattr(view, "__wrapped__"):
        view = view.__wrapped__
    return view


@bp.get("/openapi.json")
def openapi_json() -> Response:
    """This document"""
    return jsonify(document())


__all__ = [
    "ADMIN",
    "ASSESSMENT",
    "HEALTH",
    "META",
    "REPORT",
    "admin_operation",
    "api",
    "document",
    "operation",
    "read_json_object",
    "success",
    "user_operation",
]
