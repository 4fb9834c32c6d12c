"""Tests of airlock_client against a real ``airlock serve`` and a hostile fake.

The real-server tests need the airlock binary in AIRLOCK_BIN (the e2e test
TestPythonClient builds it and runs this file); without it they are skipped,
or fail when AIRLOCK_TEST_STRICT=1. The fake-server tests always run: a
server that breaks the protocol must get a clear error and cost the client
bounded memory.

    AIRLOCK_BIN=/path/to/airlock python3 -m unittest -v clients/python/test_airlock_client.py
"""

import datetime
import http.server
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import tracemalloc
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import airlock_client  # noqa: E402
from airlock_client import AirlockError, Client, ProtocolError  # noqa: E402

POLICY = "version: 1\nallowed_tools: [sh, cat, python3]\n"
LISTENING = "airlock serve: listening on "
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


def parse_time(s):
    """An RFC 3339 time as the server writes it (nanoseconds, Z)."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", s)
    if m is None:
        raise ValueError("not an RFC 3339 time: %r" % s)
    frac = (m.group(2) or "")[:6].ljust(6, "0")
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.datetime.fromisoformat("%s.%s%s" % (m.group(1), frac, tz))


class RealServerTest(unittest.TestCase):
    """The client against a real ``airlock serve`` with a fresh token."""

    proc = None

    @classmethod
    def setUpClass(cls):
        binary = os.environ.get("AIRLOCK_BIN", "")
        if not binary:
            if os.environ.get("AIRLOCK_TEST_STRICT") == "1":
                raise RuntimeError("AIRLOCK_TEST_STRICT=1 and AIRLOCK_BIN is not set: set it to the airlock binary (with airlock-server next to it)")
            raise unittest.SkipTest("AIRLOCK_BIN is not set: set it to an airlock binary (with airlock-server next to it) to test against a real server")
        cls.token = secrets.token_hex(24)
        cls.tmp = tempfile.TemporaryDirectory(prefix="airlock-pyclient-")
        env = dict(os.environ, AIRLOCK_TOKEN=cls.token)
        cls.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--workspace-dir", cls.tmp.name],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        cls.log = []
        cls.log_lock = threading.Lock()
        url = []
        ready = threading.Event()

        def read_stderr():
            for raw in cls.proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                with cls.log_lock:
                    cls.log.append(line)
                if line.startswith(LISTENING) and not url:
                    url.append(line[len(LISTENING):].strip())
                    ready.set()
            ready.set()  # exited before listening

        cls.reader = threading.Thread(target=read_stderr, daemon=True)
        cls.reader.start()
        if not ready.wait(START_TIMEOUT) or not url:
            cls._stop()
            raise RuntimeError("airlock serve printed no address within %.0fs; log:\n%s" % (START_TIMEOUT, cls.server_log()))
        cls.url = url[0]
        cls.client = Client(cls.url, cls.token, timeout=30.0, exec_timeout=60.0)

    @classmethod
    def tearDownClass(cls):
        cls._stop()

    @classmethod
    def _stop(cls):
        if cls.proc is None:
            return
        proc, cls.proc = cls.proc, None
        proc.terminate()  # SIGTERM: the server closes every session
        try:
            code = proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
            raise RuntimeError("airlock serve did not stop within %.0fs of SIGTERM; log:\n%s" % (STOP_TIMEOUT, cls.server_log()))
        finally:
            cls.reader.join(STOP_TIMEOUT)
            proc.stderr.close()
            cls.tmp.cleanup()
        if code != 0:
            raise RuntimeError("airlock serve exited with %d after SIGTERM; log:\n%s" % (code, cls.server_log()))

    @classmethod
    def server_log(cls):
        with cls.log_lock:
            return "\n".join(cls.log)

    def new_session(self, policy=POLICY):
        s = self.client.create_session(policy=policy)
        self.addCleanup(self._destroy_quietly, s)
        return s

    @staticmethod
    def _destroy_quietly(s):
        try:
            s.destroy()
        except AirlockError as e:
            if e.status != 410:
                raise

    def assertAirlockError(self, status, code, fn, *args, **kwargs):
        """fn(...) raises AirlockError with status and code; returns it."""
        with self.assertRaises(AirlockError) as cm:
            fn(*args, **kwargs)
        e = cm.exception
        self.assertEqual((e.status, e.code), (status, code), "error %s; server log:\n%s" % (e, self.server_log()))
        self.assertEqual(e.error.get("code"), code)
        self.assertTrue(e.message)
        return e

    def test_health(self):
        self.assertEqual(self.client.health(), {"status": "ok"})
        self.assertIn("openapi:", self.client.openapi())

    def test_create_info_list(self):
        s = self.new_session()
        self.assertRegex(s.id, r"^[0-9a-f]+$")
        self.assertTrue(s.snapshot["workspace"])
        info = s.info()
        self.assertEqual(info["id"], s.id)
        self.assertEqual(info["workspace"], s.snapshot["workspace"])
        for key in ("created", "deadline", "max_deadline", "idle_deadline", "exec_wall", "usage"):
            self.assertIn(key, info)
        self.assertIn(s.id, [x["id"] for x in self.client.sessions()])
        self.assertEqual(self.client.session(s.id).info()["id"], s.id)

    def test_exec_plain(self):
        s = self.new_session()
        rep = s.exec(["python3", "-c", "import os, sys; print(os.environ['FOO'], sys.stdin.read()); sys.exit(3)"],
                     env=["FOO=bar"], stdin="baz")
        self.assertEqual(rep["exit_code"], 3, rep)
        self.assertEqual(rep["stdout"], "bar baz\n")
        self.assertIsNone(rep["halted_by"])
        self.assertEqual(rep["run_id"], s.id)

    def test_exec_streaming_is_incremental(self):
        # The command prints, then waits until the test reacts to that first
        # chunk (by uploading "go" from the callback); only then does it
        # print again and end. A client or server that held the output back
        # until the end would leave it waiting: it prints "timeout".
        s = self.new_session()
        script = (
            "import os, sys, time\n"
            "print('first', flush=True)\n"
            "print('to stderr', file=sys.stderr, flush=True)\n"
            "end = time.monotonic() + 20\n"
            "while not os.path.exists('go') and time.monotonic() < end:\n"
            "    time.sleep(0.02)\n"
            "print('second' if os.path.exists('go') else 'timeout', flush=True)\n"
        )
        events = []

        def on_output(stream, text):
            events.append((stream, text))
            if stream == "stdout" and "first" in text and not any(e[0] == "go" for e in events):
                s.upload("go", b"")
                events.append(("go", ""))

        rep = s.exec(["python3", "-c", script], on_output=on_output)
        self.assertEqual(rep["exit_code"], 0, rep)
        self.assertEqual(rep["stdout"], "first\nsecond\n", "events %r" % events)
        self.assertEqual(rep["stderr"], "to stderr\n")
        stdout = "".join(t for st, t in events if st == "stdout")
        self.assertEqual(stdout, "first\nsecond\n")
        self.assertEqual("".join(t for st, t in events if st == "stderr"), "to stderr\n")
        go = events.index(("go", ""))
        self.assertIn("first", "".join(t for st, t in events[:go] if st == "stdout"))
        self.assertNotIn("second", "".join(t for st, t in events[:go]))

    def test_exec_denied_is_a_report(self):
        s = self.new_session()
        rep = s.exec(["ls", "/"])  # not in allowed_tools
        self.assertNotEqual(rep["exit_code"], 0, rep)
        self.assertIn(("exec", "allowed_tools"), [(d["layer"], d["rule"]) for d in rep["denials"]], rep)
        rep = s.exec(["cat", "/etc/shadow"], on_output=lambda st, t: None)
        self.assertNotEqual(rep["exit_code"], 0, rep)
        self.assertEqual(rep["stdout"], "")

    def test_exec_timeout_halts(self):
        s = self.new_session()
        rep = s.exec(["python3", "-c", "import time; time.sleep(20)"], timeout=1)
        self.assertIsNotNone(rep["halted_by"], rep)
        self.assertNotEqual(rep["exit_code"], 0)

    def test_files(self):
        s = self.new_session()
        names = ["plain.txt", "a b?c=d&e#f é✓.txt", "sub dir/x?stream=1#frag", "%2e%2e"]
        for i, name in enumerate(names):
            out = s.upload(name, ("content %d\n" % i).encode())
            self.assertEqual(out, {"path": name, "size": len("content %d\n" % i)})
        for i, name in enumerate(names):
            self.assertEqual(s.download(name), ("content %d\n" % i).encode())
        top = {e["name"]: e for e in s.list()}
        self.assertEqual(set(top), {"plain.txt", "a b?c=d&e#f é✓.txt", "sub dir", "%2e%2e"})
        self.assertEqual(top["sub dir"]["type"], "dir")
        self.assertEqual(top["plain.txt"]["size"], len("content 0\n"))
        self.assertEqual([e["name"] for e in s.list("sub dir")], ["x?stream=1#frag"])
        ws = s.info()["workspace"]
        self.assertEqual([e["name"] for e in s.list(ws + "/sub dir")], ["x?stream=1#frag"])
        # An absolute path goes after a second slash.
        s.upload(ws + "/abs.bin", bytes(range(256)))
        self.assertEqual(s.download("abs.bin"), bytes(range(256)))
        # The sandboxed code sees the uploaded files, and what it writes comes back.
        rep = s.exec(["sh", "-c", "cat 'a b?c=d&e#f é✓.txt' > out.txt"])
        self.assertEqual(rep["exit_code"], 0, rep)
        self.assertEqual(s.download("out.txt"), b"content 1\n")
        for name in names + ["abs.bin", "out.txt"]:
            s.delete(name)
        s.delete("sub dir")
        self.assertEqual(s.list(), [])
        self.assertAirlockError(404, "file_not_found", s.download, "plain.txt")

    def test_file_refusals(self):
        s = self.new_session()
        e = self.assertAirlockError(403, "denied", s.download, "../../etc/passwd")
        self.assertEqual(e.denial["rule"], "fs_read", e.error)
        self.assertEqual(e.denial["layer"], "fs")
        e = self.assertAirlockError(403, "denied", s.upload, "../escape.txt", b"x")
        self.assertEqual(e.denial["rule"], "fs_write", e.error)
        self.assertAirlockError(403, "denied", s.download, "/etc/passwd")
        self.assertAirlockError(403, "denied", s.list, "/etc")
        s.upload("d/f", b"")
        self.assertAirlockError(409, "directory_not_empty", s.delete, "d")
        self.assertAirlockError(404, "file_not_found", s.delete, "nothing-here")

    def test_extend(self):
        s = self.new_session()
        before = parse_time(s.info()["deadline"])
        # 30 more minutes past the current end, as the docs say (the
        # server counts on its clock: allow the moments the call takes).
        after = s.extend("30m")
        moved = (parse_time(after["deadline"]) - before).total_seconds()
        self.assertAlmostEqual(moved, 1800, delta=60, msg=after)
        later = s.extend(3 * 3600)
        self.assertGreater(parse_time(later["deadline"]), parse_time(after["deadline"]))
        self.assertEqual(s.info()["deadline"], later["deadline"])
        self.assertAirlockError(400, "bad_request", s.extend, "soon")

    def test_destroy_then_gone(self):
        s = self.client.create_session(policy=POLICY)
        s.destroy()
        self.assertAirlockError(410, "session_ended", s.info)
        self.assertAirlockError(410, "session_ended", s.exec, ["sh", "-c", "true"])
        self.assertAirlockError(410, "session_ended", s.exec, ["sh", "-c", "true"], on_output=lambda st, t: None)
        self.assertAirlockError(410, "session_ended", s.download, "x")
        self.assertAirlockError(410, "session_ended", s.destroy)
        self.assertNotIn(s.id, [x["id"] for x in self.client.sessions()])

    def test_context_manager_destroys(self):
        with self.client.create_session(policy=POLICY) as s:
            self.assertEqual(s.exec(["sh", "-c", "echo hi"])["stdout"], "hi\n")
        self.assertAirlockError(410, "session_ended", s.info)
        with self.assertRaises(ZeroDivisionError):
            with self.client.create_session(policy=POLICY) as s2:
                s2.destroy()  # gone already: the exit must not hide the with-block's error
                1 / 0
        self.assertAirlockError(410, "session_ended", s2.info)

    def test_bad_token(self):
        c = Client(self.url, "wrong-token-0123456789abcdef")
        self.assertAirlockError(401, "unauthorized", c.sessions)
        self.assertAirlockError(401, "unauthorized", c.create_session, policy=POLICY)
        self.assertEqual(c.health(), {"status": "ok"})

    def test_bad_policies(self):
        e = self.assertAirlockError(400, "bad_policy", self.client.create_session, policy="version: 1\nallowed_tools: [\n")
        self.assertTrue(e.error["problems"], e.error)
        e = self.assertAirlockError(403, "exceeds_ceiling", self.client.create_session, policy="version: 1\nfs_read: [/etc]\n")
        self.assertEqual([(x["key"], x["entry"]) for x in e.error["exceeds"]], [("fs_read", "/etc")])
        self.assertAirlockError(404, "unknown_policy", self.client.create_session, policy_name="nope")
        self.assertAirlockError(404, "unknown_session", self.client.session("0123456789abcdef01234567").info)
        with self.assertRaises(ValueError):
            self.client.create_session()
        with self.assertRaises(ValueError):
            self.client.create_session(policy=POLICY, policy_name="x")

    def test_bad_exec_requests(self):
        s = self.new_session()
        self.assertAirlockError(400, "bad_request", s.exec, ["sh"], timeout="soon")
        with self.assertRaises(ValueError):
            s.exec("sh -c true")
        with self.assertRaises(ValueError):
            s.exec([])


# A session JSON a fake server answers to create.
FAKE_SESSION = b'{"id":"fake01","workspace":"/ws"}\n'
MEMORY_BOUND = 16 << 20  # bytes the client may hold while refusing a huge answer
ENDLESS_CAP = 1 << 30  # the fake stops writing after this, should the client never stop reading


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers every request as the test's current mode says."""

    protocol_version = "HTTP/1.0"  # bodies end at close: no length needed

    def log_message(self, *args):
        pass

    def _serve(self):
        srv = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        srv.requests.append((self.command, self.path, dict(self.headers), body))
        try:
            srv.mode(self)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up, as it should on a hostile answer

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def answer(self, status, body, ctype="application/json", length=True):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def endless(self, status, ctype, prefix=b"", unit=b"x" * 65536):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.end_headers()
        self.wfile.write(prefix)
        sent = 0
        while sent < ENDLESS_CAP:
            self.wfile.write(unit)
            sent += len(unit)


class HostileServerTest(unittest.TestCase):
    """The client against a fake server that breaks the protocol."""

    def setUp(self):
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.srv.daemon_threads = True
        self.srv.requests = []
        self.srv.mode = lambda h: h.answer(200, FAKE_SESSION)
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()
        self.addCleanup(self.thread.join, 30)
        self.addCleanup(self.srv.server_close)
        self.addCleanup(self.srv.shutdown)
        self.client = Client("http://127.0.0.1:%d" % self.srv.server_address[1], "fake-token-0123456789",
                             timeout=10.0, exec_timeout=10.0, max_answer=1 << 20, max_error=64 << 10)
        self.session = self.client.session("fake01")

    def bounded(self, fn, exc=AirlockError):
        """Runs fn, which must raise exc, and checks the peak memory it used."""
        tracemalloc.start()
        try:
            with self.assertRaises(exc) as cm:
                fn()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertLess(peak, MEMORY_BOUND, "the client held %d bytes" % peak)
        return cm.exception

    def test_endless_stream_line(self):
        self.srv.mode = lambda h: h.endless(200, "application/x-ndjson", b'{"stream":"stdout","data":"')
        e = self.bounded(lambda: self.session.exec(["sh"], on_output=lambda st, t: None), ProtocolError)
        self.assertEqual(e.code, "protocol_error")
        self.assertIn("longer than 1048576 bytes", e.message)

    def test_endless_plain_answer(self):
        self.srv.mode = lambda h: h.endless(200, "application/json", b'{"report":{"stdout":"')
        e = self.bounded(lambda: self.session.exec(["sh"]), ProtocolError)
        self.assertIn("larger than 1048576 bytes", e.message)

    def test_huge_error_body(self):
        self.srv.mode = lambda h: h.endless(500, "application/json", b'{"error":{"code":"x","message":"')
        e = self.bounded(self.session.info)
        self.assertEqual((e.status, e.code), (500, "http_500"))
        self.assertIn("larger than 65536 bytes", e.message)

    def test_huge_download(self):
        self.srv.mode = lambda h: h.endless(200, "application/octet-stream")
        self.client.max_download = 1 << 20
        e = self.bounded(lambda: self.session.download("big"), ProtocolError)
        self.assertIn("larger than 1048576 bytes", e.message)
        self.srv.mode = lambda h: (h.send_response(200), h.send_header("Content-Length", str(1 << 40)), h.end_headers())
        e = self.bounded(lambda: self.session.download("big"), ProtocolError)
        self.assertIn("1099511627776 bytes", e.message)

    def test_stream_without_report(self):
        self.srv.mode = lambda h: h.answer(200, b'{"stream":"stdout","data":"a"}\n', "application/x-ndjson")
        got = []
        e = self.bounded(lambda: self.session.exec(["sh"], on_output=lambda st, t: got.append((st, t))), ProtocolError)
        self.assertIn("without a report", e.message)
        self.assertEqual(got, [("stdout", "a")])

    def test_stream_bad_lines(self):
        for line, want in [(b"not json\n", "not JSON"), (b"[1]\n", "not a JSON object"),
                           (b'{"stream":"stdin","data":"a"}\n', "stdin"), (b'{"report":7}\n', "not an object")]:
            self.srv.mode = lambda h, line=line: h.answer(200, line, "application/x-ndjson")
            e = self.bounded(lambda: self.session.exec(["sh"], on_output=lambda st, t: None), ProtocolError)
            self.assertIn(want, e.message)

    def test_stream_error_line(self):
        body = b'{"stream":"stdout","data":"a"}\n{"error":{"code":"session_ended","message":"gone"}}\n'
        self.srv.mode = lambda h: h.answer(200, body, "application/x-ndjson")
        e = self.bounded(lambda: self.session.exec(["sh"], on_output=lambda st, t: None))
        self.assertEqual((e.status, e.code, e.message), (410, "session_ended", "gone"))

    def test_not_json_answers(self):
        self.srv.mode = lambda h: h.answer(200, b"<html>hi</html>", "text/html")
        self.assertIn("not JSON", self.bounded(self.session.info, ProtocolError).message)
        self.srv.mode = lambda h: h.answer(502, b"<html>bad gateway</html>", "text/html")
        e = self.bounded(self.session.info)
        self.assertEqual((e.status, e.code), (502, "http_502"))
        self.assertIn("bad gateway", e.message)
        self.srv.mode = lambda h: h.answer(200, b'{"no":"report"}')
        self.assertIn("no report", self.bounded(lambda: self.session.exec(["sh"]), ProtocolError).message)

    def test_redirect_not_followed(self):
        def redirect(h):
            h.send_response(302)
            h.send_header("Location", "http://203.0.113.1/steal")
            h.send_header("Content-Length", "0")
            h.end_headers()
        self.srv.mode = redirect
        e = self.bounded(self.client.sessions)
        self.assertEqual((e.status, e.code), (302, "http_302"))
        self.assertEqual(len(self.srv.requests), 1)

    def test_paths_are_escaped(self):
        self.srv.mode = lambda h: h.answer(200, b'{"path":"p","size":0,"entries":[]}')
        s = self.client.session("a/b?c")
        s.upload("a b/?x=1#y/../é", b"data")
        s.download("/data/in.csv")
        s.list("a&dir=/etc#x")
        s.delete("..")
        got = [(m, p) for m, p, _, _ in self.srv.requests]
        self.assertEqual(got, [
            ("PUT", "/v1/sessions/a%2Fb%3Fc/files/a%20b/%3Fx%3D1%23y/../%C3%A9"),
            ("GET", "/v1/sessions/a%2Fb%3Fc/files//data/in.csv"),
            ("GET", "/v1/sessions/a%2Fb%3Fc/files?dir=a%26dir%3D%2Fetc%23x"),
            ("DELETE", "/v1/sessions/a%2Fb%3Fc/files/.."),
        ])
        _, _, headers, body = self.srv.requests[0]
        self.assertEqual(body, b"data")
        self.assertEqual(headers["Authorization"], "Bearer fake-token-0123456789")

    def test_bad_arguments(self):
        for bad in ["", "ftp://x", "http://", "http://h:99999", "http://h/?q=1"]:
            with self.assertRaises(ValueError, msg=bad):
                Client(bad, "t")
        for token in ["Bearer x", "a\r\nX-Evil: 1"]:
            with self.assertRaises(ValueError):
                Client("http://127.0.0.1:1", token)
        for by in [0, -1, float("nan"), 1e-9, ""]:
            with self.assertRaises(ValueError, msg=repr(by)):
                self.session.extend(by)
        with self.assertRaises(TypeError):
            self.session.upload("x", "text")
        with self.assertRaises(ValueError):
            self.session.download("")
        self.assertEqual(self.srv.requests, [])

    def test_connection_refused(self):
        port = self.srv.server_address[1]
        self.srv.shutdown()
        self.srv.server_close()
        e = self.bounded(Client("http://127.0.0.1:%d" % port, "t", timeout=5).health)
        self.assertEqual((e.status, e.code), (0, "connection_failed"))


if __name__ == "__main__":
    unittest.main()
