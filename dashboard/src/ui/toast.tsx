import { useLive } from "../live";

export type ToastKind = "success" | "error" | "info";
type Toast = { id: number; text: string; kind: ToastKind };

let toasts: Toast[] = [];
let seq = 0;
const subs = new Set<(t: Toast[]) => void>();
const emit = () => subs.forEach((f) => f(toasts));

/** Show a short message in the corner (announced by screen readers). */
export function toast(text: string, kind: ToastKind = "success", ms = 4000) {
  const t = { id: ++seq, text, kind };
  toasts = [...toasts, t].slice(-3);
  emit();
  setTimeout(() => dismissToast(t.id), kind === "error" ? ms * 2 : ms);
}
export const toastError = (text: string) => toast(text, "error");
export function dismissToast(id: number) {
  toasts = toasts.filter((t) => t.id !== id);
  emit();
}

/** Render once in the shell. */
export function Toasts() {
  const list = useLive(subs, () => toasts);
  return (
    <div class="toasts" aria-live="polite" role="status">
      {list.map((t) => (
        <div key={t.id} class={`toast toast-${t.kind}`} data-testid="toast">
          <span>{t.text}</span>
          <button class="btn-icon" aria-label="Dismiss" onClick={() => dismissToast(t.id)}>×</button>
        </div>
      ))}
    </div>
  );
}
