"""Kubernetes API clients from a kubeconfig, with bad input turned into clear errors.

>>> from draconf.kube import connect          # doctest: +SKIP
>>> api = connect("/path/to/kubeconfig")      # doctest: +SKIP
>>> api.core.list_node().items                # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import datetime, timezone
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from draconf.errors import DraconfError, yaml_problem

# urllib3 logs each of its own connection retries as a warning; an unreachable server would
# print three lines of internals before draconf's one-line reason.  Waits and preflight name
# connection errors themselves.
logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


class ApiRetry(urllib3.Retry):
    """The suite's one client policy for transient answers, as client-go's: a request the server
    turned away (429 Too Many Requests, honouring its Retry-After) is sent again whatever its
    method, the server never processed it; a 5xx or a dropped connection mid-answer only for
    methods that change nothing when repeated (never a create or a patch, which could apply
    twice); a connection never made, always.  With backoff, bounded: a busy API server makes
    a run slower, not red; one that stays busy is reported as what it is (``api-throttled``).
    A TLS failure (urllib3's "other" errors) is never retried: a certificate the kubeconfig
    does not trust stays untrusted, and six tries with backoff cost 25 s before the one line.

    >>> r = API_RETRY
    >>> r.is_retry("POST", 429), r.is_retry("POST", 503), r.is_retry("GET", 503), r.is_retry("GET", 404)
    (True, False, True, False)
    """

    #: methods a server may see twice to the same effect
    IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if status_code == 429:
            return True
        return super().is_retry(method, status_code, has_retry_after)


#: About 15 s at most before a transient answer stands (backoff 0.5 s doubling, up to 8 s).
API_RETRY = ApiRetry(total=6, connect=3, read=2, status=4, other=0, backoff_factor=0.5, backoff_max=8,
                     status_forcelist=(429, 500, 502, 503, 504), allowed_methods=ApiRetry.IDEMPOTENT,
                     respect_retry_after_header=True, raise_on_status=False)


def new_client(configuration: client.Configuration) -> client.ApiClient:
    """An API client with the suite's retry policy (the pool reads it when it is made), with
    connections of its own: each Api has one, and a watch (it holds one for minutes) or an exec
    (it turns its client's requests into websockets) gets another on the same configuration."""
    configuration.retries = API_RETRY
    return client.ApiClient(configuration)


_DYNAMIC_LOCK = threading.Lock()


@dataclass
class Api:
    """Typed API groups sharing one connection."""

    api_client: client.ApiClient
    source: str = ""
    #: the kubeconfig context and user the connection was made with (empty when not from one)
    context: str = ""
    user: str = ""

    def describe(self) -> str:
        """Server, context and user: what a run prints first, so that nobody creates objects
        in a cluster they did not mean.

        >>> Api(client.ApiClient(client.Configuration(host="https://10.0.0.1:6443")), "kc",
        ...     context="staging", user="ci").describe()
        'server https://10.0.0.1:6443, context staging, user ci (kubeconfig kc)'
        """
        parts = [f"server {self.host}"] + [f"{k} {v}" for k, v in (("context", self.context), ("user", self.user)) if v]
        return ", ".join(parts) + (f" ({'kubeconfig ' if self.context else ''}{self.source})" if self.source else "")

    @cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def exec_core(self) -> client.CoreV1Api:
        """A CoreV1Api for ``kubernetes.stream.stream`` (exec), one per thread, on an API client
        of its own: stream() swaps its client's ``request`` for a websocket call while it runs,
        so any other call sharing that client in another thread (the fleet sweep's) would be
        sent as a websocket handshake ("Handshake status 200 OK")."""
        local = self.__dict__.setdefault("_exec_clients", threading.local())
        if getattr(local, "core", None) is None:
            local.core = client.CoreV1Api(new_client(self.api_client.configuration))
        return local.core

    @cached_property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api_client)

    @cached_property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api_client)

    @cached_property
    def resource(self) -> client.ResourceV1Api:
        return client.ResourceV1Api(self.api_client)

    @cached_property
    def dynamic(self):
        """The dynamic client (any kind the server serves), made once per connection: making
        one reads the server's discovery, or its cache file, which threads making their own at
        the same time tear (the sweep's, 80 at once: "load cache error", and discovery again
        for every create)."""
        from kubernetes.dynamic import DynamicClient
        with _DYNAMIC_LOCK:
            return DynamicClient(self.api_client)

    @cached_property
    def resource_beta(self) -> client.ResourceV1beta2Api:
        """resource.k8s.io/v1beta2: DeviceTaintRule is served there only (beta, off by default
        in 1.36)."""
        return client.ResourceV1beta2Api(self.api_client)

    @cached_property
    def admission(self) -> client.AdmissionregistrationV1Api:
        return client.AdmissionregistrationV1Api(self.api_client)

    @cached_property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    @cached_property
    def extensions(self) -> client.ApiextensionsV1Api:
        return client.ApiextensionsV1Api(self.api_client)

    @cached_property
    def rbac(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.api_client)

    @cached_property
    def version(self) -> client.VersionApi:
        return client.VersionApi(self.api_client)

    @property
    def host(self) -> str:
        return self.api_client.configuration.host


def connect(kubeconfig: str | Path | None = None, context: str | None = None) -> Api:
    """Build an :class:`Api` from a kubeconfig file (default: ``$KUBECONFIG`` / ``~/.kube/config``)."""
    where = str(kubeconfig) if kubeconfig else "$KUBECONFIG or ~/.kube/config"
    if kubeconfig is None and os.environ.get("KUBECONFIG"):
        paths = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
        if len(paths) == 1:
            kubeconfig = paths[0]
            where = f"{kubeconfig} (from $KUBECONFIG)"
    if kubeconfig is not None:
        path = Path(kubeconfig)
        if not path.is_file():
            raise DraconfError(f"kubeconfig {where} does not exist")
        try:
            doc = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise DraconfError(f"kubeconfig {where} is not valid YAML: {yaml_problem(err)}") from err
        if not isinstance(doc, dict) or not {"clusters", "contexts", "users"} & set(doc):
            raise DraconfError(f"kubeconfig {where} is not a kubeconfig: expected a YAML mapping "
                               "with clusters, users and contexts")
    try:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                client_configuration=configuration)
        api_client = new_client(configuration)
    except ConfigException as err:
        raise DraconfError(f"cannot use kubeconfig {where}"
                           f"{' context ' + context if context else ''}: {err}") from err
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise DraconfError(f"kubeconfig {where} is malformed: {err}") from err
    used, user = _context_and_user(kubeconfig, context)
    return Api(api_client, source=where, context=used, user=user)


def _context_and_user(kubeconfig, context: str | None) -> tuple[str, str]:
    """The context a connection was made with (``context``, else the kubeconfig's current one)
    and its user, as the client's own kubeconfig loader reads them."""
    try:
        contexts, current = config.list_kube_config_contexts(config_file=str(kubeconfig) if kubeconfig else None)
    except (ConfigException, OSError, ValueError, TypeError, AttributeError):
        return context or "", ""
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    chosen = chosen or {}
    return chosen.get("name") or context or "", (chosen.get("context") or {}).get("user") or ""


#: Where a pod's ServiceAccount credentials are mounted (the Kubernetes client reads them there).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def connect_in_cluster() -> Api:
    """An :class:`Api` with the credentials of the pod draconf runs in (``--target in-cluster``):
    its ServiceAccount token and CA, and the ``kubernetes`` Service's address from the
    environment, found by the Kubernetes client's in-cluster config."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException as err:
        raise DraconfError(f"--target in-cluster: not running in a pod with a ServiceAccount "
                           f"({err}); run draconf as the Job in manifests/runner/, or use "
                           "--target kubeconfig") from None
    return Api(new_client(configuration), source="in-cluster ServiceAccount",
               user=_service_account())


def _service_account() -> str:
    """``system:serviceaccount:<namespace>:<name>`` of the pod, as far as its mounted files tell
    (the name only from the token's claims, which are not verified here: for display only)."""
    import base64
    import json
    try:
        namespace = Path(SERVICE_ACCOUNT_DIR, "namespace").read_text().strip()
        payload = Path(SERVICE_ACCOUNT_DIR, "token").read_text().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return claims.get("sub") or f"a ServiceAccount of namespace {namespace}"
    except (OSError, IndexError, ValueError):
        return ""


def connect_target(target: str, context: str | None = None, kubeconfig: str | Path | None = None) -> Api:
    """The cluster under test for a target other than the embedded bed: ``kubeconfig`` (default
    ``$KUBECONFIG`` / ``~/.kube/config``) with ``context`` (default: its current one)."""
    if target == "in-cluster":
        if kubeconfig or context:
            raise DraconfError("--kubeconfig and --context name a kubeconfig's cluster; --target in-cluster "
                               "uses the pod's ServiceAccount instead: give one or the other")
        return connect_in_cluster()
    return connect(kubeconfig, context)


def unread(response) -> None:
    """Hand back a response asked for without its body (``_preload_content=False``, so that no
    client model is built from it).  Unread, its connection never returns to the pool, and the
    next call opens a new one: a TLS handshake on both sides, per call."""
    response.drain_conn()
    response.release_conn()


def label_selector(labels) -> str:
    """The label selector matching ``labels`` (equality terms, ``k=v,k2=v2``); "" for none.

    >>> label_selector({"app.kubernetes.io/managed-by": "draconf", "draconf.dev/run-id": "r1"})
    'app.kubernetes.io/managed-by=draconf,draconf.dev/run-id=r1'
    >>> label_selector(None)
    ''
    """
    return ",".join(f"{k}={v}" for k, v in (labels or {}).items())


def raw(call, *args, **kwargs) -> dict:
    """What the client method ``call`` answers, as the API server's JSON: objects as plain dicts
    in camelCase, the shape ``sanitize_for_serialization`` gives (timestamps stay RFC 3339
    text), without building the client's models on the way.  Building them is most of the
    client's CPU for a list of slices or claims (every device attribute a model of its own), and
    the fleet sweep lists them from 80 threads at once.  Errors are raised as for any call.
    """
    return json.loads(call(*args, _preload_content=False, **kwargs).data)


def raw_items(call, *args, **kwargs) -> list[dict]:
    """The ``items`` of a list call (:func:`raw`)."""
    return raw(call, *args, **kwargs).get("items") or []


def seconds_since(stamp) -> float | None:
    """Seconds from an API timestamp (RFC 3339 text, as in a dict, or the client's datetime) to
    now; None without one, or for text that is no timestamp.

    >>> seconds_since("2000-01-01T00:00:00Z") > 0, seconds_since(None), seconds_since("soon")
    (True, None, None)
    """
    if not stamp:
        return None
    if isinstance(stamp, str):
        try:
            stamp = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - stamp).total_seconds()
