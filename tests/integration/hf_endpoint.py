"""A Hugging Face hub in small, for HF_ENDPOINT: it serves the repos a test publishes from local
directories with what huggingface_hub's snapshot_download asks of a hub (2.x, file_download.py
and hf_api.py), and counts every request. Given a token, it answers only requests that bear it
(a private model: 401 otherwise, as the Hub does).

    GET  /api/models/{repo}/revision/{rev}   the commit of a branch or commit: {id, sha, siblings}
    GET  /api/models/{repo}/tree/{commit}    its files: [{type, path, size, oid}]
    HEAD /{repo}/resolve/{rev}/{file}        X-Repo-Commit, ETag, Content-Length (no Xet headers:
    GET  /{repo}/resolve/{rev}/{file}        plain HTTP) and, for GET, the bytes
"""

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO = r"(?P<repo>[^/]+/[^/]+)"
ROUTES = (
    ("revision", re.compile(rf"/api/models/{REPO}/revision/(?P<rev>[^/]+)")),
    ("tree", re.compile(rf"/api/models/{REPO}/tree/(?P<rev>[^/]+)")),
    ("resolve", re.compile(rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<file>.+)")),
)


class Hub:
    """The hub, listening on address (one of the test's own) until close()."""

    def __init__(self, address, token=None):
        self.token = token
        self.commits = {}  # commit -> {file: bytes}
        self.branches = {}  # (repo, branch) -> commit
        # (method, what: revision, tree or resolve, repo, rev, file or None, the client's address)
        self.requests = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((address, 0), self.handler())
        self.url = f"http://{address}:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def publish(self, repo, directory):
        """Commit directory's files as repo's main branch; returns the commit hash."""
        files = {str(p.relative_to(directory)): p.read_bytes()
                 for p in sorted(Path(directory).rglob("*")) if p.is_file()}
        commit = hashlib.sha1(json.dumps(
            [repo, {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}]
        ).encode()).hexdigest()
        with self.lock:
            self.commits[commit] = files
            self.branches[repo, "main"] = commit
        return commit

    def downloads(self):
        """{file: times its bytes were sent} (GETs of resolve)."""
        found = {}
        for method, what, _, _, name, _ in self.requests:
            if method == "GET" and what == "resolve":
                found[name] = found.get(name, 0) + 1
        return found

    def resolve(self, repo, rev):
        commit = self.branches.get((repo, rev), rev)
        return commit if commit in self.commits else None

    def handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.answer(body=True)

            def do_HEAD(self):
                self.answer(body=False)

            def answer(self, body):
                path = unquote(urlsplit(self.path).path)
                what, match = next(((what, found) for what, route in ROUTES
                                    if (found := route.fullmatch(path))), (None, None))
                if match is None:
                    return self.send(404, b"{}", body)
                if hub.token and self.headers.get("Authorization") != f"Bearer {hub.token}":
                    return self.send(401, b'{"error": "Invalid credentials"}', body)
                repo, rev = match["repo"], match["rev"]
                name = match.groupdict().get("file")
                with hub.lock:
                    hub.requests.append((self.command, what, repo, rev, name,
                                         self.client_address[0]))
                    commit = hub.resolve(repo, rev)
                    files = hub.commits.get(commit, {})
                if commit is None or (name is not None and name not in files):
                    return self.send(404, b"{}", body, {"X-Error-Code": "EntryNotFound"})
                if what == "revision":
                    info = {"id": repo, "sha": commit,
                            "siblings": [{"rfilename": f} for f in files]}
                    return self.send(200, json.dumps(info).encode(), body)
                if what == "tree":
                    tree = [{"type": "file", "path": f, "size": len(data),
                             "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
                            for f, data in files.items()]
                    return self.send(200, json.dumps(tree).encode(), body)
                data = files[name]
                self.send(200, data, body, {"X-Repo-Commit": commit,
                                            "ETag": f'"{hashlib.sha256(data).hexdigest()}"'})

            def send(self, status, data, body, headers=None):
                self.send_response(status)
                for key, value in {"Content-Length": str(len(data)), **(headers or {})}.items():
                    self.send_header(key, value)
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def log_message(self, *args):
                pass

        return Handler
