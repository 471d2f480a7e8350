"""Load the YAML workloads under ``manifests/`` and create them in a namespace.

Objects are created through the dynamic client, so any kind the server serves works, and the
server's own validation and admission decide what is accepted.

>>> docs = load("01-single-gpu.yaml")
>>> [d["kind"] for d in docs]
['ResourceClaimTemplate', 'Pod']
"""

from __future__ import annotations

import copy
import functools

import yaml
from kubernetes.client.exceptions import ApiException

from draconf import bundle, refusals
from draconf.admission import AdmissionDenied, denial_in_text, is_refusal, server_message

#: ``manifests/`` of the checkout or of the installed package (draconf.bundle).
MANIFEST_DIR = bundle.MANIFESTS


#: libyaml's safe loader where PyYAML was built with it (the wheels are): the pure-Python one
#: took a third of a second of CPU per run for the suite's 51 loads.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(name: str) -> list[dict]:
    """The documents of ``manifests/<name>``, as fresh dicts the caller may change."""
    return copy.deepcopy(_parsed(name))


@functools.lru_cache(maxsize=None)
def _parsed(name: str) -> list[dict]:
    """Each file is read once per process: the manifests do not change during a run."""
    with open(MANIFEST_DIR / name) as fh:
        return [doc for doc in yaml.load_all(fh, Loader=SAFE_LOADER) if doc]


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
    refusals.check(docs)  # a policy that refused this kind throughout the run: not tried again
    dynamic = api.dynamic
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
                message = server_message(err)
                refusals.book().record(body["kind"], denial_in_text(message), message)
                raise AdmissionDenied(body["kind"], meta.get("name") or meta.get("generateName", "?"),
                                      err.status, message) from None
            raise
    return created


def dump(docs: list[dict]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def changes(written: list[str], applied: list[dict], limit: int = 160) -> list[str]:
    """What the suite changed in the files ``written`` (names under ``manifests/``) before
    applying ``applied``: one line per field whose value differs (``file: Kind/name path:
    written -> applied``), per object left out, per object added.  Empty: applied as written.

    docs/checks.md, "Templated fields", says which fields the suite sets and why; this is the list a
    run's report shows (the value, not just the field).

    >>> docs = load("01-single-gpu.yaml")
    >>> changes(["01-single-gpu.yaml"], docs)
    []
    >>> docs[1]["spec"]["containers"][0]["image"] = "busybox"
    >>> docs[1]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-0"}
    >>> for line in changes(["01-single-gpu.yaml"], docs[1:]): print(line)
    01-single-gpu.yaml: ResourceClaimTemplate/single-gpu: not applied
    01-single-gpu.yaml: Pod/gpu-pod spec.containers[0].image: 'ubuntu:24.04' -> 'busybox'
    01-single-gpu.yaml: Pod/gpu-pod spec.nodeSelector: (absent) -> {'kubernetes.io/hostname': 'gpu-0'}
    """
    def key(doc: dict) -> tuple[str, str]:
        return doc["kind"], (doc.get("metadata") or {}).get("name", "?")

    def show(value) -> str:
        text = "(absent)" if value is _ABSENT else repr(value.strip() if isinstance(value, str) else value)
        return text if len(text) <= limit else text[:limit - 3] + "..."

    def diff(a, b, path: str):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in list(a) + [k for k in b if k not in a]:
                yield from diff(a.get(k, _ABSENT), b.get(k, _ABSENT), f"{path}.{k}" if path else k)
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                yield from diff(x, y, f"{path}[{i}]")
        elif not (isinstance(a, str) and isinstance(b, str) and a.strip() == b.strip()) and a != b:
            yield f"{path}: {show(a)} -> {show(b)}"

    out, by_key = [], {key(d): d for d in applied}
    seen = set()
    for name in written:
        for doc in load(name):
            k = key(doc)
            seen.add(k)
            if k not in by_key:
                out.append(f"{name}: {k[0]}/{k[1]}: not applied")
                continue
            other = {f: v for f, v in by_key[k].items() if f != "metadata"}
            mine = {f: v for f, v in doc.items() if f != "metadata"}
            out += [f"{name}: {k[0]}/{k[1]} {line}" for line in diff(mine, other, "")]
    out += [f"{k[0]}/{k[1]}: added (not in {', '.join(written)})" for k in by_key if k not in seen]
    return out


_ABSENT = object()
