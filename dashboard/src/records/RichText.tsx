// A small rich-text control for `editor` fields: contenteditable with bold / italic / link /
// lists. Whatever enters it (typing, paste, the record's stored value) goes through the
// allow-list sanitizer; content is set as DOM nodes, never as an HTML string.
import { useEffect, useRef, useState } from "preact/hooks";
import { needsCleaning, safeHref, sanitizedNodes, sanitizeHtml } from "./sanitize";

export function RichText(props: {
  id: string;
  labelId: string;
  value: string;
  onChange: (html: string) => void;
  describedBy?: string;
  invalid?: boolean;
}) {
  const ref = useRef<HTMLDivElement>(null);

  useEffect(() => {
    ref.current?.replaceChildren(...sanitizedNodes(props.value || ""));
    // The initial value only: afterwards the element is the source of truth.
  }, []);

  const emit = () => {
    const el = ref.current;
    if (!el) return;
    if (needsCleaning(el)) {
      el.replaceChildren(...sanitizedNodes(el.innerHTML));
      placeCaretAtEnd(el);
    }
    const html = sanitizeHtml(el.innerHTML);
    props.onChange(el.textContent?.trim() || el.querySelector("hr,li") ? html : "");
  };

  const exec = (cmd: string, arg?: string) => {
    ref.current?.focus();
    document.execCommand(cmd, false, arg);
    emit();
  };

  const onPaste = (e: ClipboardEvent) => {
    e.preventDefault();
    const html = e.clipboardData?.getData("text/html");
    const text = e.clipboardData?.getData("text/plain") ?? "";
    const sel = window.getSelection();
    if (html && sel && sel.rangeCount) {
      const range = sel.getRangeAt(0);
      range.deleteContents();
      const frag = document.createDocumentFragment();
      for (const n of sanitizedNodes(html)) frag.appendChild(n);
      const last = frag.lastChild;
      range.insertNode(frag);
      if (last) {
        range.setStartAfter(last);
        range.collapse(true);
        sel.removeAllRanges();
        sel.addRange(range);
      }
    } else {
      document.execCommand("insertText", false, text);
    }
    emit();
  };

  // The link form: the selection is kept while the address is typed, then restored.
  const saved = useRef<Range | null>(null);
  const [linking, setLinking] = useState(false);
  const [href, setHref] = useState("https://");
  const [linkErr, setLinkErr] = useState("");
  const link = () => {
    const sel = window.getSelection();
    saved.current = sel && sel.rangeCount && ref.current?.contains(sel.anchorNode) ? sel.getRangeAt(0).cloneRange() : null;
    setHref("https://");
    setLinkErr("");
    setLinking(true);
  };
  const applyLink = () => {
    const safe = safeHref(href);
    if (!safe) {
      setLinkErr("Only http, https and mailto links are allowed.");
      return;
    }
    const el = ref.current;
    if (!el) return;
    el.focus();
    const sel = window.getSelection();
    if (sel && saved.current) {
      sel.removeAllRanges();
      sel.addRange(saved.current);
    }
    if (!sel || sel.isCollapsed) {
      // No text selected: the address itself becomes the link text (escaped; emit() re-cleans).
      const esc = safe.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
      document.execCommand("insertHTML", false, `<a href="${esc}">${esc}</a>`);
    } else document.execCommand("createLink", false, safe);
    setLinking(false);
    emit();
  };

  const btn = (label: string, title: string, onClick: () => void, cls = "") => (
    <button
      type="button"
      class={`rec-rt-btn ${cls}`}
      title={title}
      aria-label={title}
      onMouseDown={(e) => e.preventDefault()}
      onClick={onClick}
    >
      {label}
    </button>
  );

  return (
    <div class={`rec-rt ${props.invalid ? "rec-invalid" : ""}`}>
      <div class="rec-rt-bar" role="toolbar" aria-label="Formatting" aria-controls={props.id}>
        {btn("B", "Bold", () => exec("bold"), "rec-b")}
        {btn("I", "Italic", () => exec("italic"), "rec-i")}
        {btn("Link", "Insert link", link)}
        {btn("Unlink", "Remove link", () => exec("unlink"))}
        {btn("• List", "Bulleted list", () => exec("insertUnorderedList"))}
        {btn("1. List", "Numbered list", () => exec("insertOrderedList"))}
      </div>
      {linking && (
        <div class="rec-rt-link">
          <label for={`${props.id}-href`} class="rec-sr">
            Link address
          </label>
          <input
            id={`${props.id}-href`}
            class="input"
            type="url"
            value={href}
            autoFocus
            aria-invalid={linkErr ? "true" : undefined}
            aria-describedby={linkErr ? `${props.id}-href-err` : undefined}
            onInput={(e) => setHref((e.target as HTMLInputElement).value)}
            onKeyDown={(e) => {
              if (e.key === "Enter") {
                e.preventDefault();
                applyLink();
              } else if (e.key === "Escape") {
                e.preventDefault();
                e.stopPropagation();
                setLinking(false);
              }
            }}
          />
          <button type="button" class="btn btn-primary btn-sm" onClick={applyLink}>
            Add link
          </button>
          <button type="button" class="btn btn-ghost btn-sm" onClick={() => setLinking(false)}>
            Cancel
          </button>
          {linkErr && (
            <div class="field-error" id={`${props.id}-href-err`} role="alert">
              {linkErr}
            </div>
          )}
        </div>
      )}
      <div
        ref={ref}
        id={props.id}
        class="rec-rt-area input"
        contentEditable
        role="textbox"
        aria-multiline="true"
        aria-labelledby={props.labelId}
        aria-describedby={props.describedBy}
        aria-invalid={props.invalid ? "true" : undefined}
        tabIndex={0}
        onInput={emit}
        onBlur={emit}
        onPaste={onPaste as any}
        onDrop={(e) => e.preventDefault()}
      />
    </div>
  );
}

function placeCaretAtEnd(el: HTMLElement) {
  const sel = window.getSelection();
  if (!sel) return;
  const r = document.createRange();
  r.selectNodeContents(el);
  r.collapse(false);
  sel.removeAllRanges();
  sel.addRange(r);
}
