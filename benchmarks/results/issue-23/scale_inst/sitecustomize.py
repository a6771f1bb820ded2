# PYTHONPATH=this-folder S2_INST=/some/dir stator bench ...: each worker process logs its claims, write-backs,
# next_due calls, wake-ups and NOTIFYs (start, duration, rows) to S2_INST/PID.json; summ_inst.py and
# overlap.py DIR summarise them (rows per claim, empty claims; how busy the claim and the writer were).
import os, time, json, atexit
if os.environ.get("S2_INST"):
    from stator._store import _operations as o
    from stator._worker import _coordinator as c
    log = []
    t0 = time.perf_counter()
    def wrap(cls, name, kind, size):
        orig = getattr(cls, name)
        def f(self, *a, **k):
            s = time.perf_counter()
            r = orig(self, *a, **k)
            log.append((kind, s - t0, time.perf_counter() - s, size(a, k, r)))
            return r
        setattr(cls, name, f)
    wrap(o.SqlOperations, "run_claim", "claim", lambda a, k, r: len(r))
    wrap(o.SqlOperations, "write_all", "write", lambda a, k, r: sum(len(w) for _, w in a[0]))
    wrap(o.SqlOperations, "next_due", "next_due", lambda a, k, r: 0)
    wrap(c.Worker, "wake", "wake", lambda a, k, r: 0)
    ow = o.SqlOperations._notify_due
    def nd(self, t):
        r = ow(self, t); 
        if r: log.append(("notify", time.perf_counter() - t0, 0, 0))
        return r
    o.SqlOperations._notify_due = nd
    def dump():
        d = os.environ["S2_INST"]
        with open(f"{d}/{os.getpid()}.json", "w") as fh:
            json.dump(log, fh)
    atexit.register(dump)
