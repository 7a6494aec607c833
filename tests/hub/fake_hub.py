"""A Hub-shaped HTTP server on 127.0.0.1 for tests: the endpoints huggingface_hub calls to list a
revision and download its files, with the Hub's headers, and faults on demand.

    GET  /api/models/{repo}[/revision/{rev}]        model info (siblings with sizes and checksums)
    HEAD /{repo}/resolve/{rev}/{path}               ETag, X-Repo-Commit, X-Linked-Etag/-Size
    GET  /{repo}/resolve/{rev}/{path}               the bytes, a Range honoured (206)

Errors carry the Hub's `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo),
which huggingface_hub turns into its exception classes. Faults: `cut(path, at)` ends the next
download of a file after `at` bytes (the connection closed mid-body), `corrupt(path)` serves it
with a byte changed under the right checksum. Every request is recorded (`seen`).
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

#: files stored in LFS on the Hub (checksum: sha256); others are plain git blobs (git oid)
LFS_SUFFIXES = (".gguf", ".safetensors", ".bin")


@dataclass(frozen=True)
class HubFile:
    data: bytes
    #: the size the Hub states, when it is not the data's (a file too large to hold)
    stated_size: int | None = None

    @property
    def size(self) -> int:
        return self.stated_size if self.stated_size is not None else len(self.data)

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @cached_property
    def git_oid(self) -> str:
        return hashlib.sha1(f"blob {len(self.data)}\0".encode() + self.data).hexdigest()


@dataclass
class HubRepo:
    """Commits (id -> files by path) and the branches and tags that name them."""

    commits: dict[str, dict[str, HubFile]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    #: a gated repo: downloads need `Authorization: Bearer <token>`
    token: str | None = None

    def add_commit(self, name: str, files: dict[str, HubFile], *refs: str) -> str:
        commit = hashlib.sha1(f"{name}:{sorted(files)}".encode()).hexdigest()
        self.commits[commit] = files
        for ref in refs:
            self.refs[ref] = commit
        return commit

    def commit_of(self, revision: str) -> str | None:
        return revision if revision in self.commits else self.refs.get(revision)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    range: str | None
    authorization: str | None


class FakeHub:
    """The server; `url` is its HF_ENDPOINT. A context manager: it stops itself on exit."""

    def __init__(self, repos: dict[str, HubRepo]):
        self.repos = repos
        self.seen: list[Seen] = []
        self._cuts: dict[str, int] = {}
        self._corrupt: set[str] = set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def cut(self, path: str, at: int) -> None:
        """The next GET of the file `path` (any repo) sends `at` bytes, then drops the connection."""
        self._cuts[path] = at

    def corrupt(self, path: str) -> None:
        """GETs of `path` send the file with its middle byte changed."""
        self._corrupt.add(path)

    def gets(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == "GET" and s.path.endswith("/" + path)]

    def take_cut(self, path: str) -> int | None:
        with self._lock:
            return self._cuts.pop(path, None)

    def body_of(self, path: str, file: HubFile) -> bytes:
        if path not in self._corrupt:
            return file.data
        data = bytearray(file.data)
        data[len(data) // 2] ^= 0xFF
        return bytes(data)


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.seen.append(
                Seen(self.command, path, self.headers.get("Range"), self.headers.get("Authorization"))
            )
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"]:
                self._info(parts[2:])
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head)
            else:
                self._error(404, "NotFound")

        def _info(self, parts: list[str]) -> None:
            repo_id = "/".join(parts[:2])
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound")
            revision = parts[3] if len(parts) >= 4 and parts[2] == "revision" else "main"
            commit = repo.commit_of(revision)
            if commit is None:
                return self._error(404, "RevisionNotFound")
            siblings = [_sibling(p, f) for p, f in sorted(repo.commits[commit].items())]
            body = {
                "id": repo_id,
                "modelId": repo_id,
                "sha": commit,
                "private": False,
                "gated": "auto" if repo.token else False,
                "disabled": False,
                "siblings": siblings,
            }
            self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

        def _resolve(self, repo_id: str, revision: str, path: str, head: bool) -> None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound")
            if repo.token is not None and self.headers.get("Authorization") != f"Bearer {repo.token}":
                status = 403 if self.headers.get("Authorization") else 401
                return self._error(status, "GatedRepo", "Access to this model is restricted")
            commit = repo.commit_of(revision)
            if commit is None:
                return self._error(404, "RevisionNotFound")
            file = repo.commits[commit].get(path)
            if file is None:
                return self._error(404, "EntryNotFound", commit=commit)
            etag = file.sha256 if path.endswith(LFS_SUFFIXES) else file.git_oid
            headers = {"ETag": f'"{etag}"', "X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
            if path.endswith(LFS_SUFFIXES):
                headers |= {"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(file.size)}
            if head:
                return self._send(200, b"", {**headers, "Content-Length": str(file.size)}, head=True)
            self._download(hub.body_of(path, file), path, headers)

        def _download(self, data: bytes, path: str, headers: dict[str, str]) -> None:
            start = _range_start(self.headers.get("Range"))
            status = 206 if start else 200
            if start:
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            body = data[start:]
            cut = hub.take_cut(path)
            if cut is None:
                return self._send(status, body, headers)
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

        def _error(self, status: int, code: str, message: str = "", commit: str | None = None) -> None:
            headers = {"X-Error-Code": code, "Content-Type": "application/json"}
            if message:
                headers["X-Error-Message"] = message
            if commit:
                headers["X-Repo-Commit"] = commit
            body = b"" if self.command == "HEAD" else json.dumps({"error": code}).encode()
            self._send(status, body, headers, head=self.command == "HEAD")

        def _send(self, status: int, body: bytes, headers: dict[str, str], head: bool = False) -> None:
            self.send_response(status)
            headers = {"Content-Length": str(len(body)), **headers}
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if not head:
                self.wfile.write(body)

    return Handler


def _sibling(path: str, file: HubFile) -> dict[str, object]:
    if path.endswith(LFS_SUFFIXES):
        lfs = {"size": file.size, "sha256": file.sha256, "pointerSize": 134}
        return {"rfilename": path, "size": file.size, "blobId": file.git_oid, "lfs": lfs}
    return {"rfilename": path, "size": file.size, "blobId": file.git_oid}


def _range_start(header: str | None) -> int:
    if not header or not header.startswith("bytes="):
        return 0
    return int(header.removeprefix("bytes=").split("-", 1)[0] or 0)
