"""The client's retry policy (draconf.kube.API_RETRY): which failures are worth another try."""

import pytest
from urllib3.exceptions import MaxRetryError, NewConnectionError, SSLError

from draconf.kube import API_RETRY


def test_an_untrusted_certificate_is_not_tried_again():
    # It stays untrusted: retrying it only delays the one-line error by the whole backoff.
    with pytest.raises(MaxRetryError):
        API_RETRY.increment("GET", "/version", error=SSLError("certificate verify failed"))


def test_a_refused_connection_is_tried_again_a_few_times():
    refused = NewConnectionError(None, "Connection refused")
    retry = API_RETRY
    for _ in range(3):
        retry = retry.increment("GET", "/version", error=refused)
    with pytest.raises(MaxRetryError):
        retry.increment("GET", "/version", error=refused)
