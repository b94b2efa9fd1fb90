import { ComponentChildren, JSX } from "preact";
import { useState } from "preact/hooks";

let idSeq = 0;
/** A stable unique id for label/input pairs. */
export function useId(prefix = "f"): string {
  const [id] = useState(() => `${prefix}-${++idSeq}`);
  return id;
}

/** Label + control + hint + inline error. The child control must use `id` (and may use aria-describedby=`${id}-msg`). */
export function Field(props: { id: string; label: ComponentChildren; error?: string; hint?: ComponentChildren; children: ComponentChildren; class?: string; required?: boolean }) {
  return (
    <div class={`field ${props.error ? "has-error" : ""} ${props.class ?? ""}`}>
      <label for={props.id}>{props.label}{props.required && <span class="req" aria-hidden="true"> *</span>}</label>
      {props.children}
      {props.hint && !props.error && <div class="hint" id={`${props.id}-msg`}>{props.hint}</div>}
      {props.error && <div class="field-error" id={`${props.id}-msg`} role="alert" data-testid="field-error">{props.error}</div>}
    </div>
  );
}

type Common = { label: ComponentChildren; error?: string; hint?: ComponentChildren; class?: string; required?: boolean; id?: string; name?: string };
const described = (id: string, p: Common) => (p.error || p.hint ? `${id}-msg` : undefined);

export function TextField(p: Common & { value: string | null | undefined; onChange: (v: string) => void; type?: string; placeholder?: string; autocomplete?: string; autofocus?: boolean; disabled?: boolean; mono?: boolean; inputProps?: JSX.HTMLAttributes<HTMLInputElement> }) {
  const gen = useId();
  const id = p.id ?? gen;
  return (
    <Field id={id} label={p.label} error={p.error} hint={p.hint} class={p.class} required={p.required}>
      <input id={id} name={p.name} class={`input ${p.mono ? "mono" : ""}`} type={p.type ?? "text"} value={p.value ?? ""} placeholder={p.placeholder}
        autocomplete={p.autocomplete} autofocus={p.autofocus} disabled={p.disabled} required={p.required}
        aria-invalid={p.error ? "true" : undefined} aria-describedby={described(id, p)}
        onInput={(e) => p.onChange((e.target as HTMLInputElement).value)} {...p.inputProps} />
    </Field>
  );
}

export function TextAreaField(p: Common & { value: string | null | undefined; onChange: (v: string) => void; rows?: number; placeholder?: string; mono?: boolean; disabled?: boolean }) {
  const gen = useId();
  const id = p.id ?? gen;
  return (
    <Field id={id} label={p.label} error={p.error} hint={p.hint} class={p.class} required={p.required}>
      <textarea id={id} name={p.name} class={`input ${p.mono ? "mono" : ""}`} rows={p.rows ?? 3} value={p.value ?? ""} placeholder={p.placeholder} disabled={p.disabled}
        aria-invalid={p.error ? "true" : undefined} aria-describedby={described(id, p)}
        onInput={(e) => p.onChange((e.target as HTMLTextAreaElement).value)} />
    </Field>
  );
}

/** Number input; empty string maps to null. */
export function NumberField(p: Common & { value: number | null | undefined; onChange: (v: number | null) => void; min?: number; max?: number; step?: number | "any"; placeholder?: string }) {
  const gen = useId();
  const id = p.id ?? gen;
  return (
    <Field id={id} label={p.label} error={p.error} hint={p.hint} class={p.class} required={p.required}>
      <input id={id} name={p.name} class="input" type="number" value={p.value ?? ""} min={p.min} max={p.max} step={p.step ?? "any"} placeholder={p.placeholder}
        aria-invalid={p.error ? "true" : undefined} aria-describedby={described(id, p)}
        onInput={(e) => {
          const v = (e.target as HTMLInputElement).value;
          p.onChange(v === "" ? null : Number(v));
        }} />
    </Field>
  );
}

export function SelectField(p: Common & { value: string; onChange: (v: string) => void; options: Array<string | { value: string; label: string }>; disabled?: boolean }) {
  const gen = useId();
  const id = p.id ?? gen;
  return (
    <Field id={id} label={p.label} error={p.error} hint={p.hint} class={p.class} required={p.required}>
      <select id={id} name={p.name} class="input" value={p.value} disabled={p.disabled} aria-invalid={p.error ? "true" : undefined} aria-describedby={described(id, p)}
        onChange={(e) => p.onChange((e.target as HTMLSelectElement).value)}>
        {p.options.map((o) => typeof o === "string" ? <option value={o}>{o}</option> : <option value={o.value}>{o.label}</option>)}
      </select>
    </Field>
  );
}

/** Checkbox or switch with the label to its right. */
export function CheckboxField(p: { label: ComponentChildren; checked: boolean; onChange: (v: boolean) => void; error?: string; hint?: ComponentChildren; id?: string; name?: string; switch?: boolean; disabled?: boolean; class?: string }) {
  const gen = useId();
  const id = p.id ?? gen;
  return (
    <div class={`field field-check ${p.switch ? "switch" : ""} ${p.error ? "has-error" : ""} ${p.class ?? ""}`}>
      <input id={id} name={p.name} type="checkbox" role={p.switch ? "switch" : undefined} checked={p.checked} disabled={p.disabled}
        aria-describedby={p.error || p.hint ? `${id}-msg` : undefined} onChange={(e) => p.onChange((e.target as HTMLInputElement).checked)} />
      <label for={id}>{p.label}</label>
      {p.hint && !p.error && <div class="hint" id={`${id}-msg`}>{p.hint}</div>}
      {p.error && <div class="field-error" id={`${id}-msg`} role="alert" data-testid="field-error">{p.error}</div>}
    </div>
  );
}

/** Comma separated list <-> string[]. */
export function ListField(p: Common & { value: string[] | null | undefined; onChange: (v: string[]) => void; placeholder?: string }) {
  const [text, setText] = useState((p.value ?? []).join(", "));
  return (
    <TextField {...p} value={text} hint={p.hint ?? "Comma separated"}
      onChange={(v) => {
        setText(v);
        p.onChange(v.split(",").map((s) => s.trim()).filter(Boolean));
      }} />
  );
}
