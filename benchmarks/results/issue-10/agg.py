import sys, collections, re
self_c = collections.Counter(); incl = collections.Counter(); total = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n); total += n
    frames = stack.split(";")
    def name(f):
        m = re.match(r"(.*?) \((.*?):\d+\)", f)
        return f"{m.group(1)} ({m.group(2).split('/')[-1]})" if m else f
    self_c[name(frames[-1])] += n
    for f in set(name(f) for f in frames): incl[f] += n
print("total samples", total)
print("-- self")
for k, v in self_c.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 25): print(f"{v/total*100:5.1f}% {k}")
print("-- inclusive")
for k, v in incl.most_common(int(sys.argv[3]) if len(sys.argv)>3 else 45): print(f"{v/total*100:5.1f}% {k}")
