"""Certificates and tokens for a test bed: one CA, one serving cert, a service-account key pair
and a static token per component.  Made with the ``openssl`` command, once per bed.

A bed with real nodes also gets, as kubeadm gives a cluster: a token per kubelet for the
identity ``system:node:<name>`` in group ``system:nodes`` (so the Node authorizer and the
NodeRestriction admission plugin judge it), a serving certificate per kubelet for its node IP,
and a client certificate the API server presents to kubelets (``exec``, ``logs``)."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from draconf.errors import DraconfError

#: Identity per client, mapped to the same users and groups a kubeadm cluster gives them, so
#: RBAC is the real bootstrap policy (the scheduler and controller manager are not masters).
IDENTITIES = {
    "admin": ("kubernetes-admin", "system:masters"),
    "kube-scheduler": ("system:kube-scheduler", ""),
    "kube-controller-manager": ("system:kube-controller-manager", ""),
    "kwok": ("system:kwok-controller", "system:masters"),
    "nvidia-dra-driver": ("system:serviceaccount:gpu-operator:nvidia-dra-driver", "system:masters"),
}


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
    if shutil.which("openssl") is None:
        raise DraconfError("the test bed needs the `openssl` command to make its certificates; "
                           "install it (Debian: apt-get install openssl)")
    pki = Pki(directory)
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        proc = subprocess.run(["openssl", *args], cwd=directory, capture_output=True, text=True)
        if proc.returncode:
            raise DraconfError(f"openssl {args[0]} failed: {proc.stderr.strip()}")

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", "/CN=draconf-testbed-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    (directory / "san.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,IP:10.96.0.1" + "".join(f",IP:{ip}" for ip in extra_server_ips)
        + "\nextendedKeyUsage=serverAuth\n")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
        "-keyout", "apiserver.key", "-out", "apiserver.csr")
    run("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "3650", "-extfile", "san.cnf", "-out", "apiserver.crt")
    run("genrsa", "-out", "sa.key", "2048")
    run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    users = list(IDENTITIES.values()) + [(node_user(n), "system:nodes") for n in nodes or {}]
    lines = []
    for i, (user, group) in enumerate(users):
        lines.append(f'{secrets.token_hex(16)},{user},uid-{i},"{group}"' if group
                     else f"{secrets.token_hex(16)},{user},uid-{i}")
    pki.token_file.write_text("\n".join(lines) + "\n")
    # kwok plays the kubelet of KWOK nodes (exec, logs) at 127.0.0.1; an API server that
    # verifies kubelets (a bed with real nodes) must trust it too.
    _signed(run, directory, "kwok-serving", "/CN=kwok",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    if nodes:
        _signed(run, directory, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
                "extendedKeyUsage=clientAuth\n")
        for node, ip in nodes.items():
            _signed(run, directory, f"kubelet-{node}", f"/O=system:nodes/CN={node_user(node)}",
                    f"subjectAltName=IP:{ip},DNS:{node}\nextendedKeyUsage=serverAuth\n")
    return pki


def _signed(run, directory: Path, name: str, subject: str, extensions: str) -> None:
    """A key and a certificate signed by the bed's CA."""
    (directory / f"{name}.cnf").write_text(extensions)
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key", "-out", f"{name}.csr")
    run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "3650", "-extfile", f"{name}.cnf", "-out", f"{name}.crt")
