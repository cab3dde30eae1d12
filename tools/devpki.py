"""The local plane's credentials: a throwaway CA and leaves signed by it with openssl, each
with the extensions strict verifiers require (Python 3.13's VERIFY_X509_STRICT, Go, rustls),
and the kubeconfigs that carry them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tools.devprocess import ControlPlaneError


def openssl(*args: str) -> None:
    if shutil.which("openssl") is None:
        raise ControlPlaneError("openssl is not installed (apt-get install openssl)")
    subprocess.run(["openssl", *args], check=True, capture_output=True)


# Every extension RFC 5280 asks for, so strict verifiers (Python 3.13's default
# VERIFY_X509_STRICT, Go, rustls) accept the chain: a CA that may only sign certificates,
# a leaf that may only serve TLS, and key identifiers linking the two.
CA_EXTENSIONS = ("basicConstraints=critical,CA:TRUE,pathlen:0",
                 "keyUsage=critical,keyCertSign,cRLSign",
                 "subjectKeyIdentifier=hash",
                 "authorityKeyIdentifier=keyid:always")
SERVING_EXTENSIONS = ("extendedKeyUsage=serverAuth",
                      # A real node's pods reach it at the `kubernetes` Service's ClusterIP.
                      "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,"
                      "DNS:kubernetes.default.svc")


EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
# What the API server presents to kubelets (--kubelet-client-certificate): a kubelet authorises
# it by its group, as a cluster's kube-apiserver-kubelet-client is authorised.
KUBELET_CLIENT_SUBJECT = "/O=system:masters/CN=kube-apiserver-kubelet-client"


def make_pki(pki: Path) -> None:
    """A throwaway CA, one serving cert for 127.0.0.1 (apiserver and kwok), the API server's
    client cert for kubelets and an SA key."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_ext = [arg for e in CA_EXTENSIONS for arg in ("-addext", e)]
    openssl("req", "-x509", *EC_KEY, "-keyout", str(pki / "ca.key"), "-out",
             str(pki / "ca.crt"), "-days", "7", "-subj", "/CN=tidings-dev-ca", "-config",
             os.devnull, *ca_ext)
    sign_certificate(pki, pki / "serving", "/CN=127.0.0.1", SERVING_EXTENSIONS)
    sign_certificate(pki, pki / "kubelet-client", KUBELET_CLIENT_SUBJECT,
                     ("extendedKeyUsage=clientAuth",))
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(pki / "sa.key"))


def sign_certificate(pki: Path, out: Path, subject: str, extensions: tuple[str, ...]) -> None:
    """A key (``out``.key) and a certificate (``out``.crt) for ``subject`` signed by the CA in
    ``pki``: a leaf for one purpose, with the extensions strict verifiers require."""
    leaf = ("basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature",
            "subjectKeyIdentifier=hash", "authorityKeyIdentifier=keyid:always")
    key, csr, ext = (out.with_suffix(s) for s in (".key", ".csr", ".ext"))
    openssl("req", *EC_KEY, "-keyout", str(key), "-out", str(csr), "-subj", subject,
             "-config", os.devnull)
    ext.write_text("".join(f"{e}\n" for e in dict.fromkeys((*leaf, *extensions))))
    openssl("x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey",
             str(pki / "ca.key"), "-CAcreateserial", "-out", str(out.with_suffix(".crt")),
             "-days", "7", "-extfile", str(ext))


def write_kubeconfig(path: Path, *, server: str, ca_file: Path, user: str,
                     credentials: dict[str, str], context: str, namespace: str | None = None,
                     tls_server_name: str | None = None) -> Path:
    """A kubeconfig of one cluster, one user (``credentials``: a token, or a client
    certificate and key) and one context, readable by its owner only."""
    cluster: dict[str, Any] = {"server": server, "certificate-authority": str(ca_file)}
    if tls_server_name:
        cluster["tls-server-name"] = tls_server_name
    bound: dict[str, Any] = {"cluster": "tidings-dev", "user": user}
    if namespace:
        bound["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "tidings-dev", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context, "context": bound}]}))
    path.chmod(0o600)
    return path
