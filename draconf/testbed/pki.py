"""Certificates and tokens for a test bed: one CA, one serving cert, a service-account key pair
and a static token per component.  Made in-process with the ``cryptography`` package, once
per bed.

A bed with real nodes also gets, as kubeadm gives a cluster: a token per kubelet for the
identity ``system:node:<name>`` in group ``system:nodes`` (so the Node authorizer and the
NodeRestriction admission plugin judge it), a serving certificate per kubelet for its node IP,
and a client certificate the API server presents to kubelets (``exec``, ``logs``).

Every file is PEM: certificates (mode 0644), unencrypted PKCS#8 private keys (mode 0600), the
service-account public key as SubjectPublicKeyInfo.  The certificates carry what
``openssl req -x509`` / ``openssl x509 -req -extfile`` gave them before: a CA with
``CA:TRUE`` (critical), leaves with their SANs and extended key usage, subject and authority
key identifiers, SHA-256 signatures, ten years of validity.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Identity per client, mapped to the same users and groups a kubeadm cluster gives them, so
#: RBAC is the real bootstrap policy.  Only the admin is in system:masters: the scheduler and
#: controller manager have the bootstrap policy's roles, kwok the ClusterRole kwok releases,
#: the simulated driver the ClusterRole its install creates, the suite's user only
#: manifests/rbac/.
IDENTITIES = {
    # The cluster admin: `kubectl`, the bed's own set-up, and the driver's install (CRDs,
    # DeviceClasses, RBAC, the plugin DaemonSet), which a real cluster's admin runs with Helm.
    "admin": ("kubernetes-admin", "system:masters"),
    "kube-scheduler": ("system:kube-scheduler", ""),
    "kube-controller-manager": ("system:kube-controller-manager", ""),
    # kwok: the ClusterRole kwok releases (data/rbac/kwok-controller.yaml), nothing more.
    "kwok": ("system:kwok-controller", ""),
    # The simulated driver once installed (agent.Agent.run: GPU Operator status; kubelet plugin,
    # kubelet and runtime of KWOK GPU nodes): the ServiceAccount's name, in no group, bound
    # only to the ClusterRole of driver_objects.driver_rbac(), which the install creates.
    "nvidia-dra-driver": ("system:serviceaccount:gpu-operator:nvidia-dra-driver", ""),
    # The suite as a platform team runs it: no group, only what manifests/rbac/ binds to it
    # (`draconf-suite.kubeconfig` in the bed's directory).
    "draconf-suite": ("draconf-suite", ""),
}

#: The API server's names: where the host, pods (the ``kubernetes`` Service, 10.96.0.1) and
#: the control plane's namespace reach it.
APISERVER_NAMES = ("127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                   "kubernetes.default.svc", "10.96.0.1")
VALID_FOR = datetime.timedelta(days=3650)
KEY_BITS = 2048


@dataclass(frozen=True)
class Pki:
    dir: Path

    ca_cert = property(lambda self: self.dir / "ca.crt")
    server_cert = property(lambda self: self.dir / "apiserver.crt")
    server_key = property(lambda self: self.dir / "apiserver.key")
    sa_key = property(lambda self: self.dir / "sa.key")
    sa_pub = property(lambda self: self.dir / "sa.pub")
    token_file = property(lambda self: self.dir / "tokens.csv")
    kubelet_client_cert = property(lambda self: self.dir / "apiserver-kubelet-client.crt")
    kwok_cert = property(lambda self: self.dir / "kwok-serving.crt")
    kwok_key = property(lambda self: self.dir / "kwok-serving.key")
    kubelet_client_key = property(lambda self: self.dir / "apiserver-kubelet-client.key")

    def token(self, identity: str) -> str:
        """The token of a component (a key of IDENTITIES) or of a node's kubelet (its user name)."""
        user = IDENTITIES[identity][0] if identity in IDENTITIES else identity
        for line in self.token_file.read_text().splitlines():
            token, name, *_ = line.split(",")
            if name == user:
                return token
        raise KeyError(identity)

    def kubelet_serving(self, node: str) -> tuple[Path, Path]:
        return self.dir / f"kubelet-{node}.crt", self.dir / f"kubelet-{node}.key"


def node_user(node: str) -> str:
    return f"system:node:{node}"


def create(directory: Path, extra_server_ips: tuple[str, ...] = (),
           nodes: dict[str, str] | None = None) -> Pki:
    """Make the bed's PKI; ``nodes`` maps each real node's name to its IP."""
    pki = Pki(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca = _Ca.create(directory, "draconf-testbed-ca")
    ca.issue("apiserver", _name("kube-apiserver"), (*APISERVER_NAMES, *extra_server_ips),
             ExtendedKeyUsageOID.SERVER_AUTH)
    sa_key = _new_key(directory / "sa.key")
    _write(directory / "sa.pub", sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)
    users = list(IDENTITIES.values()) + [(node_user(n), "system:nodes") for n in nodes or {}]
    lines = []
    for i, (user, group) in enumerate(users):
        lines.append(f'{secrets.token_hex(16)},{user},uid-{i},"{group}"' if group
                     else f"{secrets.token_hex(16)},{user},uid-{i}")
    pki.token_file.write_text("\n".join(lines) + "\n")
    # kwok plays the kubelet of KWOK nodes (exec, logs) at 127.0.0.1; an API server that
    # verifies kubelets (a bed with real nodes) must trust it too.
    ca.issue("kwok-serving", _name("kwok"), ("127.0.0.1", "localhost"), ExtendedKeyUsageOID.SERVER_AUTH)
    if nodes:
        ca.issue("apiserver-kubelet-client", _name("kube-apiserver-kubelet-client", "system:masters"), (),
                 ExtendedKeyUsageOID.CLIENT_AUTH)
        for node, ip in nodes.items():
            ca.issue(f"kubelet-{node}", _name(node_user(node), "system:nodes"), (ip, node),
                     ExtendedKeyUsageOID.SERVER_AUTH)
    return pki


def serving_pair(directory: Path, name: str, hosts: tuple[str, ...]) -> tuple[Path, Path, Path]:
    """A CA of its own and a server certificate for ``hosts`` signed by it, for a server the
    API server calls (an admission webhook in a bed test): (ca.crt, <name>.crt, <name>.key)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _Ca.create(directory, f"{name}-ca")
    ca.issue(name, _name(name), hosts, ExtendedKeyUsageOID.SERVER_AUTH)
    return directory / "ca.crt", directory / f"{name}.crt", directory / f"{name}.key"


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    """``/O=organization/CN=common_name``, in that order (as the Kubernetes docs write it)."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(names) -> x509.SubjectAlternativeName:
    """IP addresses as IP entries, anything else as a DNS name, in the order given."""
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` with ``mode`` from the first byte on (a key is never readable by others)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)  # the umask may have taken bits away


def _new_key(path: Path) -> rsa.RSAPrivateKey:
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    _write(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()), 0o600)
    return key


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + VALID_FOR))


def _key_ids(builder: x509.CertificateBuilder, public_key, issuer_key) -> x509.CertificateBuilder:
    return (builder
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                           critical=False))


@dataclass(frozen=True)
class _Ca:
    directory: Path
    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, directory: Path, common_name: str) -> "_Ca":
        key = _new_key(directory / "ca.key")
        name = _name(common_name)
        cert = (_key_ids(_builder(name, name, key.public_key()), key.public_key(), key)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        _write(directory / "ca.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
        return cls(directory, key, cert)

    def issue(self, name: str, subject: x509.Name, alt_names, usage) -> None:
        """``<name>.key`` and ``<name>.crt``: a new key and its certificate signed by this CA."""
        key = _new_key(self.directory / f"{name}.key")
        builder = _builder(subject, self.cert.subject, key.public_key())
        if alt_names:
            builder = builder.add_extension(_san(alt_names), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        cert = (_key_ids(builder, key.public_key(), self.key)
                .sign(self.key, hashes.SHA256()))
        _write(self.directory / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
