#!/usr/bin/env python3
"""A throwaway HTTPS stand-in for the watch-layer comparison's smoke run: serves N synthetic Pods
(each about the size of a real one: labels, annotations, managedFields, two containers with ports,
conditions) on GET /api/v1/pods in pages (limit, continue), and a watch that sends one BOOKMARK and
then stays silent until timeoutSeconds. Not an API server: no other path, no auth check.

Usage: stub.py --pods N --port 8443 --dir DIR   (writes DIR/ca.pem, DIR/kubeconfig, then serves)
"""
import argparse, json, os, ssl, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse, parse_qs

RV = "1000"

def pod(i):
    name = f"pod-{i:06d}"
    ns = f"ns-{i % 100:03d}"
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": ns, "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(500 + i % 500), "creationTimestamp": "2026-12-06T10:00:00Z",
            "labels": {"app": f"app-{i % 50}", "pod-template-hash": "5d8f7c9b6", "tier": "web"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-06T09:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"app-{i % 50}-5d8f7c9b6",
                                 "uid": "11111111-2222-3333-4444-555555555555", "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-12-06T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:tier": {}}},
                                            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}}},
                              {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                               "time": "2026-12-06T10:00:05Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:status": {"f:conditions": {}, "f:podIP": {}, "f:podIPs": {}}}}],
        },
        "spec": {
            "nodeName": f"node-{i % 1000:04d}", "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
            "containers": [
                {"name": "web", "image": "registry.k8s.io/nginx:1.27", "imagePullPolicy": "IfNotPresent",
                 "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                 "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"},
                {"name": "sidecar", "image": "registry.k8s.io/pause:3.10", "imagePullPolicy": "IfNotPresent",
                 "ports": [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]},
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        },
        "status": {
            "phase": "Running", "podIP": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
            "podIPs": [{"ip": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"}],
            "hostIP": "192.168.0.1", "qosClass": "Burstable", "startTime": "2026-12-06T10:00:01Z",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-12-06T10:00:05Z"}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "web", "ready": True, "restartCount": 0, "image": "registry.k8s.io/nginx:1.27",
                                   "imageID": "sha256:" + "a" * 64, "containerID": "containerd://" + "b" * 64,
                                   "started": True, "state": {"running": {"startedAt": "2026-12-06T10:00:04Z"}}}],
        },
    }

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_GET(self):
        u = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        if u.path != "/api/v1/pods":
            body = b'{"kind":"Status","code":404}'
            self.send_response(404); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body); return
        if q.get("watch") in ("1", "true"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            line = json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": RV}}}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line)); self.wfile.flush()
            time.sleep(min(int(q.get("timeoutSeconds", "60")), 600))
            self.wfile.write(b"0\r\n\r\n"); return
        limit = int(q.get("limit", "0") or 0) or N
        start = int(q.get("continue", "0") or 0)
        end = min(start + limit, N)
        meta = {"resourceVersion": RV}
        if end < N:
            meta["continue"] = str(end)
        body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                           "items": [pod(i) for i in range(start, end)]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

def main():
    global N
    p = argparse.ArgumentParser()
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--port", type=int, default=8443)
    p.add_argument("--dir", default="/tmp/watch-compare")
    a = p.parse_args()
    N = a.pods
    os.makedirs(a.dir, exist_ok=True)
    d = lambda n: os.path.join(a.dir, n)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *c: subprocess.run(list(c), check=True, capture_output=True)
    run("openssl", "req", "-x509", *ec, "-keyout", d("ca-key.pem"), "-out", d("ca.pem"), "-days", "2",
        "-subj", "/CN=stub-ca", "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    run("openssl", "req", *ec, "-keyout", d("key.pem"), "-out", d("csr.pem"), "-subj", "/CN=localhost")
    with open(d("ext.cnf"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", d("csr.pem"), "-CA", d("ca.pem"), "-CAkey", d("ca-key.pem"),
        "-CAcreateserial", "-out", d("crt.pem"), "-days", "2", "-extfile", d("ext.cnf"))
    key, crt = d("key.pem"), d("crt.pem")
    import base64
    ca = base64.b64encode(open(d("ca.pem"), "rb").read()).decode()
    with open(os.path.join(a.dir, "kubeconfig"), "w") as f:
        f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: stub
  cluster:
    server: https://127.0.0.1:{a.port}
    certificate-authority-data: {ca}
users:
- name: stub
  user:
    token: stub-token
contexts:
- name: stub
  context: {{cluster: stub, user: stub}}
current-context: stub
""")
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(f"serving {N} pods on https://127.0.0.1:{a.port}, kubeconfig {a.dir}/kubeconfig", flush=True)
    srv.serve_forever()

if __name__ == "__main__":
    main()
