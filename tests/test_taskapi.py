"""queued.admin.taskapi.TaskAPI, the read-only JSON API over tasks, served by a real WSGI
server (wsgiref, on a free loopback port) and read with urllib, against a real Redis."""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from queued.admin.taskapi import TaskAPI
from queued.task import Task

from test_ctl_tasks import Register, a_task


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def api(producer):
    server = make_server("127.0.0.1", 0, TaskAPI(producer), handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join()


def get(url: str, method: str = "GET") -> tuple[int, object]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method)) as resp:
            body = resp.read()
            return resp.status, json.loads(body) if body else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_tasks_progress_and_its_failed_jobs(api, r):
    task, jids = a_task(r)
    status, doc = get(f"{api}/tasks/{task.id}")
    assert status == 200
    assert (doc["id"], doc["state"], doc["progress"]["total"], doc["progress"]["failed"]) == \
        (task.id, "running", 4, 1)
    status, page = get(f"{api}/tasks/{task.id}/jobs?state=failed")
    assert status == 200 and page["cursor"] == 0
    assert [(j["jid"], j["error"]["message"]) for j in page["jobs"]] == \
        [(jids[1], "price below cost <b>")]
    status, page = get(f"{api}/tasks/{task.id}/jobs?state=retry")
    assert [j["messages"][0]["text"] for j in page["jobs"]] == ["tried the shop API"]


def test_pages_of_a_large_state_cover_every_job_once(api, producer):
    task = Task("many")
    with task:
        jids = Register.perform_bulk([[i] for i in range(1200)])
    seen, cursor = [], 0
    while True:
        status, page = get(f"{api}/tasks/{task.id}/jobs?state=enqueued&count=500&cursor={cursor}")
        assert status == 200
        seen += [j["jid"] for j in page["jobs"]]
        cursor = page["cursor"]
        if not cursor:
            break
    assert sorted(set(seen)) == sorted(jids)


def test_the_list_of_tasks_newest_first(api, r):
    first, _ = a_task(r, "first")
    second, _ = a_task(r, "second")
    status, listed = get(f"{api}/tasks")
    assert status == 200 and [t["description"] for t in listed] == ["second", "first"]


@pytest.mark.parametrize("path, status, error", [
    ("/tasks/nosuch", 404, "no task nosuch"),
    ("/elsewhere", 404, "no such path"),
    ("/tasks/{tid}/jobs?state=lost", 400, "state must be one of"),
    ("/tasks/{tid}/jobs?count=9999", 400, "count must be between 1 and 500"),
    ("/tasks/{tid}/jobs?cursor=x", 400, "cursor must be a whole number"),
])
def test_bad_requests_get_a_json_error(api, r, path, status, error):
    task, _ = a_task(r)
    got, doc = get(api + path.format(tid=task.id))
    assert got == status and error in doc["error"]


def test_it_is_read_only(api, r):
    task, _ = a_task(r)
    status, doc = get(f"{api}/tasks/{task.id}", method="POST")
    assert status == 405 and doc == {"error": "read-only: GET only"}
