import type { CollectionModel } from "pocketbase";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { pb } from "../pb";
import {
  Modal, Tabs, TextField, TextAreaField, NumberField, CheckboxField, ListField, ErrorBox, Badge,
  confirmDialog, toast, fieldErrors, errorMessage, scopedErrors, navigate, useId,
} from "../ui";
import { reloadCollections } from "../collectionsStore";
import { FIELD_TYPES, FieldOptions, newField, AnyField } from "./fieldTypes";
import { OAuth2Providers } from "./OAuth2Providers";

type C = Record<string, any>;

const RULES: Array<[string, string, string]> = [
  ["listRule", "List/Search rule", "Who can list records."],
  ["viewRule", "View rule", "Who can view one record."],
  ["createRule", "Create rule", "Who can create records."],
  ["updateRule", "Update rule", "Who can update records."],
  ["deleteRule", "Delete rule", "Who can delete records."],
];
const AUTH_RULES: Array<[string, string, string]> = [
  ["authRule", "Authentication rule", "Extra condition a record must meet to sign in (empty = everyone)."],
  ["manageRule", "Manage rule", "Who can manage other users' email/password without their old password."],
];

function blankCollection(type: string): C {
  const c: C = {
    name: "", type, fields: [], indexes: [],
    listRule: null, viewRule: null, createRule: null, updateRule: null, deleteRule: null,
  };
  if (type === "view") c.viewQuery = "";
  return c;
}

export function CollectionEditor(props: { collection?: CollectionModel; onClose: () => void }) {
  const isNew = !props.collection;
  const [c, setC] = useState<C>(() => (props.collection ? structuredClone(props.collection) : blankCollection("base")));
  const [tab, setTab] = useState("fields");
  const [lastRule, setLastRule] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [errs, setErrs] = useState<Record<string, string>>({});
  const [scaffolds, setScaffolds] = useState<Record<string, C> | null>(null);
  const nameId = useId("cname");

  const [version, setVersion] = useState(0);
  // What closing compares against: the definition as loaded (or the blank new one).
  const initial = useRef<string>(JSON.stringify(c));
  async function close() {
    const dirty = initial.current !== JSON.stringify(c);
    if (dirty && !(await confirmDialog({ title: "Discard your changes?", message: "The collection has unsaved changes.", confirmText: "Discard", danger: true }))) return;
    props.onClose();
  }
  useEffect(() => {
    // Edit the server's current definition, not a possibly stale copy from the list.
    if (isNew) return;
    pb.collections.getOne(props.collection!.id, { requestKey: null }).then((fresh) => {
      initial.current = JSON.stringify(fresh);
      setC(structuredClone(fresh));
      setVersion((v) => v + 1);
    }).catch(() => {});
  }, []);
  useEffect(() => {
    if (!isNew) return;
    pb.collections.getScaffolds().then((s: any) => {
      setScaffolds(s);
      initial.current = JSON.stringify(applyScaffold(s, "base"));
      setC((cur) => ({ ...applyScaffold(s, cur.type), name: cur.name }));
    }).catch(() => {});
  }, []);

  function applyScaffold(s: Record<string, C> | null, type: string): C {
    const base = s?.[type];
    if (!base) return blankCollection(type);
    const copy = structuredClone(base);
    delete copy.id;
    delete copy.created;
    delete copy.updated;
    copy.name = "";
    if (type === "view") copy.viewQuery = "";
    for (const f of copy.fields ?? []) delete f.id;
    // Like PocketBase's new-collection form: created/updated timestamps unless the scaffold has them.
    if (type !== "view") {
      copy.fields ??= [];
      if (!copy.fields.some((f: any) => f.name === "created")) copy.fields.push({ name: "created", type: "autodate", onCreate: true, onUpdate: false, hidden: false, system: false });
      if (!copy.fields.some((f: any) => f.name === "updated")) copy.fields.push({ name: "updated", type: "autodate", onCreate: true, onUpdate: true, hidden: false, system: false });
    }
    return copy;
  }

  const set = (patch: C) => setC((cur) => ({ ...cur, ...patch }));
  const fields: AnyField[] = c.fields ?? [];
  // The OAuth2 providers saved on the server: each has a client secret there that answers
  // never show (one sent without a secret keeps it).
  const storedProviders = useMemo<string[]>(() => {
    if (isNew) return [];
    const ps = JSON.parse(initial.current)?.oauth2?.providers;
    return Array.isArray(ps) ? ps.map((x: C) => x?.name).filter(Boolean) : [];
  }, [version]);
  const clearErrors = (prefix: string) => setErrs((cur) => Object.fromEntries(Object.entries(cur).filter(([k]) => !k.startsWith(prefix))));
  // After a failed save, bring the first field error into view (it may be far down a tab).
  useEffect(() => {
    if (!Object.keys(errs).length) return;
    document.querySelector('#collection-form [data-testid="field-error"]')?.scrollIntoView({ block: "nearest" });
  }, [errs]);
  const setFields = (fs: AnyField[]) => set({ fields: fs });

  async function save(e?: Event) {
    e?.preventDefault();
    setBusy(true);
    setError(null);
    setErrs({});
    try {
      const body = { ...c };
      const saved = isNew ? await pb.collections.create(body) : await pb.collections.update(props.collection!.id, body);
      await reloadCollections();
      toast(isNew ? `Collection “${saved.name}” created.` : `Collection “${saved.name}” saved.`);
      navigate(`/collections/${encodeURIComponent(saved.id)}`);
    } catch (err) {
      const fe = fieldErrors(err);
      setErrs(fe);
      setError(errorMessage(err));
      const keys = Object.keys(fe);
      if (keys.some((k) => k.endsWith("Rule"))) setTab("rules");
      else if (keys.some((k) => k.startsWith("indexes"))) setTab("indexes");
      else if (keys.some((k) => k === "viewQuery")) setTab("query");
      else if (keys.some((k) => k.startsWith("fields"))) setTab("fields");
      else if (keys.some((k) => /^(passwordAuth|otp|mfa|oauth2|authToken|.*Token|.*Template)/.test(k))) setTab("options");
    } finally {
      setBusy(false);
    }
  }

  async function remove() {
    const col = props.collection!;
    const ok = await confirmDialog({
      title: `Delete collection “${col.name}”?`,
      message: "All its records and files will be deleted. This cannot be undone.",
      confirmText: "Delete collection", danger: true, typed: col.name,
    });
    if (!ok) return;
    try {
      await pb.collections.delete(col.id);
      await reloadCollections();
      toast(`Collection “${col.name}” deleted.`);
      navigate("/collections");
    } catch (err) {
      setError(errorMessage(err));
    }
  }

  async function truncate() {
    const col = props.collection!;
    const ok = await confirmDialog({ title: `Delete all records of “${col.name}”?`, message: "The collection stays; every record (and its files) is deleted.", confirmText: "Truncate", danger: true, typed: col.name });
    if (!ok) return;
    try {
      await pb.collections.truncate(col.id);
      toast(`All records of “${col.name}” deleted.`);
    } catch (err) {
      setError(errorMessage(err));
    }
  }

  const tabs = [
    ...(c.type === "view" ? [{ id: "query", label: "Query" }] : [{ id: "fields", label: "Fields", badge: fields.filter((f) => !f.system).length }]),
    { id: "rules", label: "API rules" },
    ...(c.type !== "view" ? [{ id: "indexes", label: "Indexes", badge: (c.indexes ?? []).length }] : []),
    ...(c.type === "auth" ? [{ id: "options", label: "Auth options" }] : []),
  ];
  const activeTab = tabs.some((t) => t.id === tab) ? tab : tabs[0].id;

  return (
    <Modal wide title={isNew ? "New collection" : <>Edit collection <span class="muted">{props.collection!.name}</span></>} onClose={close}
      footer={<>
        {!isNew && !props.collection!.system && (
          <>
            <button type="button" class="btn btn-outline-danger" onClick={remove}>Delete</button>
            {c.type !== "view" && <button type="button" class="btn btn-ghost" onClick={truncate}>Truncate</button>}
          </>
        )}
        <span class="spacer" />
        <button type="button" class="btn btn-ghost" onClick={close}>Cancel</button>
        <button type="submit" form="collection-form" class="btn btn-primary" disabled={busy} data-testid="save-collection">{busy ? "Saving…" : isNew ? "Create" : "Save changes"}</button>
      </>}>
      <form id="collection-form" noValidate onSubmit={save} data-testid="collection-editor" key={version} data-version={version}>
        <ErrorBox error={error} />
        <div class="row" style="align-items:flex-start;gap:16px">
          <TextField id={nameId} class="spacer" label="Name" name="name" value={c.name} onChange={(v) => set({ name: v })} error={errs.name} required autofocus placeholder="e.g. posts"
            disabled={!!props.collection?.system} />
          {isNew && (
            <fieldset class="field" style="border:0;padding:0;margin:0 0 14px">
              <legend style="font-weight:500;font-size:13px;margin-bottom:5px">Type</legend>
              <div class="row" role="radiogroup">
                {["base", "auth", "view"].map((t) => (
                  <label class={`btn btn-sm ${c.type === t ? "btn-primary" : ""}`} style="cursor:pointer">
                    <input type="radio" name="ctype" value={t} checked={c.type === t} class="sr-only"
                      onChange={() => setC((cur) => ({ ...applyScaffold(scaffolds, t), name: cur.name }))} />
                    {t[0].toUpperCase() + t.slice(1)}
                  </label>
                ))}
              </div>
            </fieldset>
          )}
          {!isNew && <div style="padding-top:30px"><Badge kind="info">{c.type}</Badge></div>}
        </div>
        <Tabs tabs={tabs} active={activeTab} onChange={setTab} />
        {activeTab === "fields" && <FieldsEditor fields={fields} setFields={setFields} errs={scopedErrors(errs, "fields")} />}
        {activeTab === "query" && (
          <TextAreaField label="SELECT query" value={c.viewQuery} onChange={(v) => set({ viewQuery: v })} rows={8} mono error={errs.viewQuery}
            hint="A SELECT that returns an id column, e.g. SELECT id, title FROM posts. The server checks it when you save." />
        )}
        {activeTab === "rules" && (
          <div>
            <p class="muted small" style="margin-top:0">Rules are filters in PocketBase's syntax, e.g. <code>@request.auth.id != ""</code>. <strong>Locked</strong> means superusers only; an <strong>empty</strong> rule means everyone, guests included.</p>
            <div class="rule-insert" aria-label="Insert into the rule being edited" role="group">
              <span class="muted small">Insert{lastRule ? "" : " (click into a rule first)"}:</span>
              {[...fields.filter((f) => !f.hidden || f.name === "id").map((f) => f.name), "@request.auth.id", "@request.body.", "@request.query.", "@collection.", "@now"].map((t) => (
                <button type="button" class="chip chip-btn" disabled={!lastRule} onMouseDown={(e) => e.preventDefault()}
                  onClick={() => lastRule && set({ [lastRule]: `${c[lastRule] ?? ""}${c[lastRule] && !/\s$/.test(c[lastRule]) ? " " : ""}${t}` })}>{t}</button>
              ))}
            </div>
            {[...RULES.filter(([k]) => c.type !== "view" || k === "listRule" || k === "viewRule"), ...(c.type === "auth" ? AUTH_RULES : [])].map(([k, label, hint]) => (
              <RuleEditor key={k} name={k} label={label} hint={hint} value={c[k]} onChange={(v) => set({ [k]: v })} error={errs[k]} onFocus={() => setLastRule(k)} />
            ))}
          </div>
        )}
        {activeTab === "indexes" && <IndexesEditor c={c} set={set} errs={errs} />}
        {activeTab === "options" && <AuthOptions c={c} set={set} errs={errs} clearErrors={clearErrors} storedProviders={storedProviders} />}
      </form>
    </Modal>
  );
}

function RuleEditor(p: { name: string; label: string; hint: string; value: string | null; onChange: (v: string | null) => void; error?: string; onFocus?: () => void }) {
  const locked = p.value === null;
  const id = useId("rule");
  return (
    <div class={`field rule-box ${p.error ? "has-error" : ""}`} data-rule={p.name}>
      <div class="rule-head">
        <label for={id}>{p.label}</label>
        <CheckboxField switch label="Locked (superusers only)" checked={locked} onChange={(v) => p.onChange(v ? null : "")} class="" />
      </div>
      {locked ? (
        <div class="rule-locked" id={id} tabIndex={-1}>Only superusers can do this. Unlock to set a rule (an empty rule lets everyone in).</div>
      ) : (
        <textarea id={id} name={p.name} class="input" rows={2} onFocus={p.onFocus} value={p.value ?? ""} placeholder="Empty: everyone, guests included"
          aria-invalid={p.error ? "true" : undefined} aria-describedby={`${id}-msg`}
          onInput={(e) => p.onChange((e.target as HTMLTextAreaElement).value)} />
      )}
      {p.error ? <div class="field-error" id={`${id}-msg`} role="alert" data-testid="field-error">{p.error}</div>
        : <div class="hint" id={`${id}-msg`}>{p.hint}{!locked && p.value === "" && <strong> Currently public.</strong>}</div>}
    </div>
  );
}

function FieldsEditor(p: { fields: AnyField[]; setFields: (f: AnyField[]) => void; errs: Record<string, string> }) {
  const [open, setOpen] = useState<number | null>(null);
  const [addType, setAddType] = useState("text");
  // After a failed save, open the first field the server complained about.
  useEffect(() => {
    const idx = Object.keys(p.errs).map((k) => parseInt(k, 10)).filter((n) => !isNaN(n)).sort((a, b) => a - b)[0];
    if (idx !== undefined) setOpen(idx);
  }, [JSON.stringify(p.errs)]);
  const addId = useId("addtype");
  const update = (i: number, patch: Partial<AnyField>) => p.setFields(p.fields.map((f, j) => (j === i ? { ...f, ...patch } : f)));
  const move = (i: number, d: number) => {
    const j = i + d;
    if (j < 0 || j >= p.fields.length) return;
    const fs = [...p.fields];
    [fs[i], fs[j]] = [fs[j], fs[i]];
    p.setFields(fs);
    if (open === i) setOpen(j);
  };
  return (
    <div>
      <div class="fields-list">
        {p.fields.map((f, i) => {
          const fe = scopedErrors(p.errs, String(i));
          const hasErr = Object.keys(fe).length > 0;
          const isOpen = open === i;
          const label = `Field ${i + 1} name`;
          return (
            <div class={`fcard ${isOpen ? "open" : ""} ${hasErr ? "fcard-error" : ""}`} data-testid="field-card" data-field-type={f.type}>
              <div class="fcard-head">
                <span class="fcard-type">{f.type}</span>
                <label class="sr-only" for={`fname-${i}`}>{label}</label>
                <input id={`fname-${i}`} class="input mono" value={f.name} disabled={f.system} data-testid="field-name"
                  aria-invalid={fe.name ? "true" : undefined} onInput={(e) => update(i, { name: (e.target as HTMLInputElement).value })} />
                {f.system && <Badge>system</Badge>}
                {f.required && <Badge kind="warn">required</Badge>}
                {f.hidden && <Badge>hidden</Badge>}
                <button type="button" class="btn-icon" aria-label={`Move ${f.name} up`} onClick={() => move(i, -1)}>↑</button>
                <button type="button" class="btn-icon" aria-label={`Move ${f.name} down`} onClick={() => move(i, 1)}>↓</button>
                <button type="button" class="btn btn-sm btn-ghost" aria-expanded={isOpen} onClick={() => setOpen(isOpen ? -1 : i)}>Options</button>
                {!f.system && <button type="button" class="btn-icon" aria-label={`Remove field ${f.name}`} onClick={() => p.setFields(p.fields.filter((_, j) => j !== i))}>×</button>}
              </div>
              {fe.name && <div class="field-error" role="alert" data-testid="field-error">{fe.name}</div>}
              {isOpen && (
                <div class="fcard-body">
                  <FieldOptions f={f} set={(patch) => update(i, patch)} err={(k) => fe[k]} />
                  {f.type !== "autodate" && <TextField label="Help text" value={f.help ?? ""} onChange={(v) => update(i, { help: v })} error={fe.help} hint="Shown under the field in the record form." />}
                  <div class="row" style="gap:20px;flex-wrap:wrap">
                    {f.type !== "autodate" && <CheckboxField label="Required" checked={!!f.required} onChange={(v) => update(i, { required: v })} error={fe.required} />}
                    <CheckboxField label="Hidden (not in API responses)" checked={!!f.hidden} onChange={(v) => update(i, { hidden: v })} error={fe.hidden} />
                    <CheckboxField label="Presentable (shown in relation pickers)" checked={!!f.presentable} onChange={(v) => update(i, { presentable: v })} />
                  </div>
                </div>
              )}
            </div>
          );
        })}
      </div>
      <div class="row" style="margin-top:12px">
        <label for={addId} class="sr-only">New field type</label>
        <select id={addId} class="input" style="width:180px" value={addType} onChange={(e) => setAddType((e.target as HTMLSelectElement).value)} data-testid="new-field-type">
          {FIELD_TYPES.map((t) => <option value={t.type}>{t.label}</option>)}
        </select>
        <button type="button" class="btn" data-testid="add-field" onClick={() => {
          p.setFields([...p.fields, newField(addType, p.fields)]);
          setOpen(p.fields.length);
        }}>+ Add field</button>
      </div>
    </div>
  );
}

type Advice = { collection: string; collectionId: string; filter: string; sort: string; count: number; totalMs: number; avgMs: number; rowsScanned: number; sorted: boolean; plan: string[]; index: string | null; note: string | null };

function IndexesEditor(p: { c: C; set: (patch: C) => void; errs: Record<string, string> }) {
  const indexes: string[] = p.c.indexes ?? [];
  const [draft, setDraft] = useState("");
  const [advice, setAdvice] = useState<Advice[] | null>(null);
  useEffect(() => {
    if (!p.c.id) return setAdvice([]);
    pb.send("/api/collections/meta/index-advice", {}).then((l: Advice[]) => setAdvice((l ?? []).filter((a) => a.collectionId === p.c.id))).catch(() => setAdvice([]));
  }, [p.c.id]);
  const add = (s: string) => {
    const v = s.trim();
    if (v && !indexes.includes(v)) p.set({ indexes: [...indexes, v] });
  };
  return (
    <div>
      {indexes.length === 0 && <p class="muted">No indexes yet.</p>}
      <ul style="list-style:none;padding:0;margin:0 0 12px" class="stack">
        {indexes.map((ix, i) => (
          <li>
            <div class="row">
              <code class="spacer" style="padding:6px 8px">{ix}</code>
              <button type="button" class="btn btn-sm btn-ghost" aria-label={`Remove index ${i + 1}`} onClick={() => p.set({ indexes: indexes.filter((_, j) => j !== i) })}>Remove</button>
            </div>
            {p.errs[`indexes.${i}`] && <div class="field-error" role="alert" data-testid="field-error">{p.errs[`indexes.${i}`]}</div>}
          </li>
        ))}
      </ul>
      {p.errs.indexes && <div class="field-error" role="alert">{p.errs.indexes}</div>}
      <TextAreaField label="Add an index" value={draft} onChange={setDraft} rows={2} mono placeholder={`CREATE INDEX idx_${p.c.name || "name"}_title ON ${p.c.name || "name"} (title)`}
        hint="A full CREATE [UNIQUE] INDEX statement; it is created when you save." />
      <button type="button" class="btn btn-sm" onClick={() => { add(draft); setDraft(""); }} disabled={!draft.trim()}>+ Add index</button>
      <div class="section-title">Index advice</div>
      {advice === null ? <p class="muted">Loading…</p> : advice.length === 0 ? (
        <p class="muted small">No slow record lists were seen for this collection. Lists that scan many rows without an index show up here with the index that would serve them.</p>
      ) : advice.map((a) => (
        <div class="advice" data-testid="index-advice">
          <div class="row-between">
            <div class="small">Filter <code>{a.filter || "(none)"}</code> sort <code>{a.sort || "(none)"}</code></div>
            <span class="muted small">{a.count}× · avg {a.avgMs.toFixed(1)} ms · {a.rowsScanned} rows scanned</span>
          </div>
          {a.index ? (
            <div class="row" style="margin-top:6px">
              <code class="spacer">{a.index}</code>
              <button type="button" class="btn btn-sm btn-primary" disabled={indexes.includes(a.index)} onClick={() => add(a.index!)}>{indexes.includes(a.index) ? "Added" : "Apply"}</button>
            </div>
          ) : null}
          {a.note && <div class="muted small" style="margin-top:4px">{a.note}</div>}
        </div>
      ))}
      {advice && advice.some((a) => a.index) && <p class="muted small">Applied suggestions are created when you save the collection.</p>}
    </div>
  );
}

const TEMPLATES: Array<[string, string]> = [
  ["verificationTemplate", "Verification"],
  ["resetPasswordTemplate", "Password reset"],
  ["confirmEmailChangeTemplate", "Email change"],
  ["otp.emailTemplate", "One-time password"],
  ["authAlert.emailTemplate", "Sign-in alert"],
];

function AuthOptions(p: { c: C; set: (patch: C) => void; errs: Record<string, string>; clearErrors: (prefix: string) => void; storedProviders: string[] }) {
  const c = p.c;
  const sub = (k: string, patch: C) => p.set({ [k]: { ...(c[k] ?? {}), ...patch } });
  const e = p.errs;
  const dur = (k: string, label: string) => (
    <NumberField label={label} value={c[k]?.duration} onChange={(v) => sub(k, { duration: v ?? 0 })} error={e[`${k}.duration`]} hint="seconds" />
  );
  return (
    <div>
      <div class="card">
        <h2>Password</h2>
        <CheckboxField switch label="Sign in with password" checked={!!c.passwordAuth?.enabled} onChange={(v) => sub("passwordAuth", { enabled: v })} error={e["passwordAuth.enabled"]} />
        <ListField label="Identity fields" value={c.passwordAuth?.identityFields} onChange={(v) => sub("passwordAuth", { identityFields: v })} error={e["passwordAuth.identityFields"]} hint="Fields that can be used as the login identity, e.g. email, username" />
      </div>
      <div class="card">
        <h2>One-time password (OTP)</h2>
        <CheckboxField switch label="Sign in with a one-time code by email" checked={!!c.otp?.enabled} onChange={(v) => sub("otp", { enabled: v })} />
        <div class="grid-2">
          <NumberField label="Code duration" value={c.otp?.duration} onChange={(v) => sub("otp", { duration: v ?? 0 })} error={e["otp.duration"]} hint="seconds" />
          <NumberField label="Code length" value={c.otp?.length} onChange={(v) => sub("otp", { length: v ?? 0 })} error={e["otp.length"]} />
        </div>
      </div>
      <div class="card">
        <h2>Multi-factor authentication (MFA)</h2>
        <CheckboxField switch label="Require two different sign-in methods" checked={!!c.mfa?.enabled} onChange={(v) => sub("mfa", { enabled: v })} error={e["mfa.enabled"]} />
        <div class="grid-2">
          <NumberField label="MFA session duration" value={c.mfa?.duration} onChange={(v) => sub("mfa", { duration: v ?? 0 })} error={e["mfa.duration"]} hint="seconds" />
          <TextField label="MFA rule" mono value={c.mfa?.rule ?? ""} onChange={(v) => sub("mfa", { rule: v })} error={e["mfa.rule"]} hint="Empty = everyone" />
        </div>
      </div>
      <div class="card">
        <h2>OAuth2</h2>
        <CheckboxField switch label="Sign in with OAuth2 providers" checked={!!c.oauth2?.enabled} onChange={(v) => sub("oauth2", { enabled: v })} error={e["oauth2.enabled"]} />
        <OAuth2Providers oauth2={c.oauth2 ?? {}} set={(patch) => sub("oauth2", patch)} errs={e} clearErrors={p.clearErrors}
          stored={p.storedProviders} fields={c.fields ?? []} />
      </div>
      <div class="card">
        <h2>Sign-in alerts</h2>
        <CheckboxField switch label="Email the user when they sign in from a new place" checked={!!c.authAlert?.enabled} onChange={(v) => sub("authAlert", { enabled: v })} />
      </div>
      <div class="card">
        <h2>Mail templates</h2>
        <p class="muted small" style="margin-top:0">Placeholders: <code>{"{APP_NAME}"}</code> <code>{"{APP_URL}"}</code> <code>{"{TOKEN}"}</code> <code>{"{OTP}"}</code> <code>{"{RECORD:email}"}</code> …</p>
        {TEMPLATES.map(([k, label]) => {
          const get = () => (k.includes(".") ? c[k.split(".")[0]]?.emailTemplate : c[k]) ?? {};
          const put = (patch: C) => k.includes(".") ? sub(k.split(".")[0], { emailTemplate: { ...get(), ...patch } }) : p.set({ [k]: { ...get(), ...patch } });
          const ek = k.includes(".") ? `${k.split(".")[0]}.emailTemplate` : k;
          return (
            <details class="tpl">
              <summary>{label}</summary>
              <TextField label="Subject" value={get().subject} onChange={(v) => put({ subject: v })} error={e[`${ek}.subject`]} />
              <TextAreaField label="Body (HTML)" mono rows={6} value={get().body} onChange={(v) => put({ body: v })} error={e[`${ek}.body`]} />
            </details>
          );
        })}
      </div>
      <div class="card">
        <h2>Token durations</h2>
        <div class="grid-3">
          {dur("authToken", "Auth token")}
          {dur("verificationToken", "Verification token")}
          {dur("passwordResetToken", "Password reset token")}
          {dur("emailChangeToken", "Email change token")}
          {dur("fileToken", "File access token")}
        </div>
      </div>
    </div>
  );
}
