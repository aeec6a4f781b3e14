"""What keeps the dashboard safe to open: the Host check, CSRF tokens on every POST, security
headers (a Content-Security-Policy without inline script or style), and optional HTTP basic
auth.

The Host check comes first (issue 16): DNS rebinding makes a page the operator visits
same-origin with ``127.0.0.1:7433`` (the attacker's name resolves to loopback), so it could
read a page, its CSRF token and cookie included, and post. Such a request carries the
attacker's name in ``Host``: a request naming a host the dashboard is not served under is
refused before any page, token or cookie.

CSRF is the signed double-submit pattern: each browser gets a random token in an HttpOnly,
SameSite=Strict cookie; every form carries the token signed with the app's secret
(itsdangerous); a POST is acted on only when the form's token verifies and equals the
cookie's. Another site can make a browser send the cookie, but cannot read it or sign one.
"""
from __future__ import annotations

import base64
import binascii
import secrets

import itsdangerous
from starlette.datastructures import FormData, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..hosts import AllowedHosts

COOKIE = "queued_csrf"
FIELD = "csrf_token"

#: Scripts, styles, images and fetches from this origin only; no inline code, no framing.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
           "x-frame-options": "DENY", "referrer-policy": "same-origin"}


class HostCheck:
    """Refuses (400, plain text) a request whose ``Host`` is not allowed."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts):
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = HTTPConnection(scope).headers.get("host", "")
            if not self.allowed.allows(host, scope.get("scheme", "http")):
                shown = "".join(c if c.isprintable() else "?" for c in host[:200])
                response = PlainTextResponse(
                    f"queued: this dashboard does not answer to host {shown} "
                    "(queuedctl web --allow-host)\n", 400)
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


class Csrf:
    def __init__(self, secret: str | bytes):
        self.signer = itsdangerous.URLSafeSerializer(secret, salt="queued-web-csrf")

    def token(self, request: Request) -> str:
        """The signed token the forms of this page carry."""
        return self.signer.dumps(request.scope["queued_csrf"])

    async def form(self, request: Request) -> FormData:
        """The POSTed form, once its token is checked; 403 otherwise (nothing is done)."""
        form = await request.form()
        cookie = request.cookies.get(COOKIE, "")
        try:
            raw = self.signer.loads(str(form.get(FIELD, "")))
        except itsdangerous.BadSignature:
            raw = None
        if not cookie or not isinstance(raw, str) or not secrets.compare_digest(raw, cookie):
            raise HTTPException(403, "CSRF token missing or invalid: reload the page and retry")
        return form

    def header(self, request: Request) -> None:
        """A GET that writes (a question's count keeps a copy of the set for its answer): its
        page's token in the ``x-csrf-token`` header, matching the cookie; 403 otherwise. A
        cross-site ``<img>`` or link carries neither, so no other site can make the dashboard
        copy a 100,000-job set into Redis's memory for five minutes."""
        cookie = request.cookies.get(COOKIE, "")
        try:
            raw = self.signer.loads(request.headers.get("x-csrf-token", ""))
        except itsdangerous.BadSignature:
            raw = None
        if not cookie or not isinstance(raw, str) or not secrets.compare_digest(raw, cookie):
            raise HTTPException(403, "CSRF token missing or invalid: reload the page and retry")


class CsrfCookie:
    """Gives a browser its token cookie on its first visit (and puts the token in the scope
    for the templates)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        have = HTTPConnection(scope).cookies.get(COOKIE)
        scope["queued_csrf"] = have or secrets.token_urlsafe(32)
        if have:
            return await self.app(scope, receive, send)
        path = scope.get("root_path") or "/"

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append(
                    "set-cookie", f"{COOKIE}={scope['queued_csrf']}; Path={path}; HttpOnly; "
                                  f"SameSite=Strict")
            await send(message)

        await self.app(scope, receive, send_with_cookie)


class SecurityHeaders:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class BasicAuth:
    """``--auth user:pass``: every request needs these credentials (use it over TLS, or on
    loopback behind a proxy; see docs/dashboard.md for auth in front)."""

    def __init__(self, app: ASGIApp, credentials: str):
        user, sep, password = credentials.partition(":")
        if not sep or not user:
            raise ValueError("auth must be USER:PASSWORD")
        self.app = app
        self.expected = f"{user}:{password}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._allowed(HTTPConnection(scope)):
            response = PlainTextResponse("authentication required\n", 401, headers={
                "www-authenticate": 'Basic realm="queued", charset="UTF-8"'})
            return await response(scope, receive, send)
        await self.app(scope, receive, send)

    def _allowed(self, conn: HTTPConnection) -> bool:
        scheme, _, value = conn.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return secrets.compare_digest(given, self.expected)
