"""The KV producer and checker of scripts/chaos.sh, over the KV HTTP API
(docs/kv.md) with only the standard library.

  python3 kv_chaos.py put NODES RATE THREADS STOP_FILE
      PUT id chaos-<i> (value v<i>) with ack=2&from=3 at RATE requests/s in
      all, THREADS at a time, until STOP_FILE exists. NODES: comma-separated
      host:port. Each request goes to the next node; a failed one (not 201,
      or no answer within 3 s) is tried again, same id and value, on the
      next node (at-least-once). Prints "ACK <epoch ms> <i>" for each 201,
      "ERR <epoch ms> <reason>" for each failure.
  python3 kv_chaos.py check NODES ACKED_FILE
      GETs every acknowledged id with ack=2&from=3 (any node that answers)
      and prints "checked <n> missing <m>" then each missing id.
"""

import http.client
import sys
import threading
import time
import os


def request(node, method, path, body=None):
    host, port = node.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=3)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def put(nodes, rate, threads, stop_file):
    lock = threading.Lock()
    counter = [0]
    out = sys.stdout

    def say(line):
        with lock:
            out.write(line + "\n")
            out.flush()

    def worker(k):
        start = time.monotonic()
        sent = 0
        turn = k
        while not os.path.exists(stop_file):
            due = start + sent * threads / rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            elif now - due > 1:
                # Fell behind during an outage: go on at the rate, no burst.
                start = now - sent * threads / rate
            with lock:
                i = counter[0]
                counter[0] += 1
            while True:
                node = nodes[turn % len(nodes)]
                turn += 1
                try:
                    status, body = request(
                        node, "PUT", f"/v0/entity?id=chaos-{i}&ack=2&from=3", f"v{i}".encode()
                    )
                    if status == 201:
                        say(f"ACK {int(time.time() * 1000)} {i}")
                        break
                    reason = f"{node} {status} {body[:80]!r}"
                except Exception as e:  # any failure: try the next node
                    reason = f"{node} {type(e).__name__} {e}"
                say(f"ERR {int(time.time() * 1000)} {reason}")
                time.sleep(0.1)
            sent += 1

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def check(nodes, acked_file):
    ids = []
    with open(acked_file) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "ACK":
                ids.append(int(parts[2]))
    ids = sorted(set(ids))
    missing = []
    for i in ids:
        got = None
        for node in nodes:
            try:
                status, body = request(node, "GET", f"/v0/entity?id=chaos-{i}&ack=2&from=3")
            except Exception:
                continue
            got = (status, body)
            if status in (200, 404):
                break
        if got is None or got[0] != 200 or got[1] != f"v{i}".encode():
            missing.append((i, got))
    print(f"checked {len(ids)} missing {len(missing)}")
    for i, got in missing[:20]:
        print(f"missing chaos-{i}: {got}")


def main():
    mode, nodes = sys.argv[1], sys.argv[2].split(",")
    if mode == "put":
        put(nodes, float(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif mode == "check":
        check(nodes, sys.argv[3])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
