"""The bed's PKI: what kube-apiserver, the kubelets and kwok rely on in each certificate, and a
real TLS handshake with each serving certificate under Python's own verifier."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from draconf.testbed import pki as pki_mod

NODES = {"gpu-0": "10.213.0.10", "gpu-1": "10.213.0.11"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return pki_mod.create(tmp_path_factory.mktemp("pki"), extra_server_ips=("10.213.0.1",), nodes=NODES)


def _cert(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _subject(cert) -> list[tuple[str, str]]:
    return [(a.oid._name, a.value) for a in cert.subject]


def _sans(cert) -> list[str]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(n.value) for n in san]


def _usages(cert) -> list:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_the_ca_is_a_ca_and_signs_every_certificate(pki):
    ca = _cert(pki.ca_cert)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "draconf-testbed-ca"
    leaves = [pki.server_cert, pki.kwok_cert, pki.kubelet_client_cert,
              *(pki.kubelet_serving(n)[0] for n in NODES)]
    for path in leaves:
        cert = _cert(path)
        cert.verify_directly_issued_by(ca)
        assert cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier \
            == ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
        assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 3650


def test_the_apiserver_is_named_as_host_pods_and_nodes_reach_it(pki):
    cert = _cert(pki.server_cert)
    assert _subject(cert) == [("commonName", "kube-apiserver")]
    assert _sans(cert) == ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                           "kubernetes.default.svc", "10.96.0.1", "10.213.0.1"]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.96.0.1") in san.get_values_for_type(x509.IPAddress)
    assert _usages(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_client_and_node_identities(pki):
    client = _cert(pki.kubelet_client_cert)
    assert _subject(client) == [("organizationName", "system:masters"),
                                ("commonName", "kube-apiserver-kubelet-client")]
    assert _usages(client) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    for node, ip in NODES.items():
        cert = _cert(pki.kubelet_serving(node)[0])
        assert _subject(cert) == [("organizationName", "system:nodes"), ("commonName", f"system:node:{node}")]
        assert _sans(cert) == [ip, node] and _usages(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
    kwok = _cert(pki.kwok_cert)
    assert _subject(kwok) == [("commonName", "kwok")] and _sans(kwok) == ["127.0.0.1", "localhost"]


def test_keys_are_private_and_match_their_certificates(pki):
    pairs = [(pki.server_cert, pki.server_key), (pki.kwok_cert, pki.kwok_key),
             (pki.kubelet_client_cert, pki.kubelet_client_key), *(pki.kubelet_serving(n) for n in NODES)]
    for cert, key in pairs:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(cert.stat().st_mode) == 0o644
        private = serialization.load_pem_private_key(key.read_bytes(), None)
        assert private.key_size == 2048
        assert private.public_key() == _cert(cert).public_key()
    sa = serialization.load_pem_private_key(pki.sa_key.read_bytes(), None)
    assert stat.S_IMODE(pki.sa_key.stat().st_mode) == 0o600
    assert serialization.load_pem_public_key(pki.sa_pub.read_bytes()) == sa.public_key()
    assert stat.S_IMODE((pki.dir / "ca.key").stat().st_mode) == 0o600


def test_every_identity_and_node_has_its_own_token(pki):
    tokens = {identity: pki.token(identity) for identity in pki_mod.IDENTITIES}
    tokens |= {node: pki.token(pki_mod.node_user(node)) for node in NODES}
    assert len(set(tokens.values())) == len(tokens) and all(len(t) == 32 for t in tokens.values())
    lines = pki.token_file.read_text().splitlines()
    assert f'{tokens["admin"]},kubernetes-admin,uid-0,"system:masters"' in lines
    assert f"{tokens['kube-scheduler']},system:kube-scheduler,uid-1" in lines
    # The suite's own identity is in no group: only what manifests/rbac/ binds to it.
    assert f"{tokens['draconf-suite']},draconf-suite,uid-5" in lines
    assert f'{tokens["gpu-1"]},system:node:gpu-1,uid-7,"system:nodes"' in lines
    with pytest.raises(KeyError):
        pki.token("nobody")


def test_a_bed_without_real_nodes_gets_no_node_certificates(tmp_path):
    bare = pki_mod.create(tmp_path)
    assert not bare.kubelet_client_cert.exists() and not list(tmp_path.glob("kubelet-*"))
    assert "10.213.0.1" not in _sans(_cert(bare.server_cert))


@pytest.mark.parametrize("server_name", ["kubernetes.default.svc", "localhost", "10.96.0.1"])
def test_tls_handshake_verifies_the_apiserver_by_each_name(pki, server_name):
    _handshake(pki, pki.server_cert, pki.server_key, server_name)


def test_tls_handshake_with_a_kubelet_and_the_apiserver_client_certificate(pki):
    cert, key = pki.kubelet_serving("gpu-0")
    peer = _handshake(pki, cert, key, "10.213.0.10", client=(pki.kubelet_client_cert, pki.kubelet_client_key))
    assert ("organizationName", "system:masters") in [kv for rdn in peer["subject"] for kv in rdn]


def _handshake(pki, cert, key, server_name, client=None) -> dict:
    """A TLS 1.2+ handshake over a socket pair; returns the client certificate the server saw."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    if client:
        server_ctx.verify_mode = ssl.CERT_REQUIRED
        server_ctx.load_verify_locations(pki.ca_cert)
    client_ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    if client:
        client_ctx.load_cert_chain(*client)
    a, b = socket.socketpair()
    seen: dict = {}

    def serve():
        with server_ctx.wrap_socket(a, server_side=True) as tls:
            seen["peer"] = tls.getpeercert()
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve)
    thread.start()
    with client_ctx.wrap_socket(b, server_hostname=server_name) as tls:
        assert tls.recv(2) == b"ok"
    thread.join(10)
    return seen.get("peer") or {}


def test_only_the_admin_is_a_master():
    masters = {i for i, (_, group) in pki_mod.IDENTITIES.items() if group == "system:masters"}
    assert masters == {"admin"}
    assert pki_mod.IDENTITIES["nvidia-dra-driver"][1] == ""


def test_the_driver_is_bound_to_the_role_its_install_creates():
    from draconf.testbed import driver_objects
    account, role, binding = driver_objects.driver_rbac()
    # The identity's user name is the ServiceAccount's, so the binding's subject is that identity.
    user = pki_mod.IDENTITIES[driver_objects.DRIVER_IDENTITY][0]
    assert user == f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", **account["metadata"]}]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert ("", "pods", "list") in granted and ("nvidia.com", "gpuclusters/status", "patch") in granted
    # Nothing of an install: no CRDs, RBAC, DeviceClasses, nodes, namespaces; no wildcards.
    assert not {r for _, r, _ in granted} & {"customresourcedefinitions", "clusterroles", "deviceclasses",
                                              "nodes", "namespaces", "*"}
    assert "*" not in {v for *_, v in granted}


def test_kwok_is_bound_to_its_upstream_role():
    from draconf.testbed.cluster import COMPONENT_RBAC
    import yaml
    docs = [d for d in yaml.safe_load_all((COMPONENT_RBAC / "kwok-controller.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "User", "name": pki_mod.IDENTITIES["kwok"][0],
                                    "apiGroup": "rbac.authorization.k8s.io"}]
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert {("", "nodes/status"), ("", "pods/status"), ("coordination.k8s.io", "leases"),
            ("kwok.x-k8s.io", "execs")} <= granted
