// Session and connectivity state shared by the shell: 401 -> back to sign-in, network errors -> offline banner.
import { ClientResponseError } from "pocketbase";
import { useLive } from "./live";
import { pb } from "./pb";
import { navigate, currentPath } from "./router";

type State = { online: boolean; loginMessage: string | null };
let state: State = { online: true, loginMessage: null };
const subs = new Set<(s: State) => void>();
function set(p: Partial<State>) {
  state = { ...state, ...p };
  subs.forEach((f) => f(state));
}
export function useSession(): State {
  return useLive(subs, () => state);
}
export const setLoginMessage = (m: string | null) => set({ loginMessage: m });

/** Drop the session and go to sign-in with a message. */
export function sessionExpired(msg = "Your session has expired or was rejected. Please sign in again.") {
  pb.authStore.clear();
  set({ loginMessage: msg });
  if (currentPath()[0] !== "login") navigate("/login");
}

// Noticing a server that went away without polling it (each poll would be a logged request):
// a realtime connection is kept open, and only when it drops (or a call fails) is /api/health
// polled until the server answers again. Without realtime, a slow poll is the fallback.
let pollTimer: number | undefined;
let fallbackPolling = false;
let lastDisconnect = 0;
let watching = false;
function schedulePoll(ms: number) {
  clearTimeout(pollTimer);
  pollTimer = window.setTimeout(checkHealth, ms);
}
async function checkHealth() {
  try {
    await pb.health.check({ requestKey: null });
  } catch {
    /* handled in send */
  }
  if (!state.online) schedulePoll(1500);
  else if (watching && !fallbackPolling && !pb.realtime.isConnected) {
    // Realtime dropped yet the server answered (it may have been on its way out): ask again
    // until realtime is back, and after a minute without it fall back to the slow poll.
    if (Date.now() - lastDisconnect < 60000) schedulePoll(1500);
    else {
      fallbackPolling = true;
      schedulePoll(15000);
    }
  } else if (fallbackPolling) {
    // Back (or never gone): try the realtime watch again, at most every 15 s.
    if (Date.now() - lastWatchTry >= 15000) void watchRealtime();
    else schedulePoll(15000);
  }
}

// Every SDK call goes through pb.send: watch its failures here.
const origSend = pb.send.bind(pb);
pb.send = async function <T>(path: string, options: any): Promise<T> {
  try {
    const r = await origSend<T>(path, options);
    if (!state.online) set({ online: true });
    return r;
  } catch (e) {
    const err = e as ClientResponseError;
    if (err?.status === 0 && !err.isAbort) {
      if (state.online) set({ online: false });
      schedulePoll(1500);
    } else if (err?.status && !state.online) {
      set({ online: true });
    }
    const isAuthCall = /auth-with-|request-otp|\/api\/collections\/_superusers\/records$/.test(path) && (options?.method ?? "GET") === "POST";
    if (err?.status === 401 && !isAuthCall && currentPath()[0] !== "pbinstall") sessionExpired();
    throw e;
  }
} as any;

/** Start watching the connection (so a server that goes away is noticed on idle pages). */
export async function startHealthWatch() {
  if (watching) return;
  watching = true;
  pb.realtime.onDisconnect = (active) => {
    if (!active.length) return;
    lastDisconnect = Date.now();
    void checkHealth();
  };
  await watchRealtime();
}

// A connection that never opened gives no disconnect: the server may have gone away before
// it did, so its health is asked about soon (and then slowly while realtime stays out of reach).
let lastWatchTry = 0;
async function watchRealtime() {
  lastWatchTry = Date.now();
  try {
    await pb.realtime.subscribe("_superusers/*", () => {});
    fallbackPolling = false;
  } catch {
    fallbackPolling = true;
    schedulePoll(1000);
  }
}
