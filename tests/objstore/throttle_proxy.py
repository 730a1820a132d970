#!/usr/bin/env python3
"""Loopback HTTP proxy in front of the S3 test server that answers the first N requests with
503 SlowDown (S3's throttling answer), then forwards every request unchanged (Host header
included, so SigV4 still verifies at the server).

usage: throttle_proxy.py BACKEND_PORT N_THROTTLED PORT_FILE COUNT_FILE [HELD_FILE RELEASE_FILE]
Writes the port it listens on (127.0.0.1, chosen by the OS) to PORT_FILE, and after every request
"throttled=T forwarded=F puts=P gets=G posts=O" to COUNT_FILE (forwarded requests by method). Runs until killed.
With HELD_FILE and RELEASE_FILE, a CreateMultipartUpload (POST ?uploads) is forwarded (the server
creates the upload) but its answer held: HELD_FILE is written, and the answer sent once
RELEASE_FILE exists (at most 60 s later), so a client can be cancelled inside that window.
"""
import http.client
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

backend_port, n_throttle, port_file, count_file = (
    int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
held_file, release_file = (sys.argv[5], sys.argv[6]) if len(sys.argv) > 6 else (None, None)
lock = threading.Lock()
counts = {"throttled": 0, "forwarded": 0, "PUT": 0, "GET": 0, "POST": 0}

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")


def save():
    tmp = count_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("throttled=%d forwarded=%d puts=%d gets=%d posts=%d\n" % (
            counts["throttled"], counts["forwarded"], counts["PUT"], counts["GET"], counts["POST"]))
    os.replace(tmp, count_file)


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with lock:
            throttle = counts["throttled"] < n_throttle
            counts["throttled" if throttle else "forwarded"] += 1
            if not throttle and self.command in counts:
                counts[self.command] += 1
            save()
        if throttle:
            self.send_response(503)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(SLOWDOWN)))
            self.end_headers()
            self.wfile.write(SLOWDOWN)
            return
        conn = http.client.HTTPConnection("127.0.0.1", backend_port, timeout=60)
        headers = {k: v for k, v in self.headers.items()}
        conn.request(self.command, self.path, body=body if n else None, headers=headers)
        r = conn.getresponse()
        data = r.read()
        query = urllib.parse.urlsplit(self.path).query.split("&")
        if held_file and self.command == "POST" and ("uploads" in query or "uploads=" in query):
            with open(held_file + ".tmp", "w") as f:
                f.write("%d %s\n" % (r.status, self.path))
            os.replace(held_file + ".tmp", held_file)
            until = time.time() + 60
            while not os.path.exists(release_file) and time.time() < until:
                time.sleep(0.01)
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        head_len = r.getheader("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", head_len or str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


srv = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(port_file + ".tmp", port_file)
srv.serve_forever()
