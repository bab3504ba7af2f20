"""redis-py's WATCH, scripts and blocking pops through the cacheqos proxy.

Usage: redispy_watch_scripts.py HOST PORT USER PASSWORD
Prints one line per check, "ok ..." or "FAIL ...", and exits 1 on any failure.
"""
import redis

from redispy_checks import check, client, finish

r, other = client(), client()


# Optimistic locking: pipeline(transaction=True) with watch, another client writing between
# WATCH and EXEC.
for tag in range(8):
    key = "{acct%d}:balance" % tag
    r.set(key, 10)
    with r.pipeline(transaction=True) as p:
        p.watch(key)
        balance = int(p.get(key))
        other.incrby(key, 5)
        p.multi()
        p.set(key, balance - 1)
        try:
            p.execute()
            check(False, "tag %d: EXEC committed after another client's write" % tag)
        except redis.WatchError:
            check(True, "tag %d: WatchError after another client's write" % tag)
    check(int(r.get(key)) == 15, "tag %d: balance %s after the aborted transaction, want 15" % (tag, r.get(key)))

    def debit(p):
        balance = int(p.get(key))
        p.multi()
        p.set(key, balance - 1)

    r.transaction(debit, key)
    check(int(r.get(key)) == 14, "tag %d: transaction() left %s, want 14" % (tag, r.get(key)))

# Scripts with declared keys: register_script (EVALSHA, SCRIPT LOAD on NOSCRIPT) and eval.
incr = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
for tag in range(8):
    got = incr(keys=["{script%d}:n" % tag], args=[2])
    check(got == 2, "tag %d: registered script returned %r" % (tag, got))
got = r.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, "{eval}:k", "v")
check(got == b"OK" and r.get("{eval}:k") == b"v", "eval SET returned %r" % got)
got = r.eval("return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}", 2, "{eval}:k", "{eval}:none")
check(got == [b"v", None], "eval over two tagged keys returned %r" % got)
try:
    r.eval("return 1", 0)
    check(False, "eval without keys ran")
except redis.exceptions.ResponseError as e:
    check("must declare the keys" in str(e), "eval without keys: %s" % e)
refused = 0
for i in range(64):
    try:
        r.eval("return 1", 2, "a%d" % i, "b%d" % i)
    except redis.exceptions.ResponseError as e:
        refused += 1
        check("live on different nodes" in str(e), "eval across nodes: %s" % e)
        break
check(refused == 1, "eval across nodes refused")

# Blocking pops.
got = r.blpop(["{queue}:empty"], timeout=0.2)
check(got is None, "blpop on an empty list returned %r" % (got,))
other.rpush("{queue}:jobs", "job")
got = r.blpop(["{queue}:jobs"], timeout=1)
check(got is not None and list(got) == [b"{queue}:jobs", b"job"], "blpop returned %r" % (got,))
got = r.blmove("{queue}:a", "{queue}:b", 0.2, "LEFT", "RIGHT")
check(got is None, "blmove on an empty list returned %r" % (got,))
other.rpush("{queue}:a", "x")
got = r.brpop(["{queue}:a"], timeout=1)
check(got is not None and list(got) == [b"{queue}:a", b"x"], "brpop returned %r" % (got,))
finish()
