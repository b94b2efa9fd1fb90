// The record form (a drawer): generated from the collection's fields, for create and edit,
// with the server's validation errors next to the field they concern.
import type { CollectionField, CollectionModel, RecordModel } from "pocketbase";
import { useMemo, useRef, useState } from "preact/hooks";
import { pb } from "../pb";
import {
  CheckboxField,
  ErrorBox,
  Field,
  Modal,
  NumberField,
  TextField,
  confirmDialog,
  errorMessage,
  fieldErrors,
  toast,
  useId,
} from "../ui";
import { AuthExtras } from "./AuthExtras";
import { Cell, type CellContext } from "./cells";
import { FileInput, type FileValue } from "./FileInput";
import { RelationPicker, knownFromExpand } from "./RelationPicker";
import { RichText } from "./RichText";
import { asArray, formatLocal, fromLocalInput, isMulti, toLocalInput, userTimeZone } from "./util";

type State = Record<string, any>;

/** Fields the form edits (autodate and the auth internals are shown or handled apart). */
function editable(f: CollectionField): boolean {
  if (f.type === "autodate" || f.type === "password") return false;
  if (f.name === "id") return false;
  if (f.system && f.hidden) return false; // tokenKey
  return true;
}

function initValue(f: CollectionField, r: RecordModel | null): any {
  const v = r?.[f.name];
  switch (f.type) {
    case "number":
      return v === undefined || v === null ? null : Number(v);
    case "bool":
      return !!v;
    case "date":
      return toLocalInput(v);
    case "select":
      return isMulti(f) ? asArray(v) : (v ?? "");
    case "relation":
      return asArray(v);
    case "json":
      return v === undefined || v === null ? "" : JSON.stringify(v, null, 2);
    case "file":
      return { kept: asArray(v), added: [] } as FileValue;
    case "geoPoint":
      return { lon: String(v?.lon ?? 0), lat: String(v?.lat ?? 0) };
    default:
      return v ?? "";
  }
}

/** The value sent to the server for a (non-file) field; throws a message for invalid input. */
function payloadValue(f: CollectionField, s: any): any {
  switch (f.type) {
    case "date":
      return fromLocalInput(s);
    case "select":
      return isMulti(f) ? s : s || "";
    case "relation":
      return isMulti(f) ? s : (s[0] ?? "");
    case "json":
      if (String(s).trim() === "") return null;
      try {
        return JSON.parse(s);
      } catch (e) {
        throw "Invalid JSON: " + (e as Error).message;
      }
    case "geoPoint": {
      const lon = Number(s.lon), lat = Number(s.lat);
      if (s.lon === "" || s.lat === "" || isNaN(lon) || isNaN(lat)) throw "Longitude and latitude must be numbers.";
      return { lon, lat };
    }
    default:
      return s;
  }
}

function jsonError(s: string): string {
  if (String(s).trim() === "") return "";
  try {
    JSON.parse(s);
    return "";
  } catch (e) {
    return "Invalid JSON: " + (e as Error).message;
  }
}

export function RecordPanel(props: {
  collection: CollectionModel;
  collections: CollectionModel[];
  record: RecordModel | null;
  ctx: CellContext;
  expand: string;
  onClose: () => void;
  onSaved: (r: RecordModel) => void;
  onDeleted: (id: string) => void;
}) {
  const c = props.collection;
  const rec = props.record;
  const isNew = !rec;
  const isView = c.type === "view";
  const isAuth = c.type === "auth";
  const fields = (c.fields || []).filter(editable);
  const formId = useId("recform");

  const initial = useMemo(() => {
    const s: State = {};
    for (const f of fields) s[f.name] = initValue(f, rec);
    return s;
  }, [rec?.id, c.id]);
  const [state, setState] = useState<State>(initial);
  const [newId, setNewId] = useState("");
  const [password, setPassword] = useState("");
  const [passwordConfirm, setPasswordConfirm] = useState("");
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [general, setGeneral] = useState("");
  const [busy, setBusy] = useState(false);

  const set = (name: string, v: any) => {
    setState((s) => ({ ...s, [name]: v }));
    if (errors[name]) setErrors((e) => ({ ...e, [name]: "" }));
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    if (busy) return;
    const body: Record<string, any> = {};
    const local: Record<string, string> = {};
    for (const f of fields) {
      const s = state[f.name];
      if (f.type === "file") {
        const fv = s as FileValue;
        const init = (initial[f.name] as FileValue).kept;
        if (isNew) {
          if (fv.added.length) body[f.name] = isMulti(f) ? fv.added : fv.added[0];
        } else if (isMulti(f)) {
          if (fv.added.length) body[f.name + "+"] = fv.added;
          const removed = init.filter((n) => !fv.kept.includes(n));
          if (removed.length) body[f.name + "-"] = removed;
        } else if (fv.added.length) {
          body[f.name] = fv.added[0];
        } else if (init.length && !fv.kept.length) {
          body[f.name] = null;
        }
        continue;
      }
      let v: any;
      try {
        v = payloadValue(f, s);
      } catch (msg) {
        local[f.name] = String(msg);
        continue;
      }
      if (isNew) {
        body[f.name] = v;
      } else {
        const before = payloadValue(f, initial[f.name]);
        if (JSON.stringify(before) !== JSON.stringify(v)) body[f.name] = v;
      }
    }
    if (isNew && newId.trim()) body.id = newId.trim();
    if (isAuth && (isNew || password || passwordConfirm)) {
      body.password = password;
      body.passwordConfirm = passwordConfirm;
    }
    if (Object.keys(local).length) {
      setErrors(local);
      setGeneral("Fix the highlighted fields.");
      return;
    }
    setBusy(true);
    setGeneral("");
    try {
      const opts = props.expand ? { expand: props.expand } : {};
      const saved = isNew
        ? await pb.collection(c.id).create(body, opts)
        : await pb.collection(c.id).update(rec!.id, body, opts);
      toast(isNew ? "Record created" : "Record saved");
      props.onSaved(saved);
    } catch (err) {
      const fe = fieldErrors(err);
      const mine: Record<string, string> = {};
      const rest: string[] = [];
      const names = new Set([...fields.map((f) => f.name), "id", "password", "passwordConfirm"]);
      for (const [k, msg] of Object.entries(fe)) {
        const base = k.replace(/^\+/, "").split(".")[0].replace(/[+-]$/, "");
        if (names.has(base)) mine[base] = mine[base] ? `${mine[base]} ${msg}` : msg;
        else rest.push(`${k}: ${msg}`);
      }
      setErrors(mine);
      setGeneral([errorMessage(err), ...rest].join(" "));
    } finally {
      setBusy(false);
    }
  };

  const remove = async () => {
    if (!rec) return;
    const ok = await confirmDialog({
      title: "Delete this record?",
      message: `The record ${rec.id} of ${c.name} will be deleted. This cannot be undone.`,
      confirmText: "Delete",
      danger: true,
    });
    if (!ok) return;
    setBusy(true);
    try {
      await pb.collection(c.id).delete(rec.id);
      toast("Record deleted");
      props.onDeleted(rec.id);
    } catch (err) {
      setGeneral(errorMessage(err));
    } finally {
      setBusy(false);
    }
  };

  const dirty = () => {
    if (newId || password || passwordConfirm) return true;
    return fields.some((f) => {
      const a = state[f.name], b = initial[f.name];
      if (f.type === "file") return a.added.length > 0 || a.kept.join("\n") !== b.kept.join("\n");
      return JSON.stringify(a) !== JSON.stringify(b);
    });
  };
  // The modal may keep the first onClose it was given: read the current form through a ref.
  const live = useRef({ dirty, busy });
  live.current = { dirty, busy };
  const close = async () => {
    if (live.current.busy) return;
    if (live.current.dirty()) {
      const ok = await confirmDialog({
        title: "Discard unsaved changes?",
        message: "The changes made in this form will be lost.",
        confirmText: "Discard",
        danger: true,
      });
      if (!ok) return;
    }
    props.onClose();
  };

  const autodates = (c.fields || []).filter((f) => f.type === "autodate" && rec?.[f.name]);

  if (isView) {
    return (
      <Modal drawer wide class="rec-drawer" title={`${c.name} record`} onClose={props.onClose}
        footer={<button class="btn btn-ghost" onClick={props.onClose}>Close</button>}>
        <p class="rec-muted">View collections are read-only.</p>
        <dl class="rec-details">
          {(c.fields || []).map((f) => (
            <div key={f.name}>
              <dt>{f.name}</dt>
              <dd>{rec ? <Cell record={rec} field={f} ctx={props.ctx} /> : null}</dd>
            </div>
          ))}
        </dl>
      </Modal>
    );
  }

  return (
    <Modal
      drawer
      wide
      class="rec-drawer"
      title={isNew ? `New ${c.name} record` : `Edit ${c.name} record`}
      onClose={close}
      footer={
        <>
          {!isNew && (
            <button type="button" class="btn btn-danger rec-foot-left" onClick={remove} disabled={busy} data-testid="record-delete">
              Delete
            </button>
          )}
          <button type="button" class="btn btn-ghost" onClick={close}>
            Cancel
          </button>
          <button type="submit" form={formId} class="btn btn-primary" disabled={busy} data-testid="record-save">
            {busy ? "Saving…" : isNew ? "Create" : "Save changes"}
          </button>
        </>
      }
    >
      <form id={formId} class="rec-form" onSubmit={submit} noValidate>
        {!isNew && (
          <div class="rec-meta">
            <span>
              <span class="rec-muted">id </span>
              <code>{rec!.id}</code>
            </span>
            {autodates.map((f) => (
              <span key={f.name} title={`${rec![f.name]} UTC`}>
                <span class="rec-muted">{f.name} </span>
                {formatLocal(rec![f.name])}
              </span>
            ))}
          </div>
        )}
        {isAuth && !isNew && rec && <AuthExtras collection={c} record={rec} />}
        <ErrorBox error={general} />
        {isNew && (
          <TextField
            label="id"
            value={newId}
            onChange={setNewId}
            mono
            placeholder="Leave empty to generate one"
            error={errors.id}
          />
        )}
        {fields.map((f) => (
          <FieldEditor
            key={f.name}
            field={f}
            value={state[f.name]}
            initial={initial[f.name]}
            error={errors[f.name]}
            onChange={(v) => set(f.name, v)}
            record={rec}
            collections={props.collections}
            token={props.ctx.fileToken}
          />
        ))}
        {isAuth && (
          <fieldset class="rec-fieldset">
            <legend>{isNew ? "Password" : "Change password (optional)"}</legend>
            <TextField
              label="Password"
              type="password"
              autocomplete="new-password"
              value={password}
              onChange={setPassword}
              required={isNew}
              error={errors.password}
            />
            <TextField
              label="Password confirm"
              type="password"
              autocomplete="new-password"
              value={passwordConfirm}
              onChange={setPasswordConfirm}
              required={isNew}
              error={errors.passwordConfirm}
            />
          </fieldset>
        )}
      </form>
    </Modal>
  );
}

function FieldLabel(p: { f: CollectionField }) {
  return (
    <>
      {p.f.name}
      <span class="rec-type">{p.f.type}</span>
    </>
  );
}

function FieldEditor(props: {
  field: CollectionField;
  value: any;
  initial: any;
  error?: string;
  onChange: (v: any) => void;
  record: RecordModel | null;
  collections: CollectionModel[];
  token: string;
}) {
  const { field: f, value, error, onChange } = props;
  const id = useId("rf");
  const msgId = `${id}-msg`;
  const label = <FieldLabel f={f} />;
  const req = !!f.required;
  const hint = f.help ? String(f.help) : undefined;
  const described = error || hint ? msgId : undefined;
  const [long] = useState(() => typeof value === "string" && (value.length > 60 || value.includes("\n")));

  switch (f.type) {
    case "bool":
      return (
        <CheckboxField id={id} switch label={f.name} checked={!!value} onChange={onChange} error={error} hint={hint} />
      );
    case "number":
      return (
        <NumberField
          id={id}
          label={label}
          required={req}
          value={value}
          onChange={onChange}
          min={f.min ?? undefined}
          max={f.max ?? undefined}
          step={f.onlyInt ? 1 : "any"}
          error={error}
          hint={hint ?? rangeHint(f)}
        />
      );
    case "email":
    case "url":
      return (
        <TextField
          id={id}
          label={label}
          required={req}
          type={f.type}
          value={value}
          onChange={onChange}
          error={error}
          hint={hint}
          autocomplete="off"
        />
      );
    case "date": {
      const utc = fromLocalInput(value);
      return (
        <Field id={id} label={label} required={req} error={error} hint={hint ?? (utc ? `UTC: ${utc}` : `In ${userTimeZone}`)}>
          <div class="rec-inline">
            <input
              id={id}
              class="input"
              type="datetime-local"
              step="1"
              value={value}
              aria-describedby={described}
              aria-invalid={error ? "true" : undefined}
              onInput={(e) => onChange((e.target as HTMLInputElement).value)}
            />
            {value && (
              <button type="button" class="btn btn-ghost btn-sm" onClick={() => onChange("")} aria-label={`Clear ${f.name}`}>
                Clear
              </button>
            )}
          </div>
          {error && utc && <div class="hint">UTC: {utc}</div>}
        </Field>
      );
    }
    case "select": {
      const values: string[] = f.values || [];
      if (!isMulti(f)) {
        return (
          <Field id={id} label={label} required={req} error={error} hint={hint}>
            <select
              id={id}
              class="input"
              value={value}
              aria-describedby={described}
              aria-invalid={error ? "true" : undefined}
              onChange={(e) => onChange((e.target as HTMLSelectElement).value)}
            >
              <option value="">— none —</option>
              {values.map((v) => (
                <option key={v} value={v}>
                  {v}
                </option>
              ))}
            </select>
          </Field>
        );
      }
      const sel: string[] = value;
      return (
        <fieldset class={`field rec-plain rec-checks ${error ? "has-error" : ""}`} aria-describedby={described}>
          <legend>
            {label}
            {req && <span class="req" aria-hidden="true"> *</span>}
          </legend>
          <div class="rec-checkgrid">
            {values.map((v) => {
              const on = sel.includes(v);
              const full = !on && sel.length >= (f.maxSelect || values.length);
              return (
                <label key={v} class={`rec-checkchip ${on ? "on" : ""}`}>
                  <input
                    type="checkbox"
                    checked={on}
                    disabled={full}
                    onChange={() => onChange(on ? sel.filter((x) => x !== v) : [...sel, v])}
                  />
                  {v}
                </label>
              );
            })}
          </div>
          <FieldMsg id={msgId} error={error} hint={hint ?? `Up to ${f.maxSelect}`} />
        </fieldset>
      );
    }
    case "json": {
      const jerr = jsonError(value);
      return (
        <Field id={id} label={label} required={req} error={error || jerr} hint={hint ?? "JSON value"}>
          <textarea
            id={id}
            class="input mono rec-json-input"
            rows={Math.min(14, Math.max(3, String(value).split("\n").length))}
            value={value}
            spellcheck={false}
            aria-describedby={msgId}
            aria-invalid={error || jerr ? "true" : undefined}
            onInput={(e) => onChange((e.target as HTMLTextAreaElement).value)}
          />
        </Field>
      );
    }
    case "editor":
      return (
        <div class={`field ${error ? "has-error" : ""}`}>
          <label id={`${id}-label`} for={id}>
            {label}
            {req && <span class="req" aria-hidden="true"> *</span>}
          </label>
          <RichText id={id} labelId={`${id}-label`} value={value} onChange={onChange} describedBy={described} invalid={!!error} />
          <FieldMsg id={msgId} error={error} hint={hint} />
        </div>
      );
    case "file":
      return (
        <div class={`field ${error ? "has-error" : ""}`}>
          <label for={id}>
            {label}
            {req && <span class="req" aria-hidden="true"> *</span>}
          </label>
          <FileInput
            id={id}
            field={f}
            record={props.record}
            initial={(props.initial as FileValue).kept}
            value={value}
            token={props.token}
            onChange={onChange}
            describedBy={described}
          />
          <FieldMsg id={msgId} error={error} hint={hint} />
        </div>
      );
    case "relation": {
      const target = props.collections.find((x) => x.id === f.collectionId || x.name === f.collectionId);
      return (
        <div class={`field ${error ? "has-error" : ""}`}>
          <label for={id}>
            {label}
            {req && <span class="req" aria-hidden="true"> *</span>}
            {target && <span class="rec-muted"> → {target.name}</span>}
          </label>
          <RelationPicker
            id={id}
            field={f}
            target={target}
            value={value}
            known={knownFromExpand(props.record, f.name)}
            onChange={onChange}
            describedBy={described}
            invalid={!!error}
          />
          <FieldMsg id={msgId} error={error} hint={hint} />
        </div>
      );
    }
    case "geoPoint":
      return (
        <fieldset class={`field rec-plain ${error ? "has-error" : ""}`}>
          <legend>{label}</legend>
          <div class="rec-inline">
            <TextField
              label="Longitude"
              type="number"
              value={value.lon}
              onChange={(v) => onChange({ ...value, lon: v })}
              inputProps={{ step: "any", min: -180, max: 180 } as any}
            />
            <TextField
              label="Latitude"
              type="number"
              value={value.lat}
              onChange={(v) => onChange({ ...value, lat: v })}
              inputProps={{ step: "any", min: -90, max: 90 } as any}
            />
          </div>
          <FieldMsg id={msgId} error={error} hint={hint} />
        </fieldset>
      );
    default: {
      // text (and unknown types, edited as text)
      if (long || (f.max ?? 0) > 500) {
        return (
          <Field id={id} label={label} required={req} error={error} hint={hint}>
            <textarea
              id={id}
              class="input"
              rows={Math.min(12, Math.max(3, Math.ceil(String(value).length / 60)))}
              value={value}
              aria-describedby={described}
              aria-invalid={error ? "true" : undefined}
              onInput={(e) => onChange((e.target as HTMLTextAreaElement).value)}
            />
          </Field>
        );
      }
      return (
        <TextField
          id={id}
          label={label}
          required={req}
          value={value}
          onChange={onChange}
          error={error}
          hint={hint ?? (f.autogeneratePattern ? "Leave empty to generate" : undefined)}
          autocomplete="off"
        />
      );
    }
  }
}

function FieldMsg(p: { id: string; error?: string; hint?: string }) {
  if (p.error)
    return (
      <div class="field-error" id={p.id} role="alert" data-testid="field-error">
        {p.error}
      </div>
    );
  if (p.hint)
    return (
      <div class="hint" id={p.id}>
        {p.hint}
      </div>
    );
  return null;
}

function rangeHint(f: CollectionField): string | undefined {
  const lo = f.min ?? null, hi = f.max ?? null;
  if (lo !== null && hi !== null && (lo !== 0 || hi !== 0)) return `From ${lo} to ${hi}`;
  if (lo !== null && lo !== 0) return `At least ${lo}`;
  if (hi !== null && hi !== 0) return `At most ${hi}`;
  return undefined;
}

