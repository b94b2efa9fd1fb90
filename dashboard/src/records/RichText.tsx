// A small rich-text control for `editor` fields: contenteditable with bold / italic / link /
// lists. Whatever enters it (typing, paste, the record's stored value) goes through the
// allow-list sanitizer; content is set as DOM nodes, never as an HTML string.
import { useEffect, useRef } from "preact/hooks";
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

  const link = () => {
    const url = window.prompt("Link address (http, https or mailto):", "https://");
    if (url === null) return;
    const href = safeHref(url);
    if (!href) {
      window.alert("Only http, https and mailto links are allowed.");
      return;
    }
    exec("createLink", href);
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
