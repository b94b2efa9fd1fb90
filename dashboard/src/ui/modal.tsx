import { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { useLive } from "../live";

let modalSeq = 0;
const stack: number[] = [];

/** A dialog with a title, focus kept inside, Escape closes. `wide` for big editors; `drawer` slides from the right. */
export function Modal(props: {
  title: ComponentChildren;
  onClose: () => void;
  children: ComponentChildren;
  footer?: ComponentChildren;
  wide?: boolean;
  drawer?: boolean;
  class?: string;
}) {
  const ref = useRef<HTMLDivElement>(null);
  const onClose = useRef(props.onClose);
  onClose.current = props.onClose; // the key handler is bound once: always call the latest
  const [seq] = useState(() => ++modalSeq);
  const titleId = `modal-title-${seq}`;
  useEffect(() => {
    stack.push(seq);
    const prev = document.activeElement as HTMLElement | null;
    const el = ref.current!;
    const first = el.querySelector<HTMLElement>("[autofocus], input, select, textarea, button:not(.modal-close)");
    (first ?? el).focus();
    const onKey = (e: KeyboardEvent) => {
      if (stack[stack.length - 1] !== seq) return;
      if (e.key === "Escape") {
        e.stopPropagation();
        onClose.current();
      } else if (e.key === "Tab") {
        const f = Array.from(el.querySelectorAll<HTMLElement>("a[href], button:not([disabled]), input:not([disabled]), select, textarea, [tabindex]:not([tabindex='-1'])")).filter((x) => x.offsetParent !== null);
        if (!f.length) return;
        if (!el.contains(document.activeElement)) { e.preventDefault(); f[0].focus(); return; }
        const a = f[0], b = f[f.length - 1];
        if (e.shiftKey && document.activeElement === a) { e.preventDefault(); b.focus(); }
        else if (!e.shiftKey && document.activeElement === b) { e.preventDefault(); a.focus(); }
      }
    };
    document.addEventListener("keydown", onKey);
    return () => {
      document.removeEventListener("keydown", onKey);
      stack.splice(stack.indexOf(seq), 1);
      prev?.focus?.();
    };
  }, []);
  return (
    <div class={`overlay ${props.drawer ? "overlay-drawer" : ""}`} onMouseDown={(e) => e.target === e.currentTarget && props.onClose()}>
      <div ref={ref} tabIndex={-1} role="dialog" aria-modal="true" aria-labelledby={titleId}
        class={`modal ${props.wide ? "modal-wide" : ""} ${props.drawer ? "drawer" : ""} ${props.class ?? ""}`}>
        <header class="modal-head">
          <h2 id={titleId}>{props.title}</h2>
          <button class="btn-icon modal-close" aria-label="Close" onClick={props.onClose}>×</button>
        </header>
        <div class="modal-body">{props.children}</div>
        {props.footer && <footer class="modal-foot">{props.footer}</footer>}
      </div>
    </div>
  );
}

type ConfirmOpts = { title: string; message?: ComponentChildren; confirmText?: string; danger?: boolean; typed?: string };
type Pending = ConfirmOpts & { resolve: (ok: boolean) => void };
let pending: Pending | null = null;
const subs = new Set<(p: Pending | null) => void>();

/** Ask for confirmation; resolves true when confirmed. `typed`: the user must type this text to enable the button. */
export function confirmDialog(opts: ConfirmOpts): Promise<boolean> {
  return new Promise((resolve) => {
    pending = { ...opts, resolve };
    subs.forEach((f) => f(pending));
  });
}

/** Render once in the shell. */
export function DialogHost() {
  const p = useLive(subs, () => pending);
  const [typed, setTyped] = useState("");
  if (!p) return null;
  const close = (ok: boolean) => {
    pending = null;
    subs.forEach((f) => f(null));
    setTyped("");
    p.resolve(ok);
  };
  const blocked = !!p.typed && typed !== p.typed;
  return (
    <Modal title={p.title} onClose={() => close(false)}
      footer={<>
        <button class="btn btn-ghost" onClick={() => close(false)}>Cancel</button>
        <button class={`btn ${p.danger ? "btn-danger" : "btn-primary"}`} disabled={blocked} data-testid="confirm-yes" onClick={() => close(true)}>
          {p.confirmText ?? "Confirm"}
        </button>
      </>}>
      {p.message && <div class="confirm-msg">{p.message}</div>}
      {p.typed && (
        <div class="field">
          <label for="confirm-typed">Type <code>{p.typed}</code> to confirm</label>
          <input id="confirm-typed" class="input" value={typed} onInput={(e) => setTyped((e.target as HTMLInputElement).value)} autofocus />
        </div>
      )}
    </Modal>
  );
}
