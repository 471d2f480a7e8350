"""Load the YAML workloads under ``manifests/`` and create them in a namespace.

Objects are created through the dynamic client, so any kind the server serves works, and the
server's own validation and admission decide what is accepted.

>>> docs = load("01-single-gpu.yaml")
>>> [d["kind"] for d in docs]
['ResourceClaimTemplate', 'Pod']
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from draconf.admission import AdmissionDenied, is_refusal, server_message

MANIFEST_DIR = Path(__file__).resolve().parent.parent / "manifests"


def load(name: str) -> list[dict]:
    """The documents of ``manifests/<name>``, as fresh dicts the caller may change."""
    with open(MANIFEST_DIR / name) as fh:
        return [copy.deepcopy(doc) for doc in yaml.safe_load_all(fh) if doc]


def find(docs: list[dict], kind: str, name: str | None = None) -> dict:
    for doc in docs:
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name):
            return doc
    raise KeyError(f"{kind}/{name or '*'}")


def create(api, namespace: str, docs: list[dict], labels: dict[str, str] | None = None) -> list[dict]:
    """Create ``docs`` in ``namespace`` (in order); returns the created objects as dicts.

    A create the server refuses on validation or admission (a policy, webhook, quota or
    LimitRange) raises :class:`draconf.admission.AdmissionDenied` with the server's message: a
    failure at once, not a wait.  Other API errors (RBAC 403, 409, 5xx) propagate as they are."""
    dynamic = DynamicClient(api.api_client)
    created = []
    for doc in docs:
        body = copy.deepcopy(doc)
        meta = body.setdefault("metadata", {})
        meta["namespace"] = namespace
        if labels:
            meta.setdefault("labels", {}).update(labels)
        resource = dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
        try:
            created.append(resource.create(body=body, namespace=namespace).to_dict())
        except ApiException as err:
            if is_refusal(err):
                raise AdmissionDenied(body["kind"], meta.get("name") or meta.get("generateName", "?"),
                                      err.status, server_message(err)) from None
            raise
    return created


def dump(docs: list[dict]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)
