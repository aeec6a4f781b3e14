"""Paging: a page of rows at a time, PAGE_SIZE by default, the chooser's sizes by ``?size=``
(every list carries it in its links and forms), and the query's numbers read without an
error page for bad input (a query string is user input)."""
from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

PAGE_SIZE = 25
#: The largest cursor ZSCAN and SSCAN take (an unsigned 64-bit number; a larger one was a 500).
CURSOR_MAX = 2**64 - 1
#: The chooser's sizes (Sidekiq's Web UI offers 25 and up; 500 for a long look at a set).
SIZES = (25, 50, 100, 500)


def int_param(request: Request, name: str, default: int = 0, low: int = 0,
              high: int = 10**9) -> int:
    try:
        value = int(request.query_params.get(name, default))
    except ValueError:
        value = default
    return min(max(value, low), high)


def page_size(request: Request) -> int:
    """The chosen size, one of SIZES; anything else is PAGE_SIZE."""
    size = int_param(request, "size", PAGE_SIZE)
    return size if size in SIZES else PAGE_SIZE


@dataclass
class Pager:
    page: int
    size: int
    total: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size

    @property
    def pages(self) -> int:
        return max((self.total + self.size - 1) // self.size, 1)

    @property
    def prev(self) -> int | None:
        return self.page - 1 if self.page > 1 else None

    @property
    def next(self) -> int | None:
        return self.page + 1 if self.page < self.pages else None

    @property
    def first_row(self) -> int:
        return min(self.offset + 1, self.total)

    @property
    def last_row(self) -> int:
        return min(self.offset + self.size, self.total)

    def query(self, **more) -> dict:
        """What a link to another page of this list carries: the size unless the default."""
        return {**({"size": self.size} if self.size != PAGE_SIZE else {}), **more}


def pager(request: Request, total: int, size: int | None = None) -> Pager:
    size = size or page_size(request)
    pages = max((total + size - 1) // size, 1)
    return Pager(int_param(request, "page", 1, 1, pages), size, total)
