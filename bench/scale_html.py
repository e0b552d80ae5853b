# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""bench/scale's report page: one self-contained HTML file (inline SVG and one small script that
marks which charts the browser drew; no network assets).

The table has the published connection tests' shape (server, version, CPU load mean/peak, max
RAM, connections, average latency); every column says where its number comes from. Per broker: a
chart of connections completed and average connect latency per second (the largest size's median
run), and one of memory against connections with the fitted line."""
import html
import math

CAVEATS = """What the projection cannot know:
  - kernel socket memory: each TCP socket costs the kernel several KB (buffers, the socket and
    its file), counted in neither VmRSS nor these fits, and more under load (full buffers);
  - TIME_WAIT and ports: a million clients need many source addresses (ports x addresses), and a
    storm's reconnects meet the TIME_WAIT of the last one;
  - the broker's own growth: hash tables (clients by id, by socket) double and rehash, memory
    fragments, and one event loop thread's work per connect grows with what it holds; an Erlang
    VM collects garbage when it chooses, so its VmRSS at a size is one moment of a sawtooth;
  - the published figures come from other machines (8 CPUs), other rates and other clients; the
    latency here is measured from the schedule at the --rate above on a 2-vCPU VM with the load
    generator beside the broker."""

W, H, L, R, T, B = 440, 250, 62, 62, 14, 40  # chart size and its margins
BLUE, RED, GREY = "#1f77b4", "#d62728", "#999"


def esc(s):
    return html.escape(str(s), quote=True)


def nice_max(v):
    """A round number at or above v for an axis (1, 2, 2.5, 5 x 10^k)."""
    if v <= 0:
        return 1
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * e:
            return m * e
    return 10 * e


def dur(seconds):
    """A duration in the unit that reads best: 850 us, 12.5 ms, 1.32 s."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def fmt(v, unit=""):
    if unit == " ms":
        return f"{v:g} ms"
    if v >= 1e6:
        return f"{v / 1e6:g}M{unit}"
    if v >= 1e3:
        return f"{v / 1e3:g}k{unit}"
    return f"{v:g}{unit}"


def chart(broker, kind, title, xlabel, xmax, left, right=None, bars=None, points=None, line=None):
    """An SVG chart. left/right: (label, max, colour, unit) of the y axes; bars: [(x, y)] on the
    left axis; points: [(x, y)] dots on the left axis; line: [(x, y)] on the right axis (or the left
    when there is no right). The data elements carry class "data" (the page's check counts them)."""
    pw, ph = W - L - R, H - T - B
    sx = lambda x: L + pw * x / xmax  # noqa: E731
    out = [f'<svg class="broker-chart" data-broker="{esc(broker)}" data-kind="{kind}" width="{W}" '
           f'height="{H}" viewBox="0 0 {W} {H}" xmlns="http://www.w3.org/2000/svg" '
           f'font-family="sans-serif" font-size="10" role="img" aria-label="{esc(title)}">',
           f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="{GREY}"/>']
    for i in range(5):
        y = T + ph - ph * i / 4
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{L + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 4}" y="{y + 3:.1f}" text-anchor="end" fill="{left[2]}">'
                   f'{fmt(left[1] * i / 4, left[3])}</text>')
        if right:
            out.append(f'<text x="{L + pw + 4}" y="{y + 3:.1f}" fill="{right[2]}">'
                       f'{fmt(right[1] * i / 4, right[3])}</text>')
        x = L + pw * i / 4
        out.append(f'<text x="{x:.1f}" y="{T + ph + 13}" text-anchor="middle">{fmt(xmax * i / 4)}</text>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 6}" text-anchor="middle">{esc(xlabel)}</text>')
    out.append(f'<text x="12" y="{T + ph / 2}" transform="rotate(-90 12 {T + ph / 2})" '
               f'text-anchor="middle" fill="{left[2]}">{esc(left[0])}</text>')
    if right:
        out.append(f'<text x="{W - 6}" y="{T + ph / 2}" transform="rotate(90 {W - 6} {T + ph / 2})" '
                   f'text-anchor="middle" fill="{right[2]}">{esc(right[0])}</text>')
    sy = lambda v, ax: T + ph - ph * min(v, ax[1]) / ax[1]  # noqa: E731
    for x, y in bars or []:
        bw = max(2, pw / xmax * 0.8)
        out.append(f'<rect class="data" x="{sx(x) + 1:.1f}" y="{sy(y, left):.1f}" width="{bw:.1f}" '
                   f'height="{T + ph - sy(y, left):.1f}" fill="{left[2]}" opacity="0.55"/>')
    for x, y in points or []:
        out.append(f'<circle class="data" cx="{sx(x):.1f}" cy="{sy(y, left):.1f}" r="3.5" fill="{left[2]}"/>')
    if line:
        ax = right or left
        pts = " ".join(f"{sx(x):.1f},{sy(y, ax):.1f}" for x, y in line)
        out.append(f'<polyline class="data" fill="none" stroke="{ax[2]}" stroke-width="2" points="{pts}"/>')
    out.append("</svg>")
    return "\n".join(out)


def connections_chart(key, r):
    big = max(r["runs"], key=lambda x: x["clients"])
    tl = [s for s in big.get("timeline", []) if s.get("connected") or s.get("failed")]
    if not tl:
        return f"<p>No per-second record for {esc(key)} (a result from before bench/scale kept one).</p>"
    xmax = max(1, len(tl))
    cmax = nice_max(max(s["connected"] for s in tl))
    lmax_ms = nice_max(max(s["connack_mean_ns"] for s in tl) / 1e6)
    return chart(key, "connections", f"{key}: connections per second and their mean CONNACK latency",
                 f"second of the run ({big['clients']:,} connections)", xmax,
                 ("connections completed / s", cmax, BLUE, ""),
                 ("mean CONNACK latency", lmax_ms, RED, " ms"),
                 bars=[(i, s["connected"]) for i, s in enumerate(tl)],
                 line=[(i + 0.5, s["connack_mean_ns"] / 1e6) for i, s in enumerate(tl) if s["connected"]])


def memory_chart(key, r):
    rows, m = [x for x in r["runs"] if not x.get("failed")], r["memory_fit"]
    xmax = nice_max(max(x["clients"] for x in rows))
    ymax = nice_max(max(max(x["rss_held"] for x in rows), m["base_bytes"] + m["bytes_per_connection"] * xmax) / 1e6)
    fitted = [(0, m["base_bytes"] / 1e6), (xmax, (m["base_bytes"] + m["bytes_per_connection"] * xmax) / 1e6)]
    return chart(key, "memory", f"{key}: VmRSS held against connections, and the fitted line",
                 f"connections held (fit: {m['base_bytes'] / 1e6:.1f} MB + {m['bytes_per_connection']:,.0f} B x N, "
                 f"R\u00b2 {m['r2']:.3f})", xmax, ("VmRSS held", ymax, BLUE, " MB"),
                 points=[(x["clients"], x["rss_held"] / 1e6) for x in rows], line=fitted)


def display(key):
    return "mosquitto " + key if key[:1].isdigit() else key


def table(report, published):
    th = ("<tr><th>server</th><th>version</th><th>MQTT</th><th>measured process</th>"
          "<th>connections<sup>m</sup></th><th>CPU load mean / peak<sup>b</sup></th>"
          "<th>max RAM<sup>b</sup></th><th>average latency<sup>m</sup></th><th>p99<sup>m</sup></th>"
          "<th>bytes per connection<sup>f</sup></th><th>500k projected<sup>f</sup></th>"
          "<th>1M projected<sup>f</sup></th></tr>")
    rows = []
    for key, r in report.items():
        name = display(key)
        if "error" in r:
            rows.append(f"<tr><td>{esc(name)}</td><td colspan=\"11\" class=\"why\">did not run here: "
                        f"{esc(r['error'])}</td></tr>")
            continue
        big = max(r["runs"], key=lambda x: x["clients"])
        cpu = (f"{big['cpu_mean_pct']:.0f} % / {big['cpu_peak_pct']:.0f} %" if "cpu_mean_pct" in big else "n/a")
        m, p = r.get("memory_fit"), r.get("projection", [])
        proj = [f"{x['memory_bytes'] / 1e6:,.0f} MB, {dur(x['latency_s'])}" for x in p] or ["n/a", "n/a"]
        per_conn = f"{m['bytes_per_connection']:,.0f} B" if m else "n/a (fewer than two sizes held whole)"
        held = f"{big['held'] if 'held' in big else big['clients']:,} of {big['clients']:,}"
        if r.get("broke"):
            held += f"<br><small>stopped: {esc(r['broke']['why'])}</small>"
        rows.append(
            f"<tr><td>{esc(name)}</td><td>{esc(r.get('version', '?'))}</td><td>{esc(r.get('protocol', '5'))}</td>"
            f"<td>{esc(r.get('process', 'mosquitto'))}</td><td>{held}</td><td>{cpu}</td>"
            f"<td>{big['rss_held'] / 1e6:.1f} MB</td>"
            f"<td>{dur(big['connack_mean_s'])}</td><td>{dur(big['connack_p99_s'])}</td>"
            f"<td>{per_conn}</td><td>{proj[0]}</td><td>{proj[1]}</td></tr>")
    for name, n, mem, lat in published:
        rows.append(f"<tr class=\"published\"><td>{esc(name)} (published, 8 CPUs)</td><td></td><td></td><td></td>"
                    f"<td>{n:,}</td><td></td><td>{mem / 1e6:,.0f} MB</td><td>{dur(lat)}</td>"
                    f"<td></td><td></td><td></td><td></td></tr>")
    return "<table>" + th + "\n".join(rows) + "</table>"


def scenarios_table(report):
    rows = []
    for key, r in report.items():
        s = r.get("scenarios")
        if not s:
            continue
        if "error" in s:
            rows.append(f"<tr><td>{esc(display(key))}</td><td colspan=\"4\" class=\"why\">did not run: "
                        f"{esc(s['error'])}</td></tr>")
            continue
        kept = [x for x in s["throughput"] if x["kept"]]
        broke = [x for x in s["throughput"] if not x["kept"]]
        top = kept[-1] if kept else None
        thr = (f"{top['rate']:,}/s (p99 {dur(top['p99_s'])})" if top else "none")
        stop = (f"{broke[0]['rate']:,}/s: {esc(broke[0]['why'])}" if broke else "not reached (the highest rate tried)")
        f = s["fanout"]
        fan = (esc(f["error"]) if "delivered" not in f else
               f"{f['delivered']:,} of {f['expected']:,} (loss {f['loss']}), p99 {dur(f['p99_s'])}")
        q = s["request"]
        req = (esc(q["error"]) if "ok" not in q else
               f"{esc(q['model'])}: {q['requests_per_second']:,.0f} req/s, p50 {dur(q['p50_s'])}, "
               f"p99 {dur(q['p99_s'])}, timeouts {q['timeouts']}, errors {q['errors']}")
        rows.append(f"<tr><td>{esc(display(key))}</td><td>{thr}</td><td>{stop}</td>"
                    f"<td>{f['subscribers']:,}: {fan}</td><td>{req}</td></tr>")
    if not rows:
        return ""
    return ("<h2>Where each broker stops keeping the schedule (mqbench)</h2>\n<p>Throughput: one "
            "publisher to one subscriber at QoS 1, 2-3 s per rate, rates rising until one is not kept "
            "(a message lost, p99 from the schedule over 100 ms, or mqbench's own generator saturated). "
            "Fan-out: one publisher at 10/s to the subscribers. Request/reply: the pool's requests "
            "(8 workers) against the device simulator. Loss against expected deliveries.</p>\n"
            "<table><tr><th>server</th><th>throughput kept</th><th>not kept at</th><th>fan-out "
            "delivered</th><th>request/reply through the pool</th></tr>" + "\n".join(rows) + "</table>")


def page(report, published):
    charts = []
    for key, r in report.items():
        if "error" in r:
            continue
        memory = (memory_chart(display(key), r) if "memory_fit" in r else
                  "<p>No memory line: fewer than two sizes were held whole.</p>")
        charts.append(f"<h3>{esc(display(key))}</h3>\n<div class=\"pair\">{connections_chart(display(key), r)}"
                      f"{memory}</div>")
    sizes = sorted({x["clients"] for r in report.values() for x in r.get("runs", [])})
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Broker comparison (bench/scale)</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse;font-size:13px}}
td,th{{padding:4px 8px;border-bottom:1px solid #ddd;text-align:right}}td:first-child,th:first-child,td.why{{text-align:left}}
tr.published{{color:#666;font-style:italic}}.pair svg{{margin-right:12px}}p.src{{font-size:12px;color:#444}}</style></head>
<body>
<h1>Broker comparison: connections, memory, latency</h1>
<p>Each broker with its stock settings plus a loopback listener, anonymous clients and a file
limit of 20,000, fresh for every run; <code>mqbench connect</code> at a fixed rate from three source
addresses, the connections held 2 s. Sizes: {", ".join(f"{s:,}" for s in sizes)} connections; the row
is the largest size, the median of its rounds.</p>
{table(report, published)}
<p class="src">Where each number comes from: <sup>b</sup> the broker's process, read from
<code>/proc/PID</code> by mqbench (<code>--broker-pid</code>) every 100 ms: CPU in % of one core, its mean
over the run (connecting and holding) and its peak over 200 ms windows; VmRSS held, the most seen
(the whole Erlang VM for ejabberd and RabbitMQ, node for aedes); <sup>m</sup> mqbench: connections and
CONNACK latency from each connection's scheduled time; <sup>f</sup> a least-squares fit of VmRSS held
over the sizes, projected. The probe is not used: it runs only in mosquitto.</p>
<pre>{esc(CAVEATS)}</pre>
<h2>Per broker: connections per second, and memory against connections</h2>
{"".join(charts)}
{scenarios_table(report)}
<script>
// Which charts the browser drew (a test reads this attribute from the rendered page).
const drawn = [...document.querySelectorAll("svg.broker-chart")].filter(s => {{
  const box = s.getBoundingClientRect();
  return box.width > 0 && box.height > 0 &&
    [...s.querySelectorAll(".data")].some(d => d.getBBox().width > 0 || d.getBBox().height > 0);
}}).map(s => s.dataset.broker + ":" + s.dataset.kind);
document.body.setAttribute("data-charts-drawn", drawn.join(","));
</script>
</body></html>
"""
