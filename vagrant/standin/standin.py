#!/usr/bin/env python3
"""Stand-ins for the end-to-end run on kind (no real mesh needed).

  standin.py web             HTTP server on :8080 answering "web ok"
  standin.py proxy URL       a mesh proxy stand-in: first sends one request
                             to URL (its first outbound packet, which ends
                             meshnft's init phase), then listens on 4140
                             (outbound), 4143 (inbound) and 4191 (admin) and
                             answers every request with the port it landed
                             on and the connection's original destination
                             (SO_ORIGINAL_DST), logging each one.
"""
import socket
import struct
import sys
import threading
import time
import urllib.request

SO_ORIGINAL_DST = 80


def original_dst(conn):
    try:
        raw = conn.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
        port, addr = struct.unpack("!2xH4s8x", raw)
        return "%s:%d" % (socket.inet_ntoa(addr), port)
    except OSError:
        return "-"


def serve(port, tag):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(64)
    while True:
        conn, peer = srv.accept()
        threading.Thread(target=answer, args=(conn, peer, port, tag), daemon=True).start()


def answer(conn, peer, port, tag):
    with conn:
        conn.settimeout(5)
        try:
            conn.recv(4096)
        except OSError:
            pass
        orig = original_dst(conn)
        body = ("%s port=%d orig=%s peer=%s\n" % (tag, port, orig, peer[0])).encode()
        print(body.decode().strip(), flush=True)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "web":
        serve(8080, "web ok")
    elif len(sys.argv) >= 3 and sys.argv[1] == "proxy":
        for attempt in range(30):
            try:
                with urllib.request.urlopen(sys.argv[2], timeout=5) as r:
                    print("proxy first request: %s" % r.read().decode().strip(), flush=True)
                break
            except OSError as e:
                print("proxy first request failed (%s), retrying" % e, flush=True)
                time.sleep(1)
        for port in (4140, 4143):
            threading.Thread(target=serve, args=(port, "standin"), daemon=True).start()
        serve(4191, "admin")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
