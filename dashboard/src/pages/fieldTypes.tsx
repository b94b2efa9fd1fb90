// The options editor of each PocketBase field type.
import { TextField, NumberField, CheckboxField, ListField, SelectField } from "../ui";
import { useCollections } from "../collectionsStore";

export type AnyField = Record<string, any> & { name: string; type: string };

export const FIELD_TYPES: Array<{ type: string; label: string }> = [
  { type: "text", label: "Plain text" },
  { type: "editor", label: "Rich editor" },
  { type: "number", label: "Number" },
  { type: "bool", label: "Bool" },
  { type: "email", label: "Email" },
  { type: "url", label: "URL" },
  { type: "date", label: "DateTime" },
  { type: "autodate", label: "Autodate" },
  { type: "select", label: "Select" },
  { type: "file", label: "File" },
  { type: "relation", label: "Relation" },
  { type: "json", label: "JSON" },
  { type: "geoPoint", label: "Geo point" },
  { type: "password", label: "Password" },
];

export function newField(type: string, existing: AnyField[]): AnyField {
  let n = 1;
  let name = "field";
  while (existing.some((f) => f.name === name)) name = `field${++n}`;
  const f: AnyField = { name, type, required: false, hidden: false, presentable: false, system: false };
  if (type === "select") Object.assign(f, { values: [], maxSelect: 1 });
  if (type === "file") Object.assign(f, { maxSelect: 1, maxSize: 0, mimeTypes: [], thumbs: [], protected: false });
  if (type === "relation") Object.assign(f, { collectionId: "", cascadeDelete: false, minSelect: 0, maxSelect: 1 });
  if (type === "autodate") Object.assign(f, { onCreate: true, onUpdate: false });
  if (type === "number") Object.assign(f, { onlyInt: false });
  return f;
}

/** Type-specific options; `err(key)` returns the server's message for that option. */
export function FieldOptions(p: { f: AnyField; set: (patch: Partial<AnyField>) => void; err: (k: string) => string | undefined }) {
  const { f, set, err } = p;
  const { collections } = useCollections();
  // number's min/max are null when unset; other numeric options are 0
  const num = (k: string, label: string, hint?: string, nullable = false) => (
    <NumberField label={label} value={f[k]} onChange={(v) => set({ [k]: v ?? (nullable ? null : 0) })} error={err(k)} hint={hint} />
  );
  const txt = (k: string, label: string, hint?: string, mono = true) => <TextField label={label} value={f[k] ?? ""} onChange={(v) => set({ [k]: v })} error={err(k)} hint={hint} mono={mono} />;
  const list = (k: string, label: string, hint?: string) => <ListField label={label} value={f[k]} onChange={(v) => set({ [k]: v })} error={err(k)} hint={hint} />;
  const chk = (k: string, label: string, hint?: string) => <CheckboxField label={label} checked={!!f[k]} onChange={(v) => set({ [k]: v })} error={err(k)} hint={hint} />;
  switch (f.type) {
    case "text":
      return <>
        <div class="grid-2">{num("min", "Min length")}{num("max", "Max length", "0 means the default limit")}</div>
        <div class="grid-2">{txt("pattern", "Regex pattern", "e.g. ^[a-z0-9-]+$")}{txt("autogeneratePattern", "Autogenerate pattern", "e.g. [a-z0-9]{15}")}</div>
      </>;
    case "password":
      return <>
        <div class="grid-3">{num("min", "Min length")}{num("max", "Max length")}{num("cost", "Bcrypt cost")}</div>
        {txt("pattern", "Regex pattern")}
      </>;
    case "editor":
      return <div class="grid-2">{num("maxSize", "Max size (bytes)")}<div style="padding-top:26px">{chk("convertURLs", "Convert URLs to relative")}</div></div>;
    case "number":
      return <>
        <div class="grid-2">{num("min", "Min", "Empty = no minimum", true)}{num("max", "Max", "Empty = no maximum", true)}</div>
        {chk("onlyInt", "Integers only (no decimals)")}
      </>;
    case "email":
    case "url":
      return <div class="grid-2">{list("onlyDomains", "Only domains")}{list("exceptDomains", "Except domains")}</div>;
    case "date":
      return <div class="grid-2">{txt("min", "Min date", "e.g. 2024-01-01 00:00:00.000Z")}{txt("max", "Max date")}</div>;
    case "autodate":
      return <div class="row" style="gap:24px">{chk("onCreate", "Set on create")}{chk("onUpdate", "Set on update")}</div>;
    case "select":
      return <div class="grid-2">{list("values", "Choices")}{num("maxSelect", "Max select", "1 = single value, more = multiple")}</div>;
    case "file":
      return <>
        <div class="grid-2">{num("maxSelect", "Max files")}{num("maxSize", "Max size per file (bytes)")}</div>
        <div class="grid-2">{list("mimeTypes", "Allowed MIME types", "e.g. image/png, image/jpeg (empty = any)")}{list("thumbs", "Thumb sizes", "e.g. 100x100, 0x300")}</div>
        {chk("protected", "Protected (files need a file token to download)")}
      </>;
    case "relation":
      return <>
        <div class="grid-2">
          <SelectField label="Related collection" value={f.collectionId ?? ""} onChange={(v) => set({ collectionId: v })} error={err("collectionId")}
            options={[{ value: "", label: "Select a collection…" }, ...collections.filter((c) => c.type !== "view" || true).map((c) => ({ value: c.id, label: c.name }))]} />
          <div class="grid-2">{num("minSelect", "Min select")}{num("maxSelect", "Max select")}</div>
        </div>
        {chk("cascadeDelete", "Cascade delete (delete this record when the related one is deleted)")}
      </>;
    case "json":
      return num("maxSize", "Max size (bytes)", "0 means the default limit");
    default:
      return <p class="muted small">No extra options for this type.</p>;
  }
}
