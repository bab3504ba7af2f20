"""What the redis-py scripts of this directory share: a client from the command line
(HOST PORT USER PASSWORD) and checks that print "ok ..." or "FAIL ..." and set the exit code."""
import sys

import redis

failures = []


def client():
    host, port, user, password = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    return redis.Redis(host=host, port=port, username=user, password=password)


def check(ok, what):
    print(("ok " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def finish():
    sys.exit(1 if failures else 0)
