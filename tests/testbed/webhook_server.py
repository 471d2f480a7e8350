"""A validating admission webhook that refuses every request it is sent, as a cluster's own
policy webhook (OPA Gatekeeper, Kyverno, a vendor's) refuses objects it does not like.

Run by ``test_admission.py`` inside the bed's control-plane network namespace, where the API
server reaches it on 127.0.0.1::

    python webhook_server.py PORT CERT KEY MESSAGE
"""

from __future__ import annotations

import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def review_response(review: dict, message: str) -> dict:
    """The AdmissionReview answer refusing ``review``'s request with ``message``.

    >>> review_response({"request": {"uid": "u1"}}, "no")["response"]
    {'uid': 'u1', 'allowed': False, 'status': {'code': 403, 'message': 'no'}}
    """
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": False,
                         "status": {"code": 403, "message": message}}}


def main(port: int, cert: str, key: str, message: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps(review_response(review, message)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet: the test reads the suite's output, not ours
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("serving", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
