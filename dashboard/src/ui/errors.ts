// Map a PocketBase ClientResponseError to a general message and per-field messages.
import { ClientResponseError } from "pocketbase";

/** Flattens `response.data` ({field: {code, message}}, nested like fields.0.name) to {"fields.0.name": "message"}. */
export function fieldErrors(err: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  const data = (err as ClientResponseError)?.response?.data;
  const walk = (v: any, path: string) => {
    if (!v || typeof v !== "object") return;
    if (typeof v.message === "string" && typeof v.code === "string") {
      out[path] = v.message;
      return;
    }
    for (const k of Object.keys(v)) walk(v[k], path ? `${path}.${k}` : k);
  };
  walk(data, "");
  return out;
}

/** A human message for any error (the server's message when there is one). */
export function errorMessage(err: unknown): string {
  if (err instanceof ClientResponseError || (err as any)?.response) {
    const e = err as ClientResponseError;
    if (e.status === 0) return "Can't reach the server. Check that it is running.";
    const m = e.response?.message || e.message;
    return m || `Request failed (${e.status}).`;
  }
  if (err instanceof Error) return err.message;
  return String(err);
}

/** Errors whose key starts with `prefix.` re-keyed without it (for nested forms). */
export function scopedErrors(errs: Record<string, string>, prefix: string): Record<string, string> {
  const out: Record<string, string> = {};
  const p = prefix + ".";
  for (const k of Object.keys(errs)) if (k.startsWith(p)) out[k.slice(p.length)] = errs[k];
  return out;
}
