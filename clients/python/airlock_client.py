"""Python client for the airlock HTTP API (``airlock serve``).

Standard library only (Python 3.9+): copy this file next to your code.

    import airlock_client

    client = airlock_client.Client("http://127.0.0.1:8080", token)
    with client.create_session(policy="version: 1\\nallowed_tools: [python3]\\n") as s:
        s.upload("job.py", b"print(6 * 7)\\n")
        report = s.exec(["python3", "job.py"], on_output=lambda stream, text: print(text, end=""))
        print(report["exit_code"])

Every answer the server refuses becomes an :class:`AirlockError` carrying the
HTTP status, the API's error code, its message and the whole error object
(with ``denial``, ``exceeds`` or ``problems`` when the server sends them).
A command that fails, is denied or is halted by a budget is not an error: it
is the report that :meth:`Session.exec` returns, as in the Go client.

The server is not trusted with the client's memory: every answer is read
with a size cap (``max_answer`` for JSON answers and each line of a stream,
``max_error`` for error bodies, ``max_download`` for files), and an answer
that breaks the protocol (bad JSON, a stream without its report) raises a
:class:`ProtocolError`. Redirects are never followed and proxy variables are
never used, so the bearer token goes to the base URL's host only. File paths
are percent-encoded segment by segment and never cleaned here: ``..`` and
absolute paths reach the server's guard as they were given, and no path can
add a query string or leave the ``/files/`` route.
"""

import http.client
import json
import math
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

__all__ = ["AirlockError", "ProtocolError", "Client", "Session", "OutputCallback"]

#: on_output(stream, text): stream is "stdout" or "stderr", text one chunk.
OutputCallback = Callable[[str, str], None]

_MIB = 1 << 20


class AirlockError(Exception):
    """An error answered by the server, or a failure to reach it.

    Attributes: ``status`` (the HTTP status; 0 when no answer came),
    ``code`` (the API's error code, e.g. ``denied``, ``session_ended``,
    ``bad_policy``; ``http_STATUS`` for an answer that is not the API's,
    ``connection_failed`` when the server could not be reached), ``message``
    and ``error``, the whole error object as a dict (``denial`` on 403
    denied, ``exceeds`` on 403 exceeds_ceiling, ``problems`` on 400
    bad_policy).
    """

    def __init__(self, status: int, code: str, message: str, error: Optional[Dict[str, Any]] = None):
        self.status = status
        self.code = code
        self.message = message
        self.error = error if error is not None else {"code": code, "message": message}
        super().__init__("airlock: %s (HTTP %d): %s" % (code, status, message))

    @property
    def denial(self) -> Optional[Dict[str, Any]]:
        """The structured denial of a 403 denied, or None."""
        d = self.error.get("denial")
        return d if isinstance(d, dict) else None


class ProtocolError(AirlockError):
    """The server broke the API's protocol: an answer that is not JSON,
    too large, or a stream that ended without its report. ``code`` is
    ``protocol_error``."""

    def __init__(self, status: int, message: str):
        super().__init__(status, "protocol_error", message)


def _duration(value: Union[str, int, float], what: str) -> str:
    """A Go duration string from a string (sent as is) or seconds."""
    if isinstance(value, str):
        if not value:
            raise ValueError("%s: empty duration: give e.g. \"30s\" or a number of seconds" % what)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s: want a Go duration string such as \"30m\" or seconds as a number, not %s" % (what, type(value).__name__))
    if not math.isfinite(value) or value <= 0:
        raise ValueError("%s: %r seconds: give a positive, finite number" % (what, value))
    if isinstance(value, int):
        return "%ds" % value
    ms = int(round(value * 1000))
    if ms <= 0:
        raise ValueError("%s: %r seconds is below a millisecond: give more" % (what, value))
    return "%dms" % ms


def _escape_path(path: str) -> str:
    """Percent-encode each segment of path, keeping the slashes."""
    if not isinstance(path, str):
        raise TypeError("file path: want str, not %s" % type(path).__name__)
    if path == "":
        raise ValueError("file path: empty: name a file, relative to the workspace or absolute")
    try:
        return "/".join(urllib.parse.quote(seg, safe="", errors="strict") for seg in path.split("/"))
    except UnicodeEncodeError as e:
        raise ValueError("file path %r: not encodable as UTF-8: %s" % (path, e)) from None


class Client:
    """A client of one airlock server with one bearer token.

    ``base_url`` is ``http://HOST:PORT`` or ``https://HOST:PORT`` (a path
    prefix is kept). ``token`` is the bearer token alone (an empty token
    sends no Authorization header, for a server run with
    --insecure-no-auth). ``timeout`` (seconds) bounds connecting and each
    wait for the server's bytes in every call except exec; ``exec_timeout``
    bounds the waits of an exec that has no ``timeout`` of its own (with
    one, it is that timeout plus ``timeout``). ``max_answer`` caps a JSON
    answer and each line of a stream, ``max_error`` an error body and
    ``max_download`` a downloaded file, in bytes.

    Each call uses its own connection, so a Client is safe to use from
    several threads.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        timeout: float = 60.0,
        exec_timeout: float = 3600.0,
        max_answer: int = 64 * _MIB,
        max_error: int = 1 * _MIB,
        max_download: int = 64 * _MIB,
    ):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment or u.username or u.password:
            raise ValueError("base URL %r: want http://HOST:PORT or https://HOST:PORT, without user, query or fragment" % base_url)
        try:
            u.port  # raises ValueError on a bad port
        except ValueError as e:
            raise ValueError("base URL %r: %s" % (base_url, e)) from None
        if not isinstance(token, str) or any(c in token for c in " \t\r\n\0"):
            raise ValueError("token: want the token alone as a str, without \"Bearer\" or white space")
        for name, v in (("timeout", timeout), ("exec_timeout", exec_timeout)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError("%s: %r: give a positive number of seconds" % (name, v))
        for name, v in (("max_answer", max_answer), ("max_error", max_error), ("max_download", max_download)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError("%s: %r: give a positive number of bytes" % (name, v))
        self.base_url = base_url
        self._https = u.scheme == "https"
        self._netloc = u.netloc
        self._prefix = u.path.rstrip("/")
        self._token = token
        self.timeout = float(timeout)
        self.exec_timeout = float(exec_timeout)
        self.max_answer = max_answer
        self.max_error = max_error
        self.max_download = max_download

    # -- transport ---------------------------------------------------------

    def _open(self, method: str, path: str, body: Optional[bytes] = None, content_type: Optional[str] = None,
              timeout: Optional[float] = None) -> "tuple[http.client.HTTPConnection, http.client.HTTPResponse]":
        """Send one request on a new connection; return the connection and
        a response with a status below 300, or raise AirlockError."""
        t = self.timeout if timeout is None else timeout
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(self._netloc, timeout=t)  # verifies the certificate
        else:
            conn = http.client.HTTPConnection(self._netloc, timeout=t)
        headers = {"Accept": "application/json, application/x-ndjson, application/octet-stream", "Connection": "close"}
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        if content_type:
            headers["Content-Type"] = content_type
        target = self._prefix + path
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise AirlockError(0, "connection_failed", "%s %s: %s: check the server's address and that it runs" % (method, path, e)) from e
        if resp.status >= 300:
            try:
                raise self._error_from(resp)
            finally:
                conn.close()
        return conn, resp

    def _error_from(self, resp: http.client.HTTPResponse) -> AirlockError:
        """The AirlockError of an error answer, read up to max_error bytes."""
        try:
            data = resp.read(self.max_error + 1)
        except (OSError, http.client.HTTPException) as e:
            return AirlockError(resp.status, "http_%d" % resp.status, "the error answer could not be read: %s" % e)
        if len(data) > self.max_error:
            return AirlockError(resp.status, "http_%d" % resp.status,
                                "the error answer is larger than %d bytes (max_error): not an airlock API answer; it begins %r"
                                % (self.max_error, data[:200]))
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            body = None
        err = body.get("error") if isinstance(body, dict) else None
        if not isinstance(err, dict) or not isinstance(err.get("code"), str) or not isinstance(err.get("message", ""), str):
            text = data[:200].decode("utf-8", "replace").strip()
            return AirlockError(resp.status, "http_%d" % resp.status, "not an airlock API answer: %s" % text)
        return AirlockError(resp.status, err["code"], err.get("message", ""), err)

    def _read_all(self, resp: http.client.HTTPResponse, limit: int, what: str) -> bytes:
        """The whole body of resp, or ProtocolError when it exceeds limit."""
        length = resp.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise ProtocolError(resp.status, "%s: the answer is %s bytes, more than the %d allowed: raise the client's limit" % (what, length, limit))
        try:
            data = resp.read(limit + 1)
        except (OSError, http.client.HTTPException) as e:
            raise AirlockError(resp.status, "connection_failed", "%s: reading the answer: %s" % (what, e)) from e
        if len(data) > limit:
            raise ProtocolError(resp.status, "%s: the answer is larger than %d bytes: raise the client's limit" % (what, limit))
        return data

    def _json(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None) -> Any:
        """Send body as JSON (None sends none) and return the decoded
        answer (None for an empty one, e.g. 204)."""
        payload = None if body is None else json.dumps(body).encode("utf-8")
        conn, resp = self._open(method, path, payload, "application/json" if payload is not None else None, timeout)
        try:
            data = self._read_all(resp, self.max_answer, "%s %s" % (method, path))
        finally:
            conn.close()
        if not data.strip():
            return None
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolError(resp.status, "%s %s: the answer is not JSON: %s" % (method, path, e)) from None

    def _object(self, method: str, path: str, body: Any = None, key: Optional[str] = None) -> Any:
        """_json, checking that the answer is an object (with key, if given)."""
        out = self._json(method, path, body)
        if not isinstance(out, dict) or (key is not None and key not in out):
            raise ProtocolError(200, "%s %s: the answer is not the expected JSON object%s" % (method, path, "" if key is None else " with %r" % key))
        return out

    # -- API ---------------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        """GET /v1/health: the server's status object ({"status": "ok"})."""
        return self._object("GET", "/v1/health", key="status")

    def openapi(self) -> str:
        """GET /v1/openapi.yaml: the API's OpenAPI document."""
        conn, resp = self._open("GET", "/v1/openapi.yaml")
        try:
            return self._read_all(resp, self.max_answer, "GET /v1/openapi.yaml").decode("utf-8", "replace")
        finally:
            conn.close()

    def create_session(self, policy: Optional[str] = None, policy_name: Optional[str] = None) -> "Session":
        """Start a session. Give exactly one of ``policy`` (the YAML or JSON
        text of a policy file) and ``policy_name`` (a policy in the server's
        --policy-dir). Refusals (bad_policy, exceeds_ceiling,
        grant_not_found, quota_exceeded, ...) raise AirlockError."""
        if (policy is None) == (policy_name is None):
            raise ValueError("create_session: give exactly one of policy (the policy text) and policy_name")
        body = {"policy": policy} if policy is not None else {"policy_name": policy_name}
        info = self._object("POST", "/v1/sessions", body, key="id")
        if not isinstance(info["id"], str) or not info["id"]:
            raise ProtocolError(201, "POST /v1/sessions: the answer's id is not a string")
        return Session(self, info["id"], info)

    def sessions(self) -> List[Dict[str, Any]]:
        """GET /v1/sessions: this token's live sessions, oldest first."""
        out = self._object("GET", "/v1/sessions", key="sessions")
        if out["sessions"] is None:
            return []
        if not isinstance(out["sessions"], list):
            raise ProtocolError(200, "GET /v1/sessions: sessions is not a list")
        return out["sessions"]

    def session(self, session_id: str) -> "Session":
        """A handle on an existing session id; it does not check that the
        session exists."""
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session: want a non-empty session id")
        return Session(self, session_id)


class Session:
    """A handle on one session, from :meth:`Client.create_session` or
    :meth:`Client.session`. ``id`` is its id, ``snapshot`` the session JSON
    the server sent when it was created (None for Client.session). Used as a
    context manager, it destroys the session on exit."""

    def __init__(self, client: Client, session_id: str, snapshot: Optional[Dict[str, Any]] = None):
        self.client = client
        self.id = session_id
        self.snapshot = snapshot

    def __repr__(self) -> str:
        return "Session(%r)" % self.id

    def __enter__(self) -> "Session":
        """The session itself."""
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Destroy the session; one that has ended already is fine."""
        try:
            self.destroy()
        except AirlockError as e:
            # An ended session needs no destroying, and an error here must
            # not hide the one the with-block raised.
            if e.status not in (404, 410) and exc_type is None:
                raise

    def _path(self, suffix: str = "") -> str:
        return "/v1/sessions/" + urllib.parse.quote(self.id, safe="") + suffix

    def _file(self, path: str) -> str:
        return self._path("/files/" + _escape_path(path))

    def info(self) -> Dict[str, Any]:
        """GET /v1/sessions/{id}: deadlines, workspace, usage and denials."""
        return self._object_call("GET", self._path())

    def _object_call(self, method: str, path: str, body: Any = None) -> Dict[str, Any]:
        return self.client._object(method, path, body)

    def exec(
        self,
        args: Sequence[str],
        dir: Optional[str] = None,
        env: Optional[Sequence[str]] = None,
        stdin: Optional[str] = None,
        timeout: Union[str, int, float, None] = None,
        on_output: Optional[OutputCallback] = None,
        pty: bool = False,
    ) -> Dict[str, Any]:
        """Run a command in the session and return its report (a dict, as
        ``airlock run --json`` prints it).

        ``args[0]`` must be in the policy's allowed_tools. ``dir`` is the
        working directory (default the workspace), ``env`` NAME=value
        strings, ``stdin`` the standard input text, ``timeout`` a Go
        duration string or seconds (default and at most the policy's
        max_wall), ``pty`` runs it on a pseudo-terminal.

        With ``on_output``, the output is streamed: on_output(stream, text)
        is called from this thread for each chunk, in order, as the server
        sends it; an exception it raises ends the exec (the connection is
        closed) and propagates. A command that fails, is denied or is
        halted is a report, never an exception; AirlockError is about the
        request or the session (status 410, code session_ended once it
        has ended).
        """
        if isinstance(args, (str, bytes)) or not args or not all(isinstance(a, str) for a in args):
            raise ValueError("exec: args: want a non-empty list of strings, the command first, e.g. [\"python3\", \"job.py\"]")
        body: Dict[str, Any] = {"args": list(args)}
        if dir is not None:
            body["dir"] = dir
        if env is not None:
            if isinstance(env, str) or not all(isinstance(e, str) for e in env):
                raise ValueError("exec: env: want a list of NAME=value strings")
            body["env"] = list(env)
        if stdin is not None:
            body["stdin"] = stdin
        if pty:
            body["pty"] = True
        wait = self.client.exec_timeout
        if timeout is not None:
            body["timeout"] = _duration(timeout, "exec timeout")
            if not isinstance(timeout, str):
                wait = float(timeout) + self.client.timeout
        if on_output is None:
            out = self.client._json("POST", self._path("/exec"), body, timeout=wait)
            if not isinstance(out, dict) or not isinstance(out.get("report"), dict):
                raise ProtocolError(200, "exec: the answer has no report")
            return out["report"]
        payload = json.dumps(body).encode("utf-8")
        conn, resp = self.client._open("POST", self._path("/exec?stream=1"), payload, "application/json", wait)
        try:
            ctype = (resp.getheader("Content-Type") or "").split(";")[0].strip()
            if ctype == "application/json":
                # A server that does not stream answers as a plain exec.
                data = self.client._read_all(resp, self.client.max_answer, "exec")
                try:
                    out = json.loads(data.decode("utf-8"))
                except (UnicodeDecodeError, ValueError) as e:
                    raise ProtocolError(resp.status, "exec: the answer is not JSON: %s" % e) from None
                if not isinstance(out, dict) or not isinstance(out.get("report"), dict):
                    raise ProtocolError(resp.status, "exec: the answer has no report")
                return out["report"]
            return _read_stream(resp, self.client.max_answer, on_output)
        finally:
            conn.close()

    def upload(self, path: str, data: Union[bytes, bytearray, memoryview]) -> Dict[str, Any]:
        """PUT the bytes as the file at path (relative to the workspace, or
        absolute), creating parent directories; returns {"path", "size"}."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("upload %r: want bytes, not %s (encode text first)" % (path, type(data).__name__))
        target = self._file(path)
        conn, resp = self.client._open("PUT", target, bytes(data), "application/octet-stream")
        try:
            raw = self.client._read_all(resp, self.client.max_answer, "upload %r" % path)
        finally:
            conn.close()
        try:
            out = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolError(resp.status, "upload %r: the answer is not JSON: %s" % (path, e)) from None
        return out if isinstance(out, dict) else {}

    def download(self, path: str) -> bytes:
        """GET the content of the file at path; at most the client's
        max_download bytes (else ProtocolError)."""
        conn, resp = self.client._open("GET", self._file(path))
        try:
            return self.client._read_all(resp, self.client.max_download, "download %r (max_download)" % path)
        finally:
            conn.close()

    def list(self, dir: Optional[str] = None) -> List[Dict[str, Any]]:
        """The entries of dir (relative to the workspace or absolute;
        default the workspace), sorted by name: dicts with name, type
        (file, dir, symlink, other), size and mode."""
        p = self._path("/files")
        if dir is not None:
            p += "?" + urllib.parse.urlencode({"dir": dir})
        out = self.client._object("GET", p, key="entries")
        entries = out["entries"]
        if entries is None:
            return []
        if not isinstance(entries, list):
            raise ProtocolError(200, "list: entries is not a list")
        return entries

    def delete(self, path: str) -> None:
        """Delete a file, a symlink or an empty directory."""
        self.client._json("DELETE", self._file(path))

    def extend(self, by: Union[str, int, float]) -> Dict[str, Any]:
        """Move the session's end ``by`` past its current end (a Go duration
        such as "30m", or seconds), never beyond its max_deadline; returns
        the session with its new deadline."""
        return self._object_call("POST", self._path("/extend"), {"by": _duration(by, "extend")})

    def destroy(self) -> None:
        """End the session and everything running in it."""
        self.client._json("DELETE", self._path())


def _read_stream(resp: http.client.HTTPResponse, limit: int, on_output: OutputCallback) -> Dict[str, Any]:
    """Read NDJSON events line by line until the report or an error line."""
    while True:
        try:
            line = resp.readline(limit + 1)
        except (OSError, http.client.HTTPException) as e:
            raise AirlockError(resp.status, "connection_failed", "exec stream: the connection broke before the report: %s" % e) from e
        if not line:
            raise ProtocolError(resp.status, "exec stream: ended without a report: the connection was cut")
        if len(line) > limit and not line.endswith(b"\n"):
            raise ProtocolError(resp.status, "exec stream: a line is longer than %d bytes: raise the client's max_answer" % limit)
        if not line.strip():
            continue
        try:
            ev = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolError(resp.status, "exec stream: a line is not JSON: %s" % e) from None
        if not isinstance(ev, dict):
            raise ProtocolError(resp.status, "exec stream: a line is not a JSON object")
        if "report" in ev:
            if not isinstance(ev["report"], dict):
                raise ProtocolError(resp.status, "exec stream: the report is not an object")
            return ev["report"]
        if "error" in ev:
            err = ev["error"]
            if not isinstance(err, dict) or not isinstance(err.get("code"), str):
                raise ProtocolError(resp.status, "exec stream: the error line is not an API error")
            # The stream began with 200; the status is what a plain answer
            # would have had.
            status = 410 if err["code"] == "session_ended" else 500
            raise AirlockError(status, err["code"], str(err.get("message", "")), err)
        stream, data = ev.get("stream"), ev.get("data", "")
        if stream is not None:
            if stream not in ("stdout", "stderr") or not isinstance(data, str):
                raise ProtocolError(resp.status, "exec stream: an output line has stream %r: want stdout or stderr with string data" % (stream,))
            on_output(stream, data)
