// How one value of a record is shown in the table (always as text nodes, never as HTML).
import type { CollectionField, CollectionModel, RecordModel } from "pocketbase";
import { pb } from "../pb";
import {
  asArray,
  formatLocal,
  htmlToText,
  isImageName,
  parsePbDate,
  recordLabel,
  safeHttpUrl,
  truncate,
  userTimeZone,
} from "./util";

export type CellContext = {
  /** presentable field names per related collection id */
  presentable: Record<string, string[]>;
  /** file token for protected files ("" when none is needed or available) */
  fileToken: string;
};

export function fileUrl(
  record: RecordModel,
  name: string,
  field: CollectionField,
  token: string,
  thumb?: string,
): string {
  const opts: Record<string, string> = {};
  if (thumb) opts.thumb = thumb;
  if (field.protected && token) opts.token = token;
  return pb.files.getURL(record, name, opts);
}

export function Cell(props: { record: RecordModel; field: CollectionField; ctx: CellContext }) {
  const { record, field, ctx } = props;
  const v = record[field.name];
  const empty = <span class="rec-empty">—</span>;
  switch (field.type) {
    case "bool":
      return v ? (
        <span class="rec-badge rec-badge-on">True</span>
      ) : (
        <span class="rec-badge rec-badge-off">False</span>
      );
    case "number":
      return v === null || v === undefined ? empty : <span class="rec-num">{String(v)}</span>;
    case "date":
    case "autodate": {
      if (!v) return empty;
      const d = parsePbDate(v);
      return (
        <time class="rec-date" dateTime={d ? d.toISOString() : undefined} title={`${v} UTC`}>
          {formatLocal(v)}
        </time>
      );
    }
    case "select": {
      const vals = asArray<string>(v);
      if (!vals.length) return empty;
      return (
        <span class="rec-chips">
          {vals.map((x) => (
            <span class="rec-chip" key={x}>
              {truncate(String(x), 40)}
            </span>
          ))}
        </span>
      );
    }
    case "relation": {
      const ids = asArray<string>(v);
      if (!ids.length) return empty;
      const ex = record.expand?.[field.name];
      const expanded = asArray<RecordModel>(ex);
      const names = ctx.presentable[field.collectionId] || [];
      return (
        <span class="rec-chips">
          {ids.slice(0, 5).map((id) => {
            const r = expanded.find((x) => x?.id === id);
            const label = r ? recordLabel(r, names) : id;
            return (
              <span class="rec-chip rec-chip-rel" key={id} title={id}>
                {truncate(label, 40)}
              </span>
            );
          })}
          {ids.length > 5 && <span class="rec-more">+{ids.length - 5}</span>}
        </span>
      );
    }
    case "file": {
      const names = asArray<string>(v);
      if (!names.length) return empty;
      return (
        <span class="rec-files">
          {names.slice(0, 4).map((n) =>
            isImageName(n) ? (
              <img
                key={n}
                class="rec-thumb"
                src={fileUrl(record, n, field, ctx.fileToken, "100x100")}
                alt={n}
                title={n}
                loading="lazy"
                width={32}
                height={32}
              />
            ) : (
              <span key={n} class="rec-chip rec-file-chip" title={n}>
                {truncate(n, 24)}
              </span>
            ),
          )}
          {names.length > 4 && <span class="rec-more">+{names.length - 4}</span>}
        </span>
      );
    }
    case "json": {
      if (v === null || v === undefined || v === "") return empty;
      const s = JSON.stringify(v);
      return (
        <code class="rec-json" title={truncate(s, 500)}>
          {truncate(s, 60)}
        </code>
      );
    }
    case "editor": {
      const t = htmlToText(String(v ?? ""));
      return t ? <span title={truncate(t, 300)}>{truncate(t, 80)}</span> : empty;
    }
    case "url": {
      if (!v) return empty;
      const href = safeHttpUrl(v);
      const text = truncate(String(v), 60);
      return href ? (
        <a href={href} target="_blank" rel="noopener noreferrer" onClick={(e) => e.stopPropagation()}>
          {text}
        </a>
      ) : (
        <span>{text}</span>
      );
    }
    case "geoPoint": {
      if (!v || typeof v !== "object") return empty;
      return (
        <span class="rec-num">
          {String(v.lon ?? 0)}, {String(v.lat ?? 0)}
        </span>
      );
    }
    case "password":
      return <span class="rec-empty">••••••</span>;
    default: {
      if (v === null || v === undefined || v === "") return empty;
      const s = typeof v === "object" ? JSON.stringify(v) : String(v);
      return <span title={s.length > 80 ? truncate(s, 500) : undefined}>{truncate(s, 80)}</span>;
    }
  }
}

export const tzNote = `Times in ${userTimeZone}; hover for UTC.`;

export function collectionHasProtectedFiles(c: CollectionModel): boolean {
  return (c.fields || []).some((f) => f.type === "file" && f.protected);
}
