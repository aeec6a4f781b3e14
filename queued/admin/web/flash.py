"""What an action says it did ("retried 400 jobs"), carried from the POST to the page the browser
is sent back to, in a cookie the server signs (issue 20).

It was a ``?msg=`` in the redirect: anyone could send an operator a link to the dashboard
saying "all jobs retried, nothing to do" or "run ./fix.sh", in the dashboard's own voice. Now
the text shown is only one this server wrote, for this browser: signed with the app's secret
(itsdangerous, as the CSRF tokens), bound to the browser's CSRF cookie, a minute or two old at
most, and shown once (the page that shows it deletes the cookie). Nothing in a URL is shown as
a message.
"""
from __future__ import annotations

import itsdangerous
from starlette.requests import Request
from starlette.responses import Response

from .filters import visible

COOKIE = "queued_flash"
#: Seconds a message waits for its page (the redirect is followed at once).
MAX_AGE = 120
#: Characters kept, cut in the middle (a queue's name may be longer than a cookie holds:
#: about 4 KB, which the signed value must also fit in).
MAX_TEXT = 1000
MAX_COOKIE = 3800


class Flash:
    def __init__(self, secret: str | bytes):
        self.signer = itsdangerous.URLSafeTimedSerializer(secret, salt="queued-web-flash")

    def put(self, response: Response, request: Request, text: str) -> None:
        """Have the next page of this browser say ``text``."""
        text, limit = visible(text), MAX_TEXT  # (a name that is not UTF-8 as its \xff bytes)
        while True:
            value = self.signer.dumps({"m": shorten(text, limit),
                                       "b": request.scope["queued_csrf"]})
            if len(value) <= MAX_COOKIE or limit < 20:
                break
            limit //= 2  # (text that JSON escapes, \uXXXX, takes six bytes a character)
        response.set_cookie(COOKIE, value, max_age=MAX_AGE, path=_path(request),
                            httponly=True, samesite="strict")

    def take(self, request: Request) -> str:
        """The message this server left for this browser, or "" (none, forged, another
        browser's, too old)."""
        value = request.cookies.get(COOKIE)
        if not value:
            return ""
        try:
            doc = self.signer.loads(value, max_age=MAX_AGE)
        except itsdangerous.BadData:
            return ""
        if not isinstance(doc, dict) or doc.get("b") != request.scope.get("queued_csrf"):
            return ""
        text = doc.get("m")
        return text if isinstance(text, str) else ""

    @staticmethod
    def clear(response: Response, request: Request) -> None:
        """Once shown (or refused), the message is gone: a reload does not say it again."""
        if request.cookies.get(COOKIE):
            response.delete_cookie(COOKIE, path=_path(request), httponly=True,
                                   samesite="strict")


def shorten(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` in ``limit`` characters at most, its middle left out: both ends say what was
    done ("cleared mailers-...-eu: 12 jobs deleted")."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    tail = limit - 1 - head
    return text[:head] + "…" + text[len(text) - tail:]


def _path(request: Request) -> str:
    # The CSRF cookie's path (security.CsrfCookie): the app's mount point.
    return request.scope.get("root_path") or "/"
