"""The test project's own tests, run by Django's test runner (``manage.py test ledger``,
tests/test_django_app.py): queued.testing inside Django's TestCase, whose transaction holds
every push until ``captureOnCommitCallbacks(execute=True)`` runs it, as Django documents for
every on_commit callback."""
from django.db import transaction
from django.test import TestCase

import queued.testing
from ledger.jobs import REMEMBERED, Remember
from ledger.models import Order


class Boom(Exception):
    pass


class FakeMode(TestCase):
    def setUp(self):
        queued.testing.clear_all()
        self.addCleanup(queued.testing.fake().__exit__)

    def test_a_push_waits_for_the_commit_and_captured_callbacks_push_it(self):
        with self.captureOnCommitCallbacks(execute=True) as callbacks:
            order = Order.objects.create(ref="A")
            jid = Remember.perform_async(order.pk)
            self.assertEqual(Remember.jobs, [])
        self.assertEqual(len(callbacks), 1)
        self.assertEqual([(j["jid"], j["args"]) for j in Remember.jobs], [(jid, [order.pk])])

    def test_callbacks_captured_without_execute_push_nothing(self):
        with self.captureOnCommitCallbacks() as callbacks:
            Remember.perform_async("x")
        self.assertEqual((len(callbacks), Remember.jobs), (1, []))

    def test_after_commit_false_pushes_at_once(self):
        with self.captureOnCommitCallbacks() as callbacks:
            Remember.set(after_commit=False).perform_async("now")
            self.assertEqual([j["args"] for j in Remember.jobs], [["now"]])
        self.assertEqual(callbacks, [])

    def test_a_rolled_back_savepoint_drops_its_push(self):
        with self.captureOnCommitCallbacks(execute=True):
            try:
                with transaction.atomic():
                    Remember.perform_async("rolled back")
                    raise Boom()
            except Boom:
                pass
            Remember.perform_async("kept")
        self.assertEqual([j["args"] for j in Remember.jobs], [["kept"]])


class InlineMode(TestCase):
    def setUp(self):
        REMEMBERED.clear()
        self.addCleanup(queued.testing.inline().__exit__)

    def test_the_job_runs_at_the_commit(self):
        with self.captureOnCommitCallbacks(execute=True):
            Remember.perform_async("inline")
            self.assertEqual(REMEMBERED, [])
        self.assertEqual(REMEMBERED, ["inline"])
