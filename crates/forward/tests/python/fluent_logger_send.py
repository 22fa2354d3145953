"""Sends records with the stock fluent-logger (Message mode, nanosecond
EventTime) to a Forward server. Used by tests/fluent_logger.rs.

usage: fluent_logger_send.py HOST PORT COUNT BASE_UNIX_NANO
Record i is {"i": i, "msg": "hello <i>", "nested": {"ok": true}} at
BASE_UNIX_NANO + i nanoseconds, tag "py.test".
"""
import sys

from fluent import sender


def main():
    host, port, count, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    s = sender.FluentSender("py", host=host, port=port, nanosecond_precision=True, timeout=10.0)
    for i in range(count):
        t = sender.EventTime.from_unix_nano(base + i)
        ok = s.emit_with_time("test", t, {"i": i, "msg": "hello %d" % i, "nested": {"ok": True}})
        if not ok:
            print("emit failed: %r" % (s.last_error,), file=sys.stderr)
            sys.exit(1)
    s.close()


if __name__ == "__main__":
    main()
