import json, sys, glob, statistics as st
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    log = json.load(open(f))
    by = {}
    for k, s, d, n in log: by.setdefault(k, []).append((s, d, n))
    out = []
    for k, v in by.items():
        ns = [n for _, _, n in v]; ds = [d for _, d, _ in v]
        out.append(f"{k}: {len(v)} calls, rows sum {sum(ns)} mean {st.mean(ns):.1f} min {min(ns)} empty {sum(1 for n in ns if n == 0)}, dur median {st.median(ds)*1e3:.2f} ms mean {st.mean(ds)*1e3:.2f}")
    print(f.split('/')[-1]); print("  " + "\n  ".join(out))
