from django.db import models


class Item(models.Model):
    """One row per job of the 1,000-job test: which worker and which database backend ran
    it last, and how many times it ran."""
    n = models.IntegerField(unique=True)
    runs = models.IntegerField(default=0)
    worker_pid = models.IntegerField(null=True)
    backend_pid = models.IntegerField(null=True)
    jid = models.CharField(max_length=24, default="")


class Order(models.Model):
    """A row a job is pushed for inside the transaction that creates it."""
    ref = models.CharField(max_length=40)
