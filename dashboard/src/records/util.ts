// Small helpers of the records screens: dates, presentable values, safe text.
import type { CollectionField, CollectionModel, RecordModel } from "pocketbase";

const pad = (n: number, w = 2) => String(n).padStart(w, "0");

/** Parses PocketBase's `YYYY-MM-DD HH:MM:SS.sssZ` (or any ISO form) into a Date. */
export function parsePbDate(s: string | undefined | null): Date | null {
  if (!s) return null;
  const d = new Date(String(s).replace(" ", "T"));
  return isNaN(d.getTime()) ? null : d;
}

/** A PocketBase date string in UTC: `YYYY-MM-DD HH:MM:SS.sssZ`. */
export function toPbDate(d: Date): string {
  return d.toISOString().replace("T", " ");
}

/** The value of an `<input type="datetime-local" step="1">` for a PocketBase date, in local time. */
export function toLocalInput(s: string | undefined | null): string {
  const d = parsePbDate(s);
  if (!d) return "";
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}` +
    `T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

/** A datetime-local value (local time) as PocketBase's UTC date string; "" stays "". */
export function fromLocalInput(v: string): string {
  if (!v) return "";
  const d = new Date(v);
  return isNaN(d.getTime()) ? "" : toPbDate(d);
}

const localFmt = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "short",
  day: "2-digit",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
});

/** A date in the user's time zone, for display. */
export function formatLocal(s: string): string {
  const d = parsePbDate(s);
  return d ? localFmt.format(d) : String(s);
}

export const userTimeZone = (() => {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  } catch {
    return "local time";
  }
})();

/** The fields that name a record of a collection: its presentable ones, else a likely one. */
export function presentableFields(c: CollectionModel | undefined): string[] {
  if (!c) return [];
  const fields = c.fields || [];
  const marked = fields.filter((f) => f.presentable && !f.hidden).map((f) => f.name);
  if (marked.length) return marked;
  const has = (n: string) => fields.some((f) => f.name === n && !f.hidden);
  const first = ["name", "title", "label", "username", "slug"].find(has);
  // Auth records: the email too (a user's name is often empty).
  const out = first ? [first] : [];
  if (c.type === "auth" && has("email")) out.push("email");
  return out;
}

/** A short text naming a record (its presentable fields, else its id). */
export function recordLabel(r: RecordModel | undefined, names: string[]): string {
  if (!r) return "";
  const parts = names
    .map((n) => r[n])
    .filter((v) => v !== undefined && v !== null && v !== "" && !(Array.isArray(v) && !v.length))
    .map((v) => (typeof v === "object" ? JSON.stringify(v) : String(v)));
  return parts.length ? parts.join(" · ") : r.id;
}

/** The text fields of a collection a search box filters on. */
export function searchableFields(c: CollectionModel | undefined): CollectionField[] {
  return (c?.fields || []).filter(
    (f) => !f.hidden && ["text", "email", "url", "editor"].includes(f.type),
  );
}

export function isImageName(name: string): boolean {
  return /\.(png|jpe?g|gif|webp|bmp|avif|svg)$/i.test(name);
}

/** Only http(s) URLs become links; anything else (javascript:, data:...) stays text. */
export function safeHttpUrl(v: unknown): string | null {
  if (typeof v !== "string") return null;
  try {
    const u = new URL(v);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : null;
  } catch {
    return null;
  }
}

export function truncate(s: string, n: number): string {
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

/** Plain text of an HTML string (parsed inertly; nothing runs, nothing loads). */
export function htmlToText(html: string): string {
  if (!html) return "";
  const doc = new DOMParser().parseFromString(String(html), "text/html");
  return (doc.body.textContent || "").replace(/\s+/g, " ").trim();
}

export function asArray<T = string>(v: unknown): T[] {
  if (Array.isArray(v)) return v as T[];
  if (v === undefined || v === null || v === "") return [];
  return [v as T];
}

/** The multi-value fields: select/relation/file with maxSelect > 1. */
export function isMulti(f: CollectionField): boolean {
  return (f.maxSelect ?? 1) > 1;
}
