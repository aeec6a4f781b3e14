"""Near names for a name that matched nothing: "did you mean Billing::InvoiceJob?" (issue 20).
Used by the worker for a job whose class is not registered and by queuedctl for a queue or set
that does not exist; pure, no Redis.

A name is near when it is the same but for case, when its last part is the same (``InvoiceJob``
for ``Billing::InvoiceJob``, ``app.jobs.Invoice`` for ``Invoice``: Ruby's and Python's
separators alike), when it is one typo away, or when it is spelled nearly the same (difflib's
ratio, as Python's own "Did you mean" for a mistyped attribute does).
"""
from __future__ import annotations

import difflib
import re
from typing import Iterable

#: How alike two spellings must be (difflib's ratio, 0 to 1). Short names are near at one
#: typo too (a letter wrong, missing, added, or two swapped: "lwo" for "low", whose ratio is
#: only 0.67).
CUTOFF = 0.75
#: At most this many suggestions.
LIMIT = 3

_SEPARATORS = re.compile(r"::|\.")


def _last(name: str) -> str:
    return _SEPARATORS.split(name)[-1].lower()


def near(name: str, candidates: Iterable[str], limit: int = LIMIT) -> list[str]:
    """The candidates nearest ``name`` (never ``name`` itself), the nearest first."""
    pool = sorted({c for c in candidates if c and c != name})
    lowered = name.lower()
    exact = [c for c in pool if c.lower() == lowered or _last(c) == _last(name)
             or _one_typo(c.lower(), lowered)]
    by_case = {c.lower(): c for c in pool}
    spelled = [by_case[c] for c in difflib.get_close_matches(lowered, list(by_case), limit,
                                                             CUTOFF)]
    return list(dict.fromkeys([*exact, *spelled]))[:limit]


def _one_typo(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by one letter changed, added or removed, or two swapped."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    if len(a) == len(b):
        swapped = a[i + 2:] == b[i + 2:] and a[i:i + 2] == b[i:i + 2][::-1]
        return a[i + 1:] == b[i + 1:] or swapped
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    return longer[i + 1:] == shorter[i:]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean X?)``, `` (did you mean X or Y?)``, or "" when nothing is near."""
    found = near(name, candidates)
    if not found:
        return ""
    if len(found) == 1:
        return f" (did you mean {found[0]}?)"
    return f" (did you mean {', '.join(found[:-1])} or {found[-1]}?)"
