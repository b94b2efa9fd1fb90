// A searchable picker for relation fields: chips of the chosen records, a search box that lists
// matching records of the target collection (getList with a filter over its text fields).
import type { CollectionField, CollectionModel, RecordModel } from "pocketbase";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { pb } from "../pb";
import { errorMessage } from "../ui";
import { asArray, isMulti, presentableFields, recordLabel, searchableFields, truncate } from "./util";

export function RelationPicker(props: {
  id: string;
  field: CollectionField;
  target: CollectionModel | undefined;
  value: string[];
  known: RecordModel[];
  onChange: (ids: string[]) => void;
  describedBy?: string;
  invalid?: boolean;
}) {
  const { field, target } = props;
  const multi = isMulti(field);
  const max = field.maxSelect || 1;
  const names = useMemo(() => presentableFields(target), [target]);
  const [known, setKnown] = useState<Record<string, RecordModel>>(() => {
    const m: Record<string, RecordModel> = {};
    for (const r of props.known) if (r?.id) m[r.id] = r;
    return m;
  });
  const [q, setQ] = useState("");
  const [open, setOpen] = useState(false);
  const [results, setResults] = useState<RecordModel[]>([]);
  const [loading, setLoading] = useState(false);
  const [err, setErr] = useState("");
  const seq = useRef(0);
  const listId = `${props.id}-results`;

  useEffect(() => {
    if (!open || !target) return;
    const n = ++seq.current;
    const t = setTimeout(async () => {
      setLoading(true);
      setErr("");
      try {
        let filter = "";
        const term = q.trim();
        if (term) {
          const parts = ["id ~ {:q}", ...searchableFields(target).map((f) => `${f.name} ~ {:q}`)];
          filter = pb.filter(parts.join(" || "), { q: term });
        }
        const list = await pb.collection(target.id).getList(1, 10, { filter, requestKey: null });
        if (n !== seq.current) return;
        setResults(list.items);
        setKnown((k) => {
          const m = { ...k };
          for (const r of list.items) m[r.id] = r;
          return m;
        });
      } catch (e) {
        if (n === seq.current) setErr(errorMessage(e));
      } finally {
        if (n === seq.current) setLoading(false);
      }
    }, 200);
    return () => clearTimeout(t);
  }, [q, open, target?.id]);

  // Chosen ids whose records were not expanded (a rule hid them, or the value came from
  // elsewhere): look their labels up once.
  useEffect(() => {
    if (!target) return;
    const missing = props.value.filter((id) => !known[id]).slice(0, 50);
    if (!missing.length) return;
    const filter = missing.map((id) => pb.filter("id = {:id}", { id })).join(" || ");
    pb.collection(target.id)
      .getFullList({ filter, requestKey: null })
      .then((list) =>
        setKnown((k) => {
          const m = { ...k };
          for (const r of list) m[r.id] = r;
          return m;
        }),
      )
      .catch(() => {});
  }, [target?.id]);

  const pick = (r: RecordModel) => {
    if (props.value.includes(r.id)) {
      props.onChange(props.value.filter((x) => x !== r.id));
      return;
    }
    if (!multi) {
      props.onChange([r.id]);
      setQ("");
      setOpen(false);
      return;
    }
    if (props.value.length >= max) return;
    props.onChange([...props.value, r.id]);
  };

  const label = (id: string) => (known[id] ? recordLabel(known[id], names) : id);

  return (
    <div class={`rec-rel ${props.invalid ? "rec-invalid" : ""}`}>
      {props.value.length > 0 && (
        <ul class="rec-chips rec-chips-edit" aria-label="Selected records">
          {props.value.map((id) => (
            <li class="rec-chip rec-chip-rel" key={id}>
              <span title={id}>{truncate(label(id), 48)}</span>
              <button
                type="button"
                class="rec-chip-x"
                aria-label={`Remove ${label(id)}`}
                onClick={() => props.onChange(props.value.filter((x) => x !== id))}
              >
                ×
              </button>
            </li>
          ))}
        </ul>
      )}
      <input
        id={props.id}
        class="input"
        type="search"
        role="combobox"
        aria-expanded={open}
        aria-controls={listId}
        aria-autocomplete="list"
        aria-describedby={props.describedBy}
        aria-invalid={props.invalid ? "true" : undefined}
        placeholder={target ? `Search ${target.name}…` : "Loading…"}
        value={q}
        onFocus={() => setOpen(true)}
        onInput={(e) => {
          setQ((e.target as HTMLInputElement).value);
          setOpen(true);
        }}
        onKeyDown={(e) => {
          if (e.key === "Escape" && open) {
            e.stopPropagation();
            setOpen(false);
          }
        }}
      />
      {open && (
        <div class="rec-rel-pop" id={listId}>
          {loading && <div class="rec-muted">Searching…</div>}
          {err && (
            <div class="field-error" role="alert">
              {err}
            </div>
          )}
          {!loading && !err && results.length === 0 && <div class="rec-muted">No records found.</div>}
          <ul class="rec-rel-list">
            {results.map((r) => {
              const on = props.value.includes(r.id);
              const full = !on && multi && props.value.length >= max;
              return (
                <li key={r.id}>
                  <button
                    type="button"
                    class={`rec-rel-opt ${on ? "on" : ""}`}
                    aria-pressed={on}
                    disabled={full}
                    onClick={() => pick(r)}
                  >
                    <span class="rec-rel-check" aria-hidden="true">
                      {on ? "✓" : ""}
                    </span>
                    <span>{truncate(recordLabel(r, names), 60)}</span>
                    <span class="rec-muted rec-mono">{r.id}</span>
                  </button>
                </li>
              );
            })}
          </ul>
          <div class="rec-rel-foot">
            <span class="rec-muted">
              {multi ? `${props.value.length} of max ${max} selected` : "Pick one"}
            </span>
            <button type="button" class="btn btn-ghost btn-sm" onClick={() => setOpen(false)}>
              Done
            </button>
          </div>
        </div>
      )}
    </div>
  );
}

export function knownFromExpand(record: RecordModel | null, name: string): RecordModel[] {
  return asArray<RecordModel>(record?.expand?.[name]);
}
