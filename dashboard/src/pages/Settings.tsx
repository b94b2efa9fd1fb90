import { useEffect, useState } from "preact/hooks";
import { pb } from "../pb";
import {
  PageHeader, TextField, NumberField, CheckboxField, TextAreaField, SelectField, ListField, ErrorBox, Loading, Badge, EmptyState,
  toast, confirmDialog, fieldErrors, errorMessage, fmtDate, fmtBytes, link, navigate,
} from "../ui";
import { reloadCollections, useCollections } from "../collectionsStore";
import { reloadAppSettings } from "../appSettings";

const SECTIONS: Array<[string, string]> = [
  ["", "Application"],
  ["mail", "Mail settings"],
  ["storage", "Files storage"],
  ["backups", "Backups"],
  ["crons", "Crons"],
  ["import", "Import collections"],
  ["export", "Export collections"],
];

export function SettingsPage(props: { sub: string }) {
  const sub = SECTIONS.some(([s]) => s === props.sub) ? props.sub : "";
  let body;
  if (sub === "") body = <AppSettings />;
  else if (sub === "mail") body = <MailSettings />;
  else if (sub === "storage") body = <StorageSettings />;
  else if (sub === "backups") body = <Backups />;
  else if (sub === "crons") body = <Crons />;
  else if (sub === "import") body = <ImportCollections />;
  else body = <ExportCollections />;
  return (
    <div class="page">
      <nav class="subnav" aria-label="Settings">
        <div class="subnav-head"><h2>Settings</h2></div>
        <ul class="subnav-list">
          {SECTIONS.map(([s, label]) => (
            <li><a href={link(s ? `/settings/${s}` : "/settings")} class={s === sub ? "active" : ""} aria-current={s === sub ? "page" : undefined}><span class="name">{label}</span></a></li>
          ))}
        </ul>
      </nav>
      <main class="main" id="main" tabIndex={-1}>{body}</main>
    </div>
  );
}

type S = Record<string, any>;

/** Load the settings, edit a copy, save the changed sections. */
function useSettings() {
  const [s, setS] = useState<S | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [errs, setErrs] = useState<Record<string, string>>({});
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    pb.settings.getAll().then(setS, (e) => setError(errorMessage(e)));
  }, []);
  const set = (section: string, patch: S) => setS((cur) => ({ ...cur, [section]: { ...(cur?.[section] ?? {}), ...patch } }));
  async function save(sections: string[], msg = "Settings saved.") {
    if (!s) return;
    setBusy(true);
    setError(null);
    setErrs({});
    try {
      const body: S = {};
      for (const k of sections) body[k] = s[k];
      setS(await pb.settings.update(body));
      toast(msg);
      reloadAppSettings();
    } catch (e) {
      setError(errorMessage(e));
      setErrs(fieldErrors(e));
    } finally {
      setBusy(false);
    }
  }
  return { s, set, save, error, errs, busy, setError };
}

function AppSettings() {
  const { s, set, save, error, errs, busy } = useSettings();
  if (!s) return <><PageHeader title="Application" /><ErrorBox error={error} />{!error && <Loading />}</>;
  const rules: S[] = s.rateLimits?.rules ?? [];
  const setRule = (i: number, patch: S) => set("rateLimits", { rules: rules.map((r, j) => (j === i ? { ...r, ...patch } : r)) });
  return (
    <form noValidate onSubmit={(e) => { e.preventDefault(); save(["meta", "trustedProxy", "rateLimits", "batch"]); }} data-testid="app-settings">
      <PageHeader title="Application" crumbs="Settings" actions={<button class="btn btn-primary" type="submit" disabled={busy}>{busy ? "Saving…" : "Save changes"}</button>} />
      <ErrorBox error={error} />
      <div class="card">
        <h2>General</h2>
        <div class="grid-2">
          <TextField label="Application name" name="appName" value={s.meta?.appName} onChange={(v) => set("meta", { appName: v })} error={errs["meta.appName"]} required />
          <TextField label="Application URL" name="appURL" value={s.meta?.appURL} onChange={(v) => set("meta", { appURL: v })} error={errs["meta.appURL"]} required />
        </div>
        <CheckboxField switch label="Hide collection create and edit controls" hint="Useful in production to avoid accidental schema changes." checked={!!s.meta?.hideControls} onChange={(v) => set("meta", { hideControls: v })} />
      </div>
      <div class="card">
        <h2>Trusted proxy</h2>
        <p class="muted small" style="margin-top:0">When the server runs behind a reverse proxy, the headers that carry the client's IP.</p>
        <div class="grid-2">
          <ListField label="Client IP headers" value={s.trustedProxy?.headers} onChange={(v) => set("trustedProxy", { headers: v })} error={errs["trustedProxy.headers"]} hint="e.g. X-Forwarded-For, CF-Connecting-IP" />
          <div style="padding-top:26px"><CheckboxField label="Use the leftmost IP (instead of the rightmost)" checked={!!s.trustedProxy?.useLeftmostIP} onChange={(v) => set("trustedProxy", { useLeftmostIP: v })} /></div>
        </div>
      </div>
      <div class="card">
        <div class="row-between" style="margin-bottom:10px">
          <h2>Rate limits</h2>
          <CheckboxField switch label="Enabled" checked={!!s.rateLimits?.enabled} onChange={(v) => set("rateLimits", { enabled: v })} class="" />
        </div>
        {errs["rateLimits.enabled"] && <div class="field-error">{errs["rateLimits.enabled"]}</div>}
        <div class="table-wrap" style="box-shadow:none">
          <table class="table">
            <thead><tr><th>Label (tag or path)</th><th>Max requests</th><th>Interval (s)</th><th>Audience</th><th><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>
              {rules.map((r, i) => (
                <tr>
                  <td><TextField label={<span class="sr-only">Rule {i + 1} label</span>} class="compact" mono value={r.label} onChange={(v) => setRule(i, { label: v })} error={errs[`rateLimits.rules.${i}.label`]} /></td>
                  <td><NumberField label={<span class="sr-only">Rule {i + 1} max requests</span>} value={r.maxRequests} onChange={(v) => setRule(i, { maxRequests: v ?? 0 })} error={errs[`rateLimits.rules.${i}.maxRequests`]} /></td>
                  <td><NumberField label={<span class="sr-only">Rule {i + 1} interval</span>} value={r.duration} onChange={(v) => setRule(i, { duration: v ?? 0 })} error={errs[`rateLimits.rules.${i}.duration`]} /></td>
                  <td><SelectField label={<span class="sr-only">Rule {i + 1} audience</span>} value={r.audience ?? ""} onChange={(v) => setRule(i, { audience: v })}
                    options={[{ value: "", label: "All" }, { value: "@guest", label: "Guests" }, { value: "@auth", label: "Authenticated" }]} /></td>
                  <td><button type="button" class="btn btn-sm btn-ghost" aria-label={`Remove rule ${i + 1}`} onClick={() => set("rateLimits", { rules: rules.filter((_, j) => j !== i) })}>Remove</button></td>
                </tr>
              ))}
              {!rules.length && <tr><td colSpan={5} class="muted">No rules.</td></tr>}
            </tbody>
          </table>
        </div>
        <button type="button" class="btn btn-sm" style="margin-top:10px" onClick={() => set("rateLimits", { rules: [...rules, { label: "", maxRequests: 300, duration: 10, audience: "" }] })}>+ Add rule</button>
      </div>
    </form>
  );
}

function MailSettings() {
  const { s, set, save, error, errs, busy } = useSettings();
  const [to, setTo] = useState("");
  const [template, setTemplate] = useState("verification");
  const [testing, setTesting] = useState(false);
  if (!s) return <><PageHeader title="Mail settings" /><ErrorBox error={error} />{!error && <Loading />}</>;
  const smtp = s.smtp ?? {};
  async function test() {
    setTesting(true);
    try {
      await pb.settings.testEmail("_superusers", to, template);
      toast(`Test email sent to ${to}.`);
    } catch (e) {
      toast(`Test email failed: ${errorMessage(e)}`, "error");
    } finally {
      setTesting(false);
    }
  }
  return (
    <form noValidate onSubmit={(e) => { e.preventDefault(); save(["meta", "smtp"]); }} data-testid="mail-settings">
      <PageHeader title="Mail settings" crumbs="Settings" actions={<button class="btn btn-primary" type="submit" disabled={busy}>{busy ? "Saving…" : "Save changes"}</button>} />
      <ErrorBox error={error} />
      <div class="card">
        <h2>Sender</h2>
        <div class="grid-2">
          <TextField label="Sender name" value={s.meta?.senderName} onChange={(v) => set("meta", { senderName: v })} error={errs["meta.senderName"]} />
          <TextField label="Sender address" type="email" value={s.meta?.senderAddress} onChange={(v) => set("meta", { senderAddress: v })} error={errs["meta.senderAddress"]} />
        </div>
      </div>
      <div class="card">
        <div class="row-between" style="margin-bottom:10px">
          <h2>SMTP server</h2>
          <CheckboxField switch label="Use SMTP" checked={!!smtp.enabled} onChange={(v) => set("smtp", { enabled: v })} class="" />
        </div>
        {!smtp.enabled && <p class="muted small">Off: mail is sent with the local sendmail command.</p>}
        {smtp.enabled && <>
          <div class="grid-2">
            <TextField label="Host" value={smtp.host} onChange={(v) => set("smtp", { host: v })} error={errs["smtp.host"]} required />
            <NumberField label="Port" value={smtp.port} onChange={(v) => set("smtp", { port: v ?? 0 })} error={errs["smtp.port"]} />
            <TextField label="Username" value={smtp.username} onChange={(v) => set("smtp", { username: v })} error={errs["smtp.username"]} autocomplete="off" />
            <TextField label="Password" type="password" value={smtp.password} onChange={(v) => set("smtp", { password: v })} error={errs["smtp.password"]} autocomplete="new-password" hint="Leave empty to keep the saved one." />
            <SelectField label="TLS" value={smtp.tls ? "tls" : "auto"} onChange={(v) => set("smtp", { tls: v === "tls" })} options={[{ value: "auto", label: "Auto (StartTLS)" }, { value: "tls", label: "Always TLS" }]} />
            <SelectField label="Auth method" value={smtp.authMethod || "PLAIN"} onChange={(v) => set("smtp", { authMethod: v })} options={["PLAIN", "LOGIN"]} />
          </div>
          <TextField label="EHLO/HELO domain" value={smtp.localName} onChange={(v) => set("smtp", { localName: v })} error={errs["smtp.localName"]} hint="Optional; defaults to localhost." />
        </>}
      </div>
      <div class="card">
        <h2>Send a test email</h2>
        <div class="grid-2">
          <TextField label="Recipient" type="email" value={to} onChange={setTo} name="testTo" />
          <SelectField label="Template" value={template} onChange={setTemplate} options={[
            { value: "verification", label: "Verification" }, { value: "password-reset", label: "Password reset" },
            { value: "email-change", label: "Email change" }, { value: "otp", label: "OTP" }, { value: "login-alert", label: "Login alert" }]} />
        </div>
        <button type="button" class="btn" disabled={!to || testing} onClick={test}>{testing ? "Sending…" : "Send test email"}</button>
        <p class="muted small">Save your changes first: the test uses the saved settings.</p>
      </div>
    </form>
  );
}

function StorageSettings() {
  const { s, set, save, error, errs, busy } = useSettings();
  const [testing, setTesting] = useState(false);
  if (!s) return <><PageHeader title="Files storage" /><ErrorBox error={error} />{!error && <Loading />}</>;
  const s3 = s.s3 ?? {};
  async function test() {
    setTesting(true);
    try {
      await pb.settings.testS3("storage");
      toast("S3 connection works.");
    } catch (e) {
      toast(`S3 test failed: ${errorMessage(e)}`, "error");
    } finally {
      setTesting(false);
    }
  }
  return (
    <form noValidate onSubmit={(e) => { e.preventDefault(); save(["s3"]); }} data-testid="storage-settings">
      <PageHeader title="Files storage" crumbs="Settings" actions={<button class="btn btn-primary" type="submit" disabled={busy}>{busy ? "Saving…" : "Save changes"}</button>} />
      <ErrorBox error={error} />
      <div class="card">
        <p class="muted" style="margin-top:0">Uploaded files are kept in the local <code>pb_data/storage</code> folder unless S3-compatible storage is on.</p>
        <S3Form s3={s3} set={(p) => set("s3", p)} errs={errs} prefix="s3" />
        {s3.enabled && <button type="button" class="btn" onClick={test} disabled={testing}>{testing ? "Testing…" : "Test connection"}</button>}
      </div>
    </form>
  );
}

function S3Form(p: { s3: S; set: (patch: S) => void; errs: Record<string, string>; prefix: string }) {
  const { s3, set, errs } = p;
  const e = (k: string) => errs[`${p.prefix}.${k}`];
  return <>
    <CheckboxField switch label="Use S3 storage" checked={!!s3.enabled} onChange={(v) => set({ enabled: v })} error={e("enabled")} />
    {s3.enabled && <div class="grid-2">
      <TextField label="Endpoint" value={s3.endpoint} onChange={(v) => set({ endpoint: v })} error={e("endpoint")} required />
      <TextField label="Bucket" value={s3.bucket} onChange={(v) => set({ bucket: v })} error={e("bucket")} required />
      <TextField label="Region" value={s3.region} onChange={(v) => set({ region: v })} error={e("region")} required />
      <TextField label="Access key" value={s3.accessKey} onChange={(v) => set({ accessKey: v })} error={e("accessKey")} required autocomplete="off" />
      <TextField label="Secret" type="password" value={s3.secret} onChange={(v) => set({ secret: v })} error={e("secret")} autocomplete="new-password" hint="Leave empty to keep the saved one." />
      <div style="padding-top:26px"><CheckboxField label="Force path-style addressing" checked={!!s3.forcePathStyle} onChange={(v) => set({ forcePathStyle: v })} /></div>
    </div>}
  </>;
}

type Backup = { key: string; size: number; modified: string };

function Backups() {
  const st = useSettings();
  const [list, setList] = useState<Backup[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const [name, setName] = useState("");
  const load = () => pb.backups.getFullList().then((l) => setList(l.sort((a, b) => b.modified.localeCompare(a.modified))), (e) => setError(errorMessage(e)));
  useEffect(() => void load(), []);

  async function create() {
    setBusy("create");
    setError(null);
    try {
      await pb.backups.create(name.trim());
      setName("");
      toast("Backup created.");
      await load();
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setBusy(null);
    }
  }
  async function download(key: string) {
    try {
      const token = await pb.files.getToken();
      const a = document.createElement("a");
      a.href = pb.backups.getDownloadURL(token, key);
      a.download = key;
      document.body.appendChild(a);
      a.click();
      a.remove();
    } catch (e) {
      toast(errorMessage(e), "error");
    }
  }
  async function upload(e: Event) {
    const input = e.target as HTMLInputElement;
    const file = input.files?.[0];
    if (!file) return;
    setBusy("upload");
    try {
      await pb.backups.upload({ file });
      toast(`Backup ${file.name} uploaded.`);
      await load();
    } catch (err) {
      toast(`Upload failed: ${errorMessage(err)}`, "error");
    } finally {
      input.value = "";
      setBusy(null);
    }
  }
  async function restore(key: string) {
    const ok = await confirmDialog({ title: `Restore ${key}?`, message: "The current data is replaced by the backup's and the server restarts. Anything written since the backup is lost.", confirmText: "Restore", danger: true, typed: key });
    if (!ok) return;
    setBusy(key);
    try {
      await pb.backups.restore(key);
      toast("Restoring… the server switches to the backup's data.", "info");
      // Wait for the server to answer again, then re-read what the restored data holds.
      for (let i = 0; i < 60; i++) {
        await new Promise((r) => setTimeout(r, 500));
        try {
          await pb.health.check({ requestKey: null });
          break;
        } catch {
          /* still restarting */
        }
      }
      await reloadCollections().catch(() => {});
      await load();
      toast(`Restored ${key}.`);
    } catch (e) {
      toast(`Restore failed: ${errorMessage(e)}`, "error");
    } finally {
      setBusy(null);
    }
  }
  async function remove(key: string) {
    if (!(await confirmDialog({ title: `Delete backup ${key}?`, confirmText: "Delete", danger: true }))) return;
    try {
      await pb.backups.delete(key);
      toast("Backup deleted.");
      await load();
    } catch (e) {
      toast(errorMessage(e), "error");
    }
  }

  const s = st.s;
  return (
    <div>
      <PageHeader title="Backups" crumbs="Settings" actions={<>
        <label class="btn" tabIndex={0} onKeyDown={(e) => (e.key === "Enter" || e.key === " ") && (e.currentTarget.querySelector("input") as HTMLInputElement)?.click()}>
          {busy === "upload" ? "Uploading…" : "Upload backup"}
          <input type="file" accept=".zip,application/zip" class="sr-only" tabIndex={-1} onChange={upload} aria-label="Upload a backup zip" data-testid="backup-upload" />
        </label>
      </>} />
      <ErrorBox error={error} />
      <div class="card">
        <h2>Create a backup</h2>
        <div class="row" style="align-items:flex-start">
          <TextField class="spacer" label="Name (optional)" value={name} onChange={setName} placeholder="e.g. before-migration.zip" hint="Letters, digits, - and _; ends with .zip" name="backupName" />
          <button type="button" class="btn btn-primary" style="margin-top:23px" disabled={busy === "create"} onClick={create} data-testid="create-backup">{busy === "create" ? "Creating…" : "Create backup"}</button>
        </div>
      </div>
      <div class="table-wrap" style="margin-bottom:16px">
        <table class="table" data-testid="backups-table">
          <thead><tr><th>Backup</th><th class="num">Size</th><th>Created</th><th><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>
            {list === null ? <tr><td colSpan={4}><Loading /></td></tr> : list.length === 0 ? <tr><td colSpan={4} class="muted">No backups yet.</td></tr> :
              list.map((b) => (
                <tr data-testid="backup-row">
                  <td class="mono">{b.key}</td>
                  <td class="num">{fmtBytes(b.size)}</td>
                  <td>{fmtDate(b.modified)}</td>
                  <td style="text-align:right;white-space:nowrap">
                    <button class="btn btn-sm btn-ghost" onClick={() => download(b.key)}>Download</button>
                    <button class="btn btn-sm btn-ghost" onClick={() => restore(b.key)} disabled={busy === b.key}>Restore</button>
                    <button class="btn btn-sm btn-ghost" style="color:var(--danger)" onClick={() => remove(b.key)}>Delete</button>
                  </td>
                </tr>
              ))}
          </tbody>
        </table>
      </div>
      {s && (
        <form class="card" noValidate onSubmit={(e) => { e.preventDefault(); st.save(["backups"], "Backup settings saved."); }} data-testid="backup-settings">
          <h2>Automatic backups</h2>
          <ErrorBox error={st.error} />
          <div class="grid-2">
            <TextField label="Cron expression" mono value={s.backups?.cron} onChange={(v) => st.set("backups", { cron: v })} error={st.errs["backups.cron"]} hint="e.g. 0 0 * * * (every day at midnight); empty = off" name="backupCron" />
            <NumberField label="Backups to keep" value={s.backups?.cronMaxKeep} onChange={(v) => st.set("backups", { cronMaxKeep: v ?? 0 })} error={st.errs["backups.cronMaxKeep"]} />
          </div>
          <S3Form s3={s.backups?.s3 ?? {}} set={(p) => st.set("backups", { s3: { ...(s.backups?.s3 ?? {}), ...p } })} errs={st.errs} prefix="backups.s3" />
          <div class="card-foot"><button class="btn btn-primary" type="submit" disabled={st.busy}>Save backup settings</button></div>
        </form>
      )}
    </div>
  );
}

function Crons() {
  const [list, setList] = useState<Array<{ id: string; expression: string }> | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [running, setRunning] = useState<string | null>(null);
  useEffect(() => void pb.crons.getFullList().then(setList, (e) => setError(errorMessage(e))), []);
  async function run(id: string) {
    setRunning(id);
    try {
      await pb.crons.run(id);
      toast(`Job ${id} ran.`);
    } catch (e) {
      toast(`Job ${id} failed: ${errorMessage(e)}`, "error");
    } finally {
      setRunning(null);
    }
  }
  return (
    <div>
      <PageHeader title="Crons" crumbs="Settings" />
      <ErrorBox error={error} />
      {list && list.length === 0 ? <EmptyState title="No scheduled jobs">Jobs registered by the server and its plugins show up here.</EmptyState> : (
        <div class="table-wrap">
          <table class="table">
            <thead><tr><th>Job</th><th>Schedule</th><th><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>
              {list === null && !error ? <tr><td colSpan={3}><Loading /></td></tr> : (list ?? []).map((c) => (
                <tr data-testid="cron-row">
                  <td class="mono">{c.id}</td>
                  <td><code>{c.expression}</code></td>
                  <td style="text-align:right"><button class="btn btn-sm" disabled={running === c.id} onClick={() => run(c.id)}>{running === c.id ? "Running…" : "Run now"}</button></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function ImportCollections() {
  const [text, setText] = useState("");
  const [deleteMissing, setDeleteMissing] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const { collections } = useCollections();
  let parsed: any[] | null = null;
  let parseError: string | null = null;
  if (text.trim()) {
    try {
      const v = JSON.parse(text);
      if (!Array.isArray(v)) throw new Error("expected a list of collections");
      parsed = v;
    } catch (e: any) {
      parseError = `Invalid JSON: ${e.message}`;
    }
  }
  const names = new Set((parsed ?? []).map((c) => c?.name));
  const toDelete = deleteMissing ? collections.filter((c) => !c.system && !names.has(c.name)) : [];
  async function run() {
    if (!parsed) return;
    if (toDelete.length && !(await confirmDialog({ title: "Delete missing collections?", message: `These collections and their records will be deleted: ${toDelete.map((c) => c.name).join(", ")}`, danger: true, confirmText: "Import and delete" }))) return;
    setBusy(true);
    setError(null);
    try {
      await pb.collections.import(parsed as any, deleteMissing);
      await reloadCollections();
      toast(`Imported ${parsed.length} collections.`);
      navigate("/collections");
    } catch (e) {
      const fe = fieldErrors(e);
      setError([errorMessage(e), ...Object.entries(fe).map(([k, m]) => `${k}: ${m}`)].join("\n"));
    } finally {
      setBusy(false);
    }
  }
  return (
    <div>
      <PageHeader title="Import collections" crumbs="Settings" />
      <div class="card">
        <p class="muted" style="margin-top:0">Paste (or load) the collections JSON exported by Ferrobase or PocketBase. Existing collections with the same id or name are updated.</p>
        <div class="row" style="margin-bottom:12px">
          <label class="btn btn-sm">Load from file
            <input type="file" accept=".json,application/json" class="sr-only" aria-label="Load collections JSON from a file"
              onChange={async (e) => { const f = (e.target as HTMLInputElement).files?.[0]; if (f) setText(await f.text()); }} />
          </label>
        </div>
        <TextAreaField label="Collections JSON" mono rows={14} value={text} onChange={setText} error={parseError ?? undefined} name="importJson" />
        <CheckboxField label="Delete collections (and their records) that are not in the import" checked={deleteMissing} onChange={setDeleteMissing} />
        {error && <pre class="alert alert-error" role="alert" data-testid="form-error" style="white-space:pre-wrap;font-family:inherit">{error}</pre>}
        {parsed && (() => {
          const byKey = (c: any) => collections.find((x) => (c?.id && x.id === c.id) || x.name === c?.name);
          const created = parsed.filter((c) => !byKey(c)).map((c) => c?.name);
          const changed = parsed.filter((c) => {
            const x: any = byKey(c);
            if (!x) return false;
            const { created: _a, updated: _b, ...rest } = x;
            return JSON.stringify({ ...rest, ...c }) !== JSON.stringify(rest);
          }).map((c) => c?.name);
          return (
            <div class="alert alert-info small" data-testid="import-summary">
              <div><strong>{parsed.length}</strong> collections in the file.</div>
              {created.length > 0 && <div>New: {created.join(", ")}</div>}
              {changed.length > 0 && <div>Changed: {changed.join(", ")}</div>}
              {toDelete.length > 0 && <div>Deleted: {toDelete.map((c) => c.name).join(", ")}</div>}
              {!created.length && !changed.length && !toDelete.length && <div>No changes.</div>}
            </div>
          );
        })()}
        <button class="btn btn-primary" disabled={!parsed || busy} onClick={run}>{busy ? "Importing…" : "Review and import"}</button>
      </div>
    </div>
  );
}

function ExportCollections() {
  const [list, setList] = useState<any[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    pb.collections.getFullList({ sort: "name" }).then((l) => setList(l.map((c: any) => {
      const x = { ...c };
      delete x.created;
      delete x.updated;
      return x;
    })), (e) => setError(errorMessage(e)));
  }, []);
  const json = list ? JSON.stringify(list, null, 2) : "";
  function download() {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([json], { type: "application/json" }));
    a.download = `pb_schema_${new Date().toISOString().slice(0, 10)}.json`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }
  return (
    <div>
      <PageHeader title="Export collections" crumbs="Settings" actions={list && <>
        <button class="btn" onClick={() => navigator.clipboard?.writeText(json).then(() => toast("Copied."))}>Copy</button>
        <button class="btn btn-primary" onClick={download}>Download JSON</button>
      </>} />
      <ErrorBox error={error} />
      {!list && !error ? <Loading /> : list && (
        <>
          <p class="muted">{list.length} collections, in the JSON format PocketBase imports.</p>
          <pre class="code" style="max-height:60vh" tabIndex={0} aria-label="Collections JSON">{json}</pre>
        </>
      )}
    </div>
  );
}

