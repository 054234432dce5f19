#!/usr/bin/env python3
"""Delta-sync page cost: 3000 deposits (4 clients) into a tree of main + 2 children, then
GET /changes?since=0 and ?since=3 paged by 1000; prints ms per page. Loopback only.
Usage: scripts/bench/changes_bench.py [binary=target/release/pfm] [port=18301]"""
import sys, time, json, http.client, subprocess, os, shutil, threading, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "target", "release", "pfm")
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 18301
SECRET="audit-secret-audit-secret-audit-000"
d = tempfile.mkdtemp(prefix="changes_bench.")
p=subprocess.Popen([BIN,"--port",str(PORT),"--data-dir",d],env=dict(os.environ,JWT_SECRET=SECRET,MAX_REQUESTS="1000000000",RUST_LOG="warn"),stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
tok=subprocess.check_output(["python3",os.path.join(HERE, "pfm_bench.py"),"token",SECRET,"cb"]).decode().strip()
def call(m,path,body=None,c=None):
    c=c or http.client.HTTPConnection("127.0.0.1",PORT)
    c.request(m,path,body=json.dumps(body) if body else None,headers={"Authorization":"Bearer "+tok,"Content-Type":"application/json"})
    r=c.getresponse(); return json.loads(r.read())
for _ in range(100):
    try: call("GET","/__ping__"); break
    except Exception: time.sleep(0.1)
main=call("POST","/register",{"user_id":"cb"})["uuid"]
for n in ("A","B"): call("POST","/add_sub_account",{"parent_uuid":main,"name":n,"allocation":0.5})
def w(k):
    c=http.client.HTTPConnection("127.0.0.1",PORT)
    for i in range(750): call("POST","/deposit",{"uuid":main,"amount":1,"channel":"x"},c)
ts=[threading.Thread(target=w,args=(k,)) for k in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
c=http.client.HTTPConnection("127.0.0.1",PORT)
for since in (0, 3):
    cur=None; n=0; t0=time.time(); tx=0
    while True:
        q="/changes?since=%d&limit=1000"%since + ("&cursor="+cur if cur else "")
        d=call("GET",q,None,c); n+=1; tx+=len(d["transactions"]); cur=d.get("next_cursor")
        if not cur: break
    print(f"since={since}: {n} pages, {tx} records, {(time.time()-t0)*1000/n:.1f} ms/page")
p.terminate(); p.wait(); shutil.rmtree(d, ignore_errors=True)
