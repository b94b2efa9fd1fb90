import { ComponentChildren } from "preact";

export function Spinner(p: { label?: string; small?: boolean }) {
  return (
    <span class={`spinner ${p.small ? "spinner-sm" : ""}`} role="status" aria-label={p.label ?? "Loading"} />
  );
}

/** A centered loading block. */
export function Loading(p: { label?: string }) {
  return (
    <div class="loading-block" data-testid="loading">
      <Spinner label={p.label} /> <span>{p.label ?? "Loading…"}</span>
    </div>
  );
}

export function EmptyState(p: { title: ComponentChildren; children?: ComponentChildren; action?: ComponentChildren }) {
  return (
    <div class="empty">
      <h3>{p.title}</h3>
      {p.children && <p>{p.children}</p>}
      {p.action}
    </div>
  );
}

/** A general (non-field) error box. */
export function ErrorBox(p: { error?: string | null }) {
  if (!p.error) return null;
  return <div class="alert alert-error" role="alert" data-testid="form-error">{p.error}</div>;
}

/** Page header with title, optional breadcrumbs and right-side actions. */
export function PageHeader(p: { title: ComponentChildren; crumbs?: ComponentChildren; actions?: ComponentChildren }) {
  return (
    <header class="page-head">
      <div>
        {p.crumbs && <div class="crumbs">{p.crumbs}</div>}
        <h1>{p.title}</h1>
      </div>
      {p.actions && <div class="page-actions">{p.actions}</div>}
    </header>
  );
}

export function Tabs(p: { tabs: Array<{ id: string; label: ComponentChildren; badge?: ComponentChildren }>; active: string; onChange: (id: string) => void }) {
  return (
    <div class="tabs" role="tablist">
      {p.tabs.map((t) => (
        <button role="tab" type="button" aria-selected={t.id === p.active} class={`tab ${t.id === p.active ? "active" : ""}`} onClick={() => p.onChange(t.id)}
          onKeyDown={(e) => {
            const i = p.tabs.findIndex((x) => x.id === p.active);
            if (e.key === "ArrowRight") p.onChange(p.tabs[(i + 1) % p.tabs.length].id);
            if (e.key === "ArrowLeft") p.onChange(p.tabs[(i - 1 + p.tabs.length) % p.tabs.length].id);
          }}>
          {t.label}{t.badge != null && <span class="tab-badge">{t.badge}</span>}
        </button>
      ))}
    </div>
  );
}

/** A small colored label. kind: ok | warn | err | muted | info */
export function Badge(p: { kind?: string; children: ComponentChildren; title?: string }) {
  return <span class={`badge badge-${p.kind ?? "muted"}`} title={p.title}>{p.children}</span>;
}

/** Format a PocketBase date ("2024-01-01 10:00:00.000Z") in the user's time zone. */
export function fmtDate(s: string | null | undefined): string {
  if (!s) return "";
  const d = new Date(s.replace(" ", "T"));
  if (isNaN(d.getTime())) return s;
  return d.toLocaleString(undefined, { year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

/** Bytes as KB/MB. */
export function fmtBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}
