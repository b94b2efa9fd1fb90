
import { useEffect, useState } from "preact/hooks";
import { pb } from "../pb";
import { PageHeader, ErrorBox, Loading, Modal, Badge, errorMessage, fmtDate, EmptyState } from "../ui";

type Stat = { date: string; total: number };
const PER_PAGE = 40;

const HOUR = 3600000;
const parseDate = (d: string) => new Date(d.replace(" ", "T")).getTime();

/** Requests per hour as SVG bars: at least the last 24 hours, up to now. */
function Chart(p: { stats: Stat[] }) {
  const W = 1000, H = 130, left = 40, bottom = 20, top = 10;
  const now = Math.floor(Date.now() / HOUR) * HOUR;
  const first = p.stats.length ? Math.floor(parseDate(p.stats[0].date) / HOUR) * HOUR : now;
  const t0 = Math.min(first, now - 23 * HOUR);
  const hours = Math.round((now - t0) / HOUR) + 1;
  const max = Math.max(...p.stats.map((s) => s.total), 1);
  const slot = (W - left) / hours;
  const bw = Math.max(1, slot - 2);
  const total = p.stats.reduce((a, s) => a + s.total, 0);
  const ticks = [0, Math.floor(hours / 2), hours - 1];
  const hourLabel = (t: number) => new Date(t).toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  return (
    <figure style="margin:0">
      <svg class="chart" viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`Requests per hour: ${total} in the period shown, at most ${max} in one hour`} data-testid="logs-chart">
        <line x1={left} x2={W} y1={H - bottom} y2={H - bottom} stroke="var(--border-strong)" />
        <line x1={left} x2={W} y1={top} y2={top} stroke="var(--border)" stroke-dasharray="3 4" />
        <text x={left - 6} y={top + 4} font-size="11" text-anchor="end" fill="var(--muted)">{max}</text>
        <text x={left - 6} y={H - bottom + 4} font-size="11" text-anchor="end" fill="var(--muted)">0</text>
        {p.stats.map((s) => {
          const i = Math.round((parseDate(s.date) - t0) / HOUR);
          const h = ((H - top - bottom) * s.total) / max;
          return <rect class="bar" x={left + i * slot + 1} y={H - bottom - h} width={bw} height={h} rx="1.5"><title>{`${hourLabel(parseDate(s.date))}: ${s.total} requests`}</title></rect>;
        })}
        {ticks.map((i) => <text x={left + i * slot + slot / 2} y={H - 4} font-size="11" text-anchor="middle" fill="var(--muted)">{hourLabel(t0 + i * HOUR)}</text>)}
      </svg>
      <figcaption class="muted small">{total} {total === 1 ? "request" : "requests"} · per hour, local time</figcaption>
    </figure>
  );
}

function statusClass(s: number) {
  return s >= 500 ? "status-5" : s >= 400 ? "status-4" : "status-2";
}

export function LogsPage() {
  const [filterText, setFilterText] = useState("");
  const [filter, setFilter] = useState("");
  const [page, setPage] = useState(1);
  const [list, setList] = useState<{ items: any[]; totalPages: number; totalItems: number } | null>(null);
  const [stats, setStats] = useState<Stat[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(false);
  const [open, setOpen] = useState<any | null>(null);

  async function load(f = filter, p = page) {
    setLoading(true);
    setError(null);
    try {
      const [l, s] = await Promise.all([
        pb.logs.getList(p, PER_PAGE, { filter: f, sort: "-created" }),
        pb.logs.getStats({ filter: f }),
      ]);
      setList(l);
      setStats(s as Stat[]);
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setLoading(false);
    }
  }
  useEffect(() => void load(), [filter, page]);

  return (
    <main class="main" id="main" tabIndex={-1}>
      <PageHeader title="Logs" actions={<button class="btn" onClick={() => load()} disabled={loading}>{loading ? "Refreshing…" : "Refresh"}</button>} />
      <form class="row" style="margin-bottom:14px" role="search" onSubmit={(e) => { e.preventDefault(); setPage(1); setFilter(filterText.trim()); if (filterText.trim() === filter) load(filterText.trim(), 1); }}>
        <label for="logs-filter" class="sr-only">Filter logs</label>
        <input id="logs-filter" class="input mono" type="search" name="filter" value={filterText} onInput={(e) => setFilterText((e.target as HTMLInputElement).value)}
          placeholder={`Filter, e.g. data.status >= 400 && data.url ~ "/api/"`} />
        <button class="btn btn-primary" type="submit">Apply</button>
        {filter && <button class="btn btn-ghost" type="button" onClick={() => { setFilterText(""); setFilter(""); setPage(1); }}>Clear</button>}
      </form>
      <ErrorBox error={error} />
      <div class="card"><h2 class="sr-only">Requests per hour</h2>{stats === null ? <Loading /> : <Chart stats={stats} />}</div>
      {list === null ? (!error && <Loading />) : list.items.length === 0 ? <EmptyState title="No logs found">{filter ? "Nothing matches this filter." : "Requests to the server are logged here."}</EmptyState> : (
        <>
          <div class="table-wrap">
            <table class="table" data-testid="logs-table">
              <thead><tr><th>Level</th><th>Message</th><th>Status</th><th>Time (ms)</th><th>Date</th></tr></thead>
              <tbody>
                {list.items.map((l) => {
                  const d: any = l.data ?? {};
                  return (
                    <tr class="clickable" tabIndex={0} data-testid="log-row" onClick={() => setOpen(l)} onKeyDown={(e) => e.key === "Enter" && setOpen(l)}>
                      <td><Badge kind={l.level >= 8 ? "err" : l.level >= 4 ? "warn" : l.level < 0 ? "muted" : "info"}>{levelName(l.level)}</Badge></td>
                      <td class="mono" style="max-width:520px">{d.method ? <><strong>{d.method}</strong> {d.url}</> : l.message}</td>
                      <td>{d.status != null && <span class={statusClass(d.status)}>{d.status}</span>}</td>
                      <td class="num">{d.execTime != null ? Number(d.execTime).toFixed(1) : ""}</td>
                      <td style="white-space:nowrap">{fmtDate(l.created)}</td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
          <div class="row-between" style="margin-top:12px">
            <span class="muted small">{list.totalItems} logs</span>
            <div class="row">
              <button class="btn btn-sm" disabled={page <= 1} onClick={() => setPage(page - 1)}>Previous</button>
              <span class="small">Page {page} of {Math.max(1, list.totalPages)}</span>
              <button class="btn btn-sm" disabled={page >= list.totalPages} onClick={() => setPage(page + 1)}>Next</button>
            </div>
          </div>
        </>
      )}
      {open && (
        <Modal drawer title="Log entry" onClose={() => setOpen(null)}>
          <dl class="kv" data-testid="log-detail">
            <dt>ID</dt><dd class="mono">{open.id}</dd>
            <dt>Level</dt><dd>{levelName(open.level)} ({open.level})</dd>
            <dt>Date</dt><dd>{fmtDate(open.created)} <span class="muted small">({open.created} UTC)</span></dd>
            <dt>Message</dt><dd>{open.message}</dd>
            {Object.entries(open.data ?? {}).filter(([, v]) => typeof v !== "object" || v === null).map(([k, v]) => (
              <><dt>{k}</dt><dd class="mono">{String(v)}</dd></>
            ))}
          </dl>
          <div class="section-title">Data</div>
          <pre class="code" tabIndex={0} aria-label="Log data (JSON)">{JSON.stringify(open.data, null, 2)}</pre>
        </Modal>
      )}
    </main>
  );
}

function levelName(l: number) {
  return l >= 8 ? "ERROR" : l >= 4 ? "WARN" : l >= 0 ? "INFO" : "DEBUG";
}
