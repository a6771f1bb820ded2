import json,sys
for f in sys.argv[1:]:
    for line in open(f):
        line=line.strip()
        if not line.startswith('{'): continue
        r=json.loads(line)
        print(f.split('/')[-1], {k:r.get(k) for k in ('processes','objects','transitions_per_second','worker_cpu_s_per_1000','db_cpu_s_per_1000','db_shared_cpu_s_per_1000','statements_per_1000','loop','batch_size') if k in r})
