import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    log = json.load(open(f))
    cl = [(s, s + d) for k, s, d, n in log if k == "claim"]
    wr = [(s, s + d) for k, s, d, n in log if k == "write"]
    if not cl: continue
    span = max(e for _, e in cl + wr) - min(s for s, _ in cl + wr)
    tc = sum(e - s for s, e in cl); tw = sum(e - s for s, e in wr)
    ov = 0.0
    for s, e in cl:
        for a, b in wr:
            ov += max(0.0, min(e, b) - max(s, a))
    # time with neither a claim nor a write running
    ev = sorted([(s, 1) for s, _ in cl + wr] + [(e, -1) for _, e in cl + wr]); depth = 0; last = ev[0][0]; idle = 0
    for t, d in ev:
        if depth == 0: idle += t - last
        depth += d; last = t
    print(f"{f.split('/')[-1]}: span {span:.2f}s claim busy {tc/span:.0%} write busy {tw/span:.0%} overlap {ov/span:.0%} neither {idle/span:.0%}")
