"""What a missing feature means for a run: skip, fail (feature-disabled) or no verdict."""

import pytest

from draconf.answers import ServerAnswer
from draconf.capabilities import Capability, refused_probe
from draconf.errors import DraconfError, NoVerdict
from draconf.expectations import FEATURE_DISABLED, Expectations, FeatureMissing

DROPPED = Capability("prioritized-list (firstAvailable)", False,
                     "the API server dropped `spec.devices.requests.0.firstAvailable.1.name` from a dry-run create")
REFUSED = refused_probe("admin access (adminAccess)", "a claim using it",
                        ServerAnswer(403, 'admission webhook "deny-claims.example.com" denied the request: no'))


def test_a_ga_feature_missing_fails_with_feature_disabled():
    with pytest.raises(FeatureMissing) as err:
        Expectations.of("v1.36.3").require("prioritized-list", DROPPED)
    assert err.value.code == FEATURE_DISABLED and str(err.value).startswith("[feature-disabled] ")
    assert "GA since Kubernetes 1.36 (DRAPrioritizedList)" in str(err.value)
    assert "dropped" in str(err.value)


def test_the_same_feature_before_its_ga_is_a_skip():
    with pytest.raises(pytest.skip.Exception) as err:
        Expectations.of("v1.35.4").require("prioritized-list", DROPPED)
    assert "is not available on this cluster" in str(err.value)


def test_waived_and_expected_by_flag():
    with pytest.raises(pytest.skip.Exception):
        Expectations.of("v1.36.3", waive=["prioritized-list"]).require("prioritized-list", DROPPED)
    with pytest.raises(FeatureMissing):
        Expectations.of("v1.35.4", expect=["prioritized-list"]).require("prioritized-list", DROPPED)


def test_a_refused_probe_is_no_verdict_naming_the_webhook():
    with pytest.raises(NoVerdict) as err:
        Expectations.of("v1.36.3").require("admin-access", REFUSED)
    assert 'admission webhook "deny-claims.example.com" refused the probe' in str(err.value)
    # the admission's code goes with it: the run's verdict groups the reason by it
    assert err.value.code == "admission-denied"


def test_available_is_nothing():
    Expectations.of("v1.36.3").require("prioritized-list", Capability("p", True, "kept"))


def test_bad_flags_are_clear_errors():
    with pytest.raises(DraconfError, match="both expected and waived"):
        Expectations.of("v1.36.3", expect=["mig"], waive=["mig"])
    with pytest.raises(DraconfError, match="unknown feature 'sharing'"):
        Expectations.of("v1.36.3", expect=["sharing"])


PROMISED = Capability("MIG (DeviceClass mig.nvidia.com)", False, "no published device matches DeviceClass mig.nvidia.com",
                      promised="the kubelet plugin runs with DynamicMIG=true on n1 (pod d/p), where gpu-0 is "
                               "published partitionable")


def test_a_feature_the_clusters_own_driver_promises_fails_when_missing():
    """MIG is no GA feature, but a plugin running with DynamicMIG on a partitionable GPU promises
    it: no MIG device published is a regression, never a quiet skip."""
    with pytest.raises(FeatureMissing) as err:
        Expectations.of("v1.36.3").require("mig", PROMISED)
    assert err.value.code == FEATURE_DISABLED and str(err.value).startswith("[feature-disabled] ") and "DynamicMIG=true on n1" in str(err.value)
    with pytest.raises(pytest.skip.Exception):
        Expectations.of("v1.36.3", waive=["mig"]).require("mig", PROMISED)


def test_the_drivers_release_promises_what_it_has_switched_on():
    """The release read off the cluster: v0.4.0 with NVMLDeviceHealthCheck on taints unhealthy
    GPUs, so a cluster dropping request tolerations fails; v25.12.0 taints none, a skip saying so."""
    from dataclasses import replace

    from draconf.expectations import release_word
    from draconf.plugins import PluginPod
    dropped = Capability("device taints (tolerations)", False, "the API server dropped `tolerations`")
    on = PluginPod("d", "p", "n1", "Running", True, feature_gates=(("NVMLDeviceHealthCheck", True),),
                   release="0.4.0", release_from="DaemonSet d/x label app.kubernetes.io/version=0.4.0")
    word = release_word("device-taints", [on])
    with pytest.raises(FeatureMissing) as err:
        Expectations.of("v1.36.3").require("device-taints", replace(dropped, promised=word.promised))
    assert "NVIDIA DRA driver 0.4.0" in str(err.value) and "NVMLDeviceHealthCheck" in str(err.value)
    assert release_word("device-taints", [replace(on, feature_gates=())]).promised is None
    old = release_word("device-taints", [replace(on, release="25.12.0")])
    assert old.promised is None and "publishes no device taint" in old.note
    # an unknown release (a newer one, the simulated driver) says nothing
    assert release_word("device-taints", [replace(on, release="26.1.0")]).note is None


def test_a_targets_limit_ends_the_skip_and_never_excuses_a_failure():
    limited = Expectations.of("v1.36.3", limits=["prioritized-list=the bed cannot"])
    with pytest.raises(FeatureMissing):  # GA: missing still fails
        limited.require("prioritized-list", DROPPED)
    with pytest.raises(pytest.skip.Exception) as err:
        Expectations.of("v1.35.4", limits=["prioritized-list=the bed cannot"]).require("prioritized-list", DROPPED)
    assert str(err.value).endswith("; the bed cannot")
    with pytest.raises(DraconfError, match="unknown feature"):
        Expectations.of("v1.36.3", limits=["migs=x"])
