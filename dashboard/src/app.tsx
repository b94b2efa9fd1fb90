import { useEffect, useState } from "preact/hooks";
import { pb } from "./pb";
import { Toasts, DialogHost, Loading, navigate, useRoute, link } from "./ui";
import { useSession, sessionExpired, startHealthWatch } from "./session";
import { currentPath } from "./router";
import { Logo } from "./Logo";
import { useAppSettings } from "./appSettings";
import { findCollection } from "./collectionsStore";
import { Login } from "./pages/Login";
import { Install } from "./pages/Install";
import { CollectionsPage } from "./pages/Collections";
import { SettingsPage } from "./pages/Settings";
import { LogsPage } from "./pages/Logs";
import { PluginsPage } from "./pages/Plugins";

const I = {
  collections: <path d="M4 6c0-1.7 3.6-3 8-3s8 1.3 8 3-3.6 3-8 3-8-1.3-8-3zm0 0v12c0 1.7 3.6 3 8 3s8-1.3 8-3V6M4 12c0 1.7 3.6 3 8 3s8-1.3 8-3" />,
  logs: <path d="M4 19V5m0 14h16M8 16v-5m4 5V8m4 8v-3" />,
  settings: <path d="M12 15a3 3 0 100-6 3 3 0 000 6zm7.4-3a7.4 7.4 0 00-.1-1.2l2-1.6-2-3.4-2.4 1a7 7 0 00-2-1.2L14.5 3h-4l-.4 2.6a7 7 0 00-2 1.2l-2.4-1-2 3.4 2 1.6a7.4 7.4 0 000 2.4l-2 1.6 2 3.4 2.4-1a7 7 0 002 1.2l.4 2.6h4l.4-2.6a7 7 0 002-1.2l2.4 1 2-3.4-2-1.6c.1-.4.1-.8.1-1.2z" />,
  plugins: <path d="M9 3v4m6-4v4M6 7h12v4a6 6 0 01-12 0V7zm6 10v4" />,
  out: <path d="M15 4h4v16h-4M10 8l-4 4 4 4M6 12h10" />,
};
function Icon(p: { d: any }) {
  return <svg width="20" height="20" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="1.7" stroke-linecap="round" stroke-linejoin="round" aria-hidden="true">{p.d}</svg>;
}

function Sidebar(props: { section: string }) {
  const items: Array<[string, string, any]> = [
    ["collections", "Collections", I.collections],
    ["logs", "Logs", I.logs],
    ["settings", "Settings", I.settings],
    ["plugins", "Plugins", I.plugins],
  ];
  const email = (pb.authStore.record as any)?.email ?? "";
  const { appName } = useAppSettings();
  return (
    <nav class="sidebar" aria-label="Main">
      <a href={link("/collections")} class="sidebar-logo" aria-label={`${appName || "Ferrobase"} home`} title={appName || "Ferrobase"}><Logo small /></a>
      <ul>
        {items.map(([id, label, icon]) => (
          <li>
            <a href={link("/" + id)} class={props.section === id ? "active" : ""} aria-current={props.section === id ? "page" : undefined}>
              <Icon d={icon} /><span>{label}</span>
            </a>
          </li>
        ))}
      </ul>
      <div class="sidebar-foot">
        <div class="sidebar-user" title={email}>{email}</div>
        <button class="sidebar-out" onClick={() => { pb.authStore.clear(); navigate("/login"); }}>
          <Icon d={I.out} /><span>Sign out</span>
        </button>
      </div>
    </nav>
  );
}

function OfflineBanner() {
  const { online } = useSession();
  if (online) return null;
  return (
    <div class="banner banner-offline" role="alert" data-testid="offline-banner">
      <strong>Can't reach the server.</strong> Retrying… Your changes are not lost; try again once it is back.
    </div>
  );
}

export function App() {
  const { path } = useRoute();
  const [ready, setReady] = useState(false);
  const [, force] = useState(0);
  const section = path[0] ?? "";

  useEffect(() => pb.authStore.onChange(() => force((n) => n + 1)), []);
  const { appName } = useAppSettings();
  // A title per screen (read by screen readers and shown in tabs and history).
  useEffect(() => {
    const names: Record<string, string> = { login: "Sign in", pbinstall: "Create superuser", logs: "Logs", settings: "Settings", plugins: "Plugins", collections: "Collections" };
    const where = path[0] === "collections" && path[1] ? (path[1] === "new" ? "New collection" : findCollection(path[1])?.name ?? "Collections") : names[section] ?? "Collections";
    document.title = `${where} · ${appName || "Ferrobase"}`;
  }, [path.join("/"), appName]);

  // Session restore: refresh the stored token once on load.
  useEffect(() => {
    (async () => {
      if (section === "pbinstall") return setReady(true);
      const hadToken = !!pb.authStore.token;
      if (hadToken && pb.authStore.isValid && pb.authStore.isSuperuser) {
        try {
          await pb.collection("_superusers").authRefresh();
        } catch (e: any) {
          if (e?.status !== 0) sessionExpired();
        }
      } else if (hadToken) {
        sessionExpired();
      }
      setReady(true);
      startHealthWatch();
    })();
  }, []);

  let page;
  const authed = pb.authStore.isValid && pb.authStore.isSuperuser;
  if (section === "pbinstall") page = <Install token={path[1] ?? ""} />;
  else if (!ready) page = <main class="auth-page"><Loading /></main>;
  else if (section === "login" || !authed) {
    if (section !== "login") setTimeout(() => !(pb.authStore.isValid && pb.authStore.isSuperuser) && currentPath()[0] !== "login" && navigate("/login", true));
    page = <Login />;
  } else {
    let inner;
    if (section === "logs") inner = <LogsPage />;
    else if (section === "settings") inner = <SettingsPage sub={path[1] ?? ""} />;
    else if (section === "plugins") inner = <PluginsPage />;
    else {
      if (section !== "collections") setTimeout(() => currentPath()[0] === section && navigate("/collections", true));
      inner = <CollectionsPage path={path.slice(1)} />;
    }
    page = (
      <div class="app">
        <a href="#main" class="skip" onClick={(e) => { e.preventDefault(); document.getElementById("main")?.focus(); }}>Skip to content</a>
        <Sidebar section={section || "collections"} />
        <div class="app-content">
          <OfflineBanner />
          {inner}
        </div>
      </div>
    );
  }
  return (
    <>
      {section === "pbinstall" || section === "login" || !authed ? <OfflineBanner /> : null}
      {page}
      <Toasts />
      <DialogHost />
    </>
  );
}
