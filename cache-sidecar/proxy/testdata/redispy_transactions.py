"""redis-py's default pipeline() (MULTI/EXEC) through the cacheqos proxy.

Usage: redispy_transactions.py HOST PORT USER PASSWORD
Prints one line per check, "ok ..." or "FAIL ...", and exits 1 on any failure.
"""
import redis

from redispy_checks import check, client, finish

r = client()


# Keys sharing a hash tag: the transaction commits whole.
for tag in range(8):
    a, b = "{user%d}:cart" % tag, "{user%d}:count" % tag
    p = r.pipeline()
    p.set(a, "book")
    p.incr(b)
    p.incr(b)
    p.get(a)
    got = p.execute()
    check(got == [True, 1, 2, b"book"], "tag %d: pipeline() returned %r" % (tag, got))

# Keys on two nodes: the pipeline fails and nothing of it is applied.
refused = 0
for i in range(64):
    a, b = "plain-a-%d" % i, "plain-b-%d" % i
    p = r.pipeline()
    p.set(a, "1")
    p.set(b, "1")
    try:
        p.execute()
    except redis.exceptions.ResponseError as e:
        refused += 1
        check("live on different nodes" in str(e), "cross-node pipeline error: %s" % e)
        check(r.exists(a, b) == 0, "cross-node pipeline applied nothing (exists %d)" % r.exists(a, b))
check(refused > 0, "%d of 64 cross-node pipelines refused" % refused)

# Without a transaction, pipeline(transaction=False) is split as usual.
p = r.pipeline(transaction=False)
p.set("plain-x", "1")
p.set("plain-y", "2")
p.mget("plain-x", "plain-y")
got = p.execute()
check(got == [True, True, [b"1", b"2"]], "pipeline(transaction=False) returned %r" % got)
finish()
