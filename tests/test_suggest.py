"""queued.suggest: the near names a name that matched nothing is given (pure), and the message a
job of an unregistered class fails with (queued.job.Registry.missing)."""
from __future__ import annotations

import pytest

from queued.jobregistry import Registry
from queued.suggest import did_you_mean, near

CLASSES = ["Billing::InvoiceJob", "Billing::RefundJob", "Mailer::Deliver", "app.jobs.Resize",
           "ReportJob"]


@pytest.mark.parametrize("name, expected", [
    ("Billing::InvoiceJb", ["Billing::InvoiceJob"]),     # a typo
    ("billing::invoicejob", ["Billing::InvoiceJob"]),    # the case
    ("InvoiceJob", ["Billing::InvoiceJob"]),             # without its Ruby module
    ("Resize", ["app.jobs.Resize"]),                     # without its Python module
    ("Reportjbo", ["ReportJob"]),                        # two letters swapped
    ("ReprtJob", ["ReportJob"]),                         # one missing
    ("Billing::RefundJob", []),                          # (itself is not a suggestion)
    ("Sync::Shop", []),                                  # nothing near
    ("", []),
])
def test_near(name, expected):
    assert near(name, CLASSES) == expected


def test_a_short_name_is_near_at_one_typo():
    assert near("lwo", ["low", "default"]) == ["low"]
    assert near("defualt", ["default", "reports"]) == ["default"]
    assert near("hig", ["high", "low"]) == ["high"]


def test_did_you_mean_joins_several_and_stops_at_three():
    assert did_you_mean("Report", ["ReportJob", "Reports"]) == \
        " (did you mean Reports or ReportJob?)"  # (the nearest first)
    assert did_you_mean("job1", ["job2", "job3", "job4", "job5"]).count(",") == 1
    assert did_you_mean("x", []) == ""


def test_an_unregistered_class_names_the_near_ones_and_nothing_ruby_only():
    registry = Registry()
    for name in CLASSES:
        registry.register(type(name.split(":")[-1].split(".")[-1], (), {}), name)
    assert registry.missing("Billing::InvoiceJb") == (
        "no job class named 'Billing::InvoiceJb' is registered in this process "
        "(did you mean Billing::InvoiceJob?)")
    assert registry.missing("Sync::Shop") == (
        "no job class named 'Sync::Shop' is registered in this process")
