import { useEffect, useRef, useState } from "preact/hooks";
import { pb } from "../pb";
import { PageHeader, ErrorBox, Loading, Badge, EmptyState, errorMessage, fmtDate, toast } from "../ui";

type Plugin = {
  file: string; name: string; state: string; since: string; error: string | null; version: string;
  hooks: any[]; routes: Array<{ method: string; path: string; requireAuth?: boolean }>; jobs: Array<{ id: string; expression: string }>;
  wants: string[]; hash?: string; loadedAt?: string; compileMs?: number; fromCache?: boolean; grants?: string[]; httpAllow?: string[];
  calls: number; failures: number; refusals: number; inFlight: number; lastError: any;
};
type History = { at: string; file: string; outcome: string; trigger: string; plugin?: string; version?: string; error?: string };

const stateKind = (s: string) => (s === "loaded" ? "ok" : s === "refused" || s === "failed" || s === "error" ? "err" : "warn");
const hookText = (h: any) =>
  typeof h === "string" ? h : h.events ? `${h.collection ?? "*"}: ${h.events.map((e: string) => e.replace(/^HookEvent::/, "")).join(", ")}` : JSON.stringify(h);
const errText = (e: any) => (e == null ? "" : typeof e === "string" ? e : e.message ? `${e.message}${e.at ? ` (${fmtDate(e.at)})` : ""}` : JSON.stringify(e));

export function PluginsPage() {
  const [data, setData] = useState<{ plugins: Plugin[]; history: History[] } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [updated, setUpdated] = useState<Date | null>(null);
  const timer = useRef<number>();
  const seen = useRef<string | null>(null);
  useEffect(() => {
    let alive = true;
    const tick = async () => {
      try {
        const d = await pb.send("/api/plugins", { requestKey: null });
        if (!alive) return;
        // Announce what a hot reload did since the last poll.
        const hist: History[] = d.history ?? [];
        const key = (e: History) => `${e.at}|${e.file}|${e.outcome}|${e.trigger}`;
        if (seen.current !== null) {
          const i = hist.findIndex((e) => key(e) === seen.current);
          if (i >= 0) for (const e of hist.slice(i + 1).slice(-3))
            toast(`${e.file}: ${e.outcome}${e.error ? ` (${e.error})` : ""}`, e.outcome === "loaded" ? "info" : "error");
        }
        seen.current = hist.length ? key(hist[hist.length - 1]) : "";
        setData(d);
        setError(null);
        setUpdated(new Date());
      } catch (e) {
        if (alive) setError(errorMessage(e));
      }
      if (alive) timer.current = window.setTimeout(tick, 2000);
    };
    tick();
    return () => {
      alive = false;
      clearTimeout(timer.current);
    };
  }, []);

  const plugins = data?.plugins ?? [];
  return (
    <main class="main" id="main" tabIndex={-1}>
      <PageHeader title="Plugins" actions={<span class="muted small" aria-live="off">{updated ? <>Live · updated {updated.toLocaleTimeString()}</> : ""}</span>} />
      <ErrorBox error={error} />
      {!data ? (!error && <Loading />) : plugins.length === 0 ? (
        <EmptyState title="No plugins loaded">Put a WebAssembly plugin (<code>.wasm</code>) into the plugins folder; it is loaded (and hot-reloaded on change) without a restart.</EmptyState>
      ) : plugins.map((p) => (
        <section class="card" data-testid="plugin-card" data-plugin={p.name} aria-labelledby={`plugin-${p.file}`}>
          <div class="row-between">
            <div class="row">
              <h2 id={`plugin-${p.file}`}>{p.name || p.file}</h2>
              {p.version && <span class="muted">v{p.version}</span>}
              <Badge kind={stateKind(p.state)}>{p.state}</Badge>
            </div>
            <div class="row small">
              <span title="Calls"><strong>{p.calls}</strong> calls</span>
              <span title="Failures" class={p.failures ? "status-5" : ""}><strong>{p.failures}</strong> failures</span>
              <span title="Refusals"><strong>{p.refusals}</strong> refusals</span>
              <span title="In flight"><strong>{p.inFlight}</strong> in flight</span>
            </div>
          </div>
          <div class="plugin-meta">
            <span>File <code>{p.file}</code></span>
            <span>Since {fmtDate(p.since)}</span>
            {p.loadedAt && <span>Loaded {fmtDate(p.loadedAt)}</span>}
            {p.compileMs != null && <span>Compiled in {p.compileMs} ms{p.fromCache ? " (cache)" : ""}</span>}
            {p.hash && <span title={p.hash}>Hash <code>{p.hash.slice(0, 12)}</code></span>}
          </div>
          {p.error && <div class="alert alert-error small" role="status">{p.error}</div>}
          {p.lastError && <div class="alert alert-warn small">Last error: {errText(p.lastError)}</div>}
          <div class="grid-2">
            <dl class="kv small">
              <dt>Hooks</dt><dd><Chips items={(p.hooks ?? []).map(hookText)} /></dd>
              <dt>Routes</dt><dd><Chips items={(p.routes ?? []).map((r) => `${r.method} ${r.path}${r.requireAuth ? " 🔒" : ""}`)} /></dd>
              <dt>Jobs</dt><dd><Chips items={(p.jobs ?? []).map((j) => `${j.id} (${j.expression})`)} /></dd>
            </dl>
            <dl class="kv small">
              <dt>Wants</dt><dd><Chips items={p.wants ?? []} /></dd>
              <dt>Granted</dt><dd><Chips items={p.grants ?? []} /></dd>
              <dt>HTTP allow</dt><dd><Chips items={p.httpAllow ?? []} /></dd>
            </dl>
          </div>
        </section>
      ))}
      {data && data.history.length > 0 && (
        <>
          <h2 style="margin:24px 0 10px">Reload history</h2>
          <div class="table-wrap">
            <table class="table" data-testid="plugin-history">
              <thead><tr><th>When</th><th>File</th><th>Plugin</th><th>Trigger</th><th>Outcome</th><th>Error</th></tr></thead>
              <tbody>
                {[...data.history].reverse().slice(0, 50).map((h) => (
                  <tr data-testid="history-row">
                    <td style="white-space:nowrap">{fmtDate(h.at)}</td>
                    <td class="mono">{h.file}</td>
                    <td>{h.plugin}{h.version ? ` v${h.version}` : ""}</td>
                    <td>{h.trigger}</td>
                    <td><Badge kind={stateKind(h.outcome)}>{h.outcome}</Badge></td>
                    <td class="small">{h.error}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </main>
  );
}

function Chips(p: { items: string[] }) {
  if (!p.items.length) return <span class="muted">—</span>;
  return <div class="chips">{p.items.map((x) => <span class="chip">{x}</span>)}</div>;
}
