"""The driver's release as the suite reads it off the cluster: the chart's labels on the kubelet
plugin's DaemonSet, found through each plugin pod's owner wherever the release is installed,
else the pod's image tag."""

from types import SimpleNamespace

from kubernetes.client import V1Container, V1ObjectMeta, V1OwnerReference, V1Pod, V1PodSpec

from draconf.preflight.nodes import read_plugin_pods


def pod(namespace: str, name: str, image: str, owner: str | None) -> V1Pod:
    owners = [V1OwnerReference(api_version="apps/v1", kind="DaemonSet", name=owner, uid="u")] if owner else None
    return V1Pod(metadata=V1ObjectMeta(namespace=namespace, name=name, owner_references=owners),
                 spec=V1PodSpec(node_name="n1", containers=[V1Container(name="gpus", image=image)]))


def fake_api(pods: list[V1Pod], daemonsets: dict):
    got = []

    def get(group, version, namespace, plural, name, _request_timeout=None):
        got.append((namespace, name))
        return daemonsets.get((namespace, name))

    def list_all(label_selector=None, _request_timeout=None):
        return SimpleNamespace(items=pods)
    api = SimpleNamespace(custom=SimpleNamespace(get_namespaced_custom_object=get),
                          core=SimpleNamespace(list_pod_for_all_namespaces=list_all,
                                               list_namespaced_pod=lambda *a, **k: SimpleNamespace(items=[])))
    return api, got


def test_the_release_is_read_from_the_owning_daemonsets_chart_labels_wherever_it_runs():
    moved = {"metadata": {"labels": {"app.kubernetes.io/version": "0.4.0",
                                     "helm.sh/chart": "dra-driver-nvidia-gpu-0.4.0"}}}
    api, got = fake_api([pod("accelerators", "plugin-a", "mirror.local/gpu:custom", "gpu-dra-kubelet-plugin")],
                        {("accelerators", "gpu-dra-kubelet-plugin"): moved})
    _, (found,) = read_plugin_pods(api)
    assert (found.release, found.release_from) == (
        "0.4.0", "DaemonSet accelerators/gpu-dra-kubelet-plugin label app.kubernetes.io/version=0.4.0")
    assert got.count(("accelerators", "gpu-dra-kubelet-plugin")) == 1


def test_without_chart_labels_the_image_tag_says_it_and_else_nothing():
    api, _ = fake_api([pod("d", "plugin-a", "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0", "ds"),
                       pod("d", "plugin-b", "nvcr.io/nvidia/k8s-dra-driver-gpu:latest", None)],
                      {("d", "ds"): {"metadata": {"labels": {"app": "x"}}}})
    _, (a, b) = read_plugin_pods(api)
    assert (a.release, a.release_from) == ("25.12.0", "image nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0")
    assert (b.release, b.release_from) == (None, "")
