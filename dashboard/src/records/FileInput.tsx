// File fields in the record form: the stored files (thumbnail, open, remove / restore) and new
// uploads (preview, remove), within the field's maxSelect.
import type { CollectionField, RecordModel } from "pocketbase";
import { useEffect, useMemo } from "preact/hooks";
import { fileUrl } from "./cells";
import { isImageName, isMulti, truncate } from "./util";

export type FileValue = { kept: string[]; added: File[] };

export function FileInput(props: {
  id: string;
  field: CollectionField;
  record: RecordModel | null;
  initial: string[];
  value: FileValue;
  token: string;
  onChange: (v: FileValue) => void;
  describedBy?: string;
}) {
  const { field, value, record } = props;
  const multi = isMulti(field);
  const max = field.maxSelect || 1;
  const removed = props.initial.filter((n) => !value.kept.includes(n));
  const count = value.kept.length + value.added.length;
  const full = multi && count >= max;

  const previews = useMemo(
    () => value.added.map((f) => (f.type.startsWith("image/") ? URL.createObjectURL(f) : "")),
    [value.added],
  );
  useEffect(() => () => previews.forEach((u) => u && URL.revokeObjectURL(u)), [previews]);

  const addFiles = (list: FileList | null) => {
    if (!list || !list.length) return;
    const files = Array.from(list);
    if (!multi) {
      props.onChange({ kept: [], added: [files[0]] });
      return;
    }
    const room = Math.max(0, max - count);
    props.onChange({ kept: value.kept, added: [...value.added, ...files.slice(0, room)] });
  };

  return (
    <div class="rec-fileinput">
      <ul class="rec-filelist" aria-label="Files">
        {value.kept.map((n) => (
          <li key={"k" + n} class="rec-fileitem">
            {record && isImageName(n) ? (
              <img class="rec-thumb" src={fileUrl(record, n, field, props.token, "100x100")} alt="" width={40} height={40} />
            ) : (
              <span class="rec-fileicon" aria-hidden="true">
                ▤
              </span>
            )}
            {record ? (
              <a href={fileUrl(record, n, field, props.token)} target="_blank" rel="noopener noreferrer" title={n}>
                {truncate(n, 40)}
              </a>
            ) : (
              <span>{truncate(n, 40)}</span>
            )}
            <button
              type="button"
              class="btn btn-ghost btn-sm"
              aria-label={`Remove file ${n}`}
              onClick={() => props.onChange({ kept: value.kept.filter((x) => x !== n), added: value.added })}
            >
              Remove
            </button>
          </li>
        ))}
        {removed.map((n) => (
          <li key={"r" + n} class="rec-fileitem rec-removed">
            <span class="rec-fileicon" aria-hidden="true">
              ▤
            </span>
            <s title={n}>{truncate(n, 40)}</s>
            <span class="rec-muted">will be deleted</span>
            <button
              type="button"
              class="btn btn-ghost btn-sm"
              aria-label={`Restore file ${n}`}
              onClick={() =>
                props.onChange({
                  kept: [...value.kept, n],
                  added: multi ? value.added.slice(0, Math.max(0, max - value.kept.length - 1)) : [],
                })
              }
            >
              Restore
            </button>
          </li>
        ))}
        {value.added.map((f, i) => (
          <li key={"a" + i + f.name} class="rec-fileitem rec-added">
            {previews[i] ? (
              <img class="rec-thumb" src={previews[i]} alt="" width={40} height={40} />
            ) : (
              <span class="rec-fileicon" aria-hidden="true">
                ▤
              </span>
            )}
            <span title={f.name}>{truncate(f.name, 40)}</span>
            <span class="rec-muted">new · {Math.max(1, Math.round(f.size / 1024))} KB</span>
            <button
              type="button"
              class="btn btn-ghost btn-sm"
              aria-label={`Remove new file ${f.name}`}
              onClick={() => props.onChange({ kept: value.kept, added: value.added.filter((_, j) => j !== i) })}
            >
              Remove
            </button>
          </li>
        ))}
      </ul>
      <div class="rec-upload">
        <label class={`btn btn-ghost btn-sm rec-upload-btn ${full ? "rec-disabled" : ""}`}>
          <svg width="14" height="14" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" aria-hidden="true"><path d="M12 16V4m0 0l-5 5m5-5l5 5M4 20h16" /></svg>{" "}{multi ? "Upload files" : value.kept.length || value.added.length ? "Replace file" : "Upload file"}
          <input
            id={props.id}
            type="file"
            class="rec-file-native"
            multiple={multi}
            disabled={full}
            accept={(field.mimeTypes || []).join(",") || undefined}
            aria-describedby={props.describedBy}
            onChange={(e) => {
              const el = e.target as HTMLInputElement;
              addFiles(el.files);
              el.value = "";
            }}
          />
        </label>
        <span class="rec-muted">
          {multi ? `${count} of max ${max} files` : "One file"}
          {field.maxSize ? ` · up to ${Math.round(field.maxSize / 1024 / 1024 * 10) / 10} MB each` : ""}
        </span>
      </div>
    </div>
  );
}
