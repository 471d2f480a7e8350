"""The outcomes a check raises with its cause as data (draconf.errors): their classes' module is
``builtins``, as pytest's own outcomes are, so their doctests would not be collected."""

from __future__ import annotations

from draconf.errors import CheckFailed, NoVerdict


def test_a_check_failure_says_its_code_first_and_keeps_code_and_reason_apart():
    err = CheckFailed("the claim asks for 1 GPU, the manifest for 2", code="spec-altered")
    assert str(err) == "[spec-altered] the claim asks for 1 GPU, the manifest for 2"
    assert (err.code, err.reason, err.answers) == ("spec-altered", "the claim asks for 1 GPU, the manifest for 2", ())
    assert not err.pytrace  # a verdict, not a bug of the suite: no traceback


def test_without_a_code_the_message_is_the_reason():
    err = CheckFailed("no GPU")
    assert (str(err), err.code) == ("no GPU", None)


def test_no_verdict_leads_with_its_code_and_keeps_the_cause():
    blocked = NoVerdict("user ci-bot lacks create on pods", code="permission-denied")
    assert blocked.msg == "[permission-denied] user ci-bot lacks create on pods"
    assert (blocked.cause, blocked.code) == ("user ci-bot lacks create on pods", "permission-denied")
    assert NoVerdict("busy").msg == "busy"
