#!/usr/bin/env python3
"""A read-only OCI distribution registry for the Kubernetes test node (tests/k8s/node.sh).

Serves the images tests/k8s/build.sh saved as OCI image layouts (one folder per repository,
<root>/<name>/{index.json,blobs/sha256/...}) on 127.0.0.1, so that containerd resolves and
pulls `localhost/<name>:<tag>` like any registry image: a pod whose image is
`localhost/roce-ipvlan-testpod:latest` gets the default pull policy Always, and the pull must
succeed. Only what a pull needs: GET/HEAD of /v2/, of manifests by tag or digest and of blobs.

    registry.py ROOT PORT
"""
import http.server
import json
import os
import re
import shutil
import sys
import urllib.parse

ROOT = sys.argv[1]
PORT = int(sys.argv[2])
PATH = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")


def manifest(name, ref):
    """(media type, path) of the manifest NAME:REF, tag or digest, or None."""
    layout = os.path.join(ROOT, name)
    try:
        with open(os.path.join(layout, "index.json")) as f:
            index = json.load(f)
    except OSError:
        return None
    for d in index.get("manifests", []):
        tag = d.get("annotations", {}).get("org.opencontainers.image.ref.name")
        if ref in (tag, d["digest"]):
            return d["mediaType"], blob_path(name, d["digest"])
    if ref.startswith("sha256:") and os.path.exists(blob_path(name, ref)):
        with open(blob_path(name, ref)) as f:
            kind = json.load(f).get("mediaType", "application/vnd.oci.image.manifest.v1+json")
        return kind, blob_path(name, ref)
    return None


def blob_path(name, digest):
    algo, _, hexdigest = digest.partition(":")
    if algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
        return "/nonexistent"
    return os.path.join(ROOT, name, "blobs", "sha256", hexdigest)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):
        self.serve(body=False)

    def do_GET(self):
        self.serve(body=True)

    def serve(self, body):
        # containerd adds ?ns=<registry host> to every request: the path alone names the object.
        path = urllib.parse.urlsplit(self.path).path
        if path.rstrip("/") == "/v2":
            return self.reply(200, "application/json", b"{}", body)
        m = PATH.match(path)
        if not m:
            return self.reply(404, "text/plain", b"not found\n", body)
        name, kind, ref = m["name"], m["kind"], m["ref"]
        if kind == "manifests":
            found = manifest(name, ref)
            if not found:
                return self.reply(404, "text/plain", b"manifest unknown\n", body)
            media, path = found
        else:
            media, path = "application/octet-stream", blob_path(name, ref)
        try:
            f = open(path, "rb")
        except OSError:
            return self.reply(404, "text/plain", b"blob unknown\n", body)
        with f:
            size = os.fstat(f.fileno()).st_size
            self.send_response(200)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(size))
            self.send_header("Docker-Content-Digest", "sha256:" + os.path.basename(path))
            self.end_headers()
            if body:
                shutil.copyfileobj(f, self.wfile, 1 << 20)

    def reply(self, code, media, data, body):
        self.send_response(code)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, fmt, *args):
        sys.stderr.write("registry: " + fmt % args + "\n")


if __name__ == "__main__":
    http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
