"""``kubectl apply -f`` and ``kubectl delete -f`` for the bed tests, through the real API server.

The manifests a user applies by hand (manifests/rbac, manifests/runner) are applied unchanged.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def docs_in(directory: Path) -> list[dict]:
    """``kubectl apply -f DIR``'s documents: every YAML file of ``directory``, in name order."""
    return [d for path in sorted(directory.glob("*.yaml")) for d in docs(path)]


def apply(api, docs: list[dict]) -> None:
    """``kubectl apply``: create each object, or replace what is there."""
    dynamic = DynamicClient(api.api_client)
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        namespace = doc["metadata"].get("namespace")
        try:
            resource.create(body=doc, namespace=namespace)
        except ApiException as err:
            if err.status != 409:
                raise
            current = resource.get(name=doc["metadata"]["name"], namespace=namespace)
            body = copy.deepcopy(doc)
            body["metadata"]["resourceVersion"] = current.metadata.resourceVersion
            resource.replace(body=body, namespace=namespace)


def delete(api, docs: list[dict]) -> None:
    dynamic = DynamicClient(api.api_client)
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        try:
            resource.delete(name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"))
        except ApiException as err:
            if err.status != 404:
                raise
