import json, sys, collections
cur = None; data = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("#"):
        p = line.split(); cur = (p[3], p[4]); load = p[7]; continue
    r = json.loads(line)
    key = (cur[0], r["objects"], cur[1])
    data[key].append((r["transitions_per_second"], r["worker_cpu_s_per_1000"] * 1000, load))
for k in sorted(data):
    v = data[k]
    print(k, " | ".join(f"{t:,.0f}/s {c:.1f}us (load {l})" for t, c, l in v),
          f"| median {sorted(x[0] for x in v)[len(v)//2]:,.0f}/s {sorted(x[1] for x in v)[len(v)//2]:.1f}us")
