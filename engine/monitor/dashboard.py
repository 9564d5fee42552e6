"""``engine dashboard DIR --port N``: one read-only page with charts of a
directory's stores, refreshed live.

The page (``/``) shows what ``engine top`` shows, as charts: the backlog of each
queue reader over time (which one falls behind), the disk each store takes,
and the records per second each store takes in, with the reader most behind
named above them.  It draws with its own few lines of JavaScript on ``<canvas>``
(no script from elsewhere: it works offline) and asks ``/api/view`` (the
:meth:`Tracker.view` figures) and ``/api/history`` (the samples kept) every
``--interval`` seconds; a thread samples the directory at that pace.

Read-only: GET and HEAD only (anything else is 405), nothing is written.  Bound
to loopback unless ``--host`` says otherwise.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engine.conventions import naming_the_host
from engine.metrics import LOOPBACK
from engine.monitor.track import Tracker

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>engine dashboard</title>
<style>
body{font:14px system-ui,sans-serif;margin:16px;background:#fafafa;color:#222}
h1{font-size:18px;margin:0 0 4px} #head{font-weight:600;margin:6px 0 12px} .red{color:#c62828}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:14px} .card{background:#fff;border:1px solid #ddd;
border-radius:6px;padding:10px} .card h2{font-size:14px;margin:0 0 6px} canvas{width:100%;height:260px}
#when{color:#666;font-size:12px} .wide{grid-column:1/3}
</style></head><body>
<h1>engine dashboard: <span id="root"></span></h1><div id="when"></div><div id="head"></div>
<div class="grid">
<div class="card wide"><h2>Backlog per reader over time (items not yet confirmed)</h2>
<canvas id="backlog" width="1100" height="260"></canvas></div>
<div class="card"><h2>Disk per store</h2><canvas id="disk" width="540" height="260"></canvas></div>
<div class="card"><h2>Records per second (over the last window)</h2>
<canvas id="rates" width="540" height="260"></canvas></div>
</div>
<script>
"use strict";
const COLORS=["#1f77b4","#d62728","#2ca02c","#ff7f0e","#9467bd","#8c564b","#17becf","#bcbd22","#e377c2"];
function bytes(n){const u=["B","KiB","MiB","GiB","TiB"];let i=0;while(Math.abs(n)>=1024&&i<4){n/=1024;i++}
return (i?n.toFixed(n<10?2:n<100?1:0):n.toFixed(0))+" "+u[i]}
function num(n){return n>=1000?n.toLocaleString("en"):(Math.round(n*10)/10).toString()}
function axes(c,x0,y0,w,h,max,fmt){c.strokeStyle="#ccc";c.fillStyle="#555";c.font="11px sans-serif";
for(let k=0;k<=4;k++){const y=y0+h-h*k/4;c.beginPath();c.moveTo(x0,y);c.lineTo(x0+w,y);c.stroke();
c.fillText(fmt(max*k/4),2,y+4)}}
function lines(id,times,series){const el=document.getElementById(id),c=el.getContext("2d");
c.clearRect(0,0,el.width,el.height);const names=Object.keys(series);const x0=70,y0=10,w=el.width-300,h=el.height-40;
let max=1;for(const n of names)for(const v of series[n])if(v!==null&&v>max)max=v;max*=1.1;
axes(c,x0,y0,w,h,max,v=>num(max>20?Math.round(v):v));
const t0=times[0]||0,t1=times[times.length-1]||1,span=Math.max(t1-t0,1);
names.forEach((n,i)=>{c.strokeStyle=COLORS[i%COLORS.length];c.lineWidth=2.5;c.beginPath();let on=false;
series[n].forEach((v,k)=>{if(v===null){on=false;return}const x=x0+w*((times[k]-t0)/span),y=y0+h-h*v/max;
if(on)c.lineTo(x,y);else c.moveTo(x,y);on=true});c.stroke();const last=series[n][series[n].length-1];
c.fillStyle=COLORS[i%COLORS.length];c.fillRect(x0+w+12,y0+i*18,12,12);c.fillStyle="#222";
c.fillText(n+": "+(last===null?"-":num(last)),x0+w+28,y0+i*18+10)});
c.fillStyle="#555";c.fillText(new Date(t0/1e6).toISOString().slice(11,19)+" UTC",x0,y0+h+16);
c.fillText(new Date(t1/1e6).toISOString().slice(11,19)+" UTC",x0+w-70,y0+h+16)}
function bars(id,rows,fmt){const el=document.getElementById(id),c=el.getContext("2d");
c.clearRect(0,0,el.width,el.height);const x0=170,h=Math.min(28,(el.height-10)/Math.max(rows.length,1)),
w=el.width-x0-90;let max=1;for(const r of rows)if(r[1]>max)max=r[1];c.font="11px sans-serif";
rows.forEach((r,i)=>{const y=5+i*h;c.fillStyle="#222";c.fillText(r[0].slice(-26),2,y+h*0.65);
c.fillStyle=COLORS[i%COLORS.length];c.fillRect(x0,y+2,Math.max(1,w*r[1]/max),h-6);c.fillStyle="#222";
c.fillText(fmt(r[1]),x0+Math.max(1,w*r[1]/max)+4,y+h*0.65)})}
async function refresh(){try{const [view,hist]=await Promise.all([fetch("/api/view").then(r=>r.json()),
fetch("/api/history").then(r=>r.json())]);document.getElementById("root").textContent=view.root;
document.getElementById("when").textContent="updated "+new Date(view.time_ns/1e6).toISOString()
.replace("T"," ").slice(0,19)+" UTC; rates over "+Math.round(view.window_s)+" s";
const head=document.getElementById("head");const b=view.behind;
if(b){const g=b.backlog_per_s;head.className=g>0?"red":"";head.textContent="Most behind: "+b.store+": "+
b.reader+": "+num(b.backlog_items)+" items ("+bytes(b.backlog_bytes)+") waiting"+(g===null?"":g>0?
", growing "+num(g)+" items/s":g<0?", shrinking "+num(-g)+" items/s":", steady")}
else{head.className="";head.textContent="Every reader is caught up."}
lines("backlog",hist.times_ns,hist.backlog);
bars("disk",view.stores.map(s=>[s.name,s.disk_bytes]).sort((a,b)=>b[1]-a[1]),bytes);
bars("rates",view.stores.map(s=>[s.name,s.records_per_s||0]),v=>num(v)+"/s");
document.body.dataset.ready="1"}catch(e){document.getElementById("head").textContent="no answer: "+e}}
refresh();setInterval(refresh,INTERVAL_MS);
</script></body></html>
"""


class DashboardServer(ThreadingHTTPServer):
    """The page and its two JSON answers over ``tracker``; a thread samples the
    directory every ``interval`` seconds."""

    daemon_threads = True

    def __init__(self, tracker: Tracker, port: int, host: str = LOOPBACK, interval: float = 2.0) -> None:
        with naming_the_host(host):
            super().__init__((host, port), _Handler)
        self.tracker = tracker
        self.interval = interval
        self.page = PAGE.replace("INTERVAL_MS", str(int(interval * 1000))).encode()
        self._stopped = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="engine dashboard sampler", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> None:
        """Sample and serve in background threads."""
        self.tracker.sample()
        self._sampler.start()
        threading.Thread(target=self.serve_forever, name="engine dashboard", daemon=True).start()

    def _sample(self) -> None:
        while not self._stopped.wait(self.interval):
            self.tracker.sample()

    def stop(self) -> None:
        self._stopped.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer

    def _answer(self, body: bytes, kind: str, send: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if send:
            self.wfile.write(body)

    def _get(self, send: bool) -> None:
        path = self.path.split("?", 1)[0]
        answers: dict[str, Any] = {
            "/": lambda: (self.server.page, "text/html; charset=utf-8"),
            "/api/view": lambda: (json.dumps(self.server.tracker.view()).encode(), "application/json"),
            "/api/history": lambda: (json.dumps(self.server.tracker.history()).encode(), "application/json"),
        }
        if path not in answers:
            self.send_error(404, "no such page")
            return
        body, kind = answers[path]()
        self._answer(body, kind, send)

    def do_GET(self) -> None:
        self._get(True)

    def do_HEAD(self) -> None:
        self._get(False)

    def _refuse(self) -> None:
        self.send_error(405, "read-only: GET and HEAD only")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: one line per request would drown the terminal
