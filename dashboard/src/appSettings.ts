// The few application settings the shell uses (app name, hideControls), loaded after sign-in.
import { useEffect } from "preact/hooks";
import { useLive } from "./live";
import { pb } from "./pb";

type Meta = { appName: string; hideControls: boolean };
let meta: Meta = { appName: "", hideControls: false };
let loaded = false;
let asked = 0;
let pending: Promise<void> | null = null;
const subs = new Set<(m: Meta) => void>();

/** Re-read the settings (call after saving them). A read started before a save may answer
 * with the old values: every call reads anew, and only the latest answer is kept. */
export function reloadAppSettings(): Promise<void> {
  return load(++asked);
}

/** The first read, shared by every component that mounts before it answers. */
function loadOnce(): Promise<void> {
  pending ??= reloadAppSettings().finally(() => (pending = null));
  return pending;
}

async function load(n: number) {
  try {
    const s: any = await pb.settings.getAll({ requestKey: null });
    if (n !== asked) return;
    meta = { appName: s?.meta?.appName ?? "", hideControls: !!s?.meta?.hideControls };
    loaded = true;
    subs.forEach((f) => f(meta));
  } catch {
    /* not signed in or offline: keep the last values */
  }
}

/** { appName, hideControls } of the server's settings. */
export function useAppSettings(): Meta {
  const m = useLive(subs, () => meta);
  useEffect(() => {
    if (!loaded) void loadOnce();
  }, []);
  return m;
}
