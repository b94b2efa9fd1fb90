// Hash router: "#/collections/abc/edit" -> ["collections","abc","edit"].
import { useEffect, useRef, useState } from "preact/hooks";

export function currentPath(): string[] {
  const h = location.hash.replace(/^#\/?/, "");
  const [path] = h.split("?");
  return path.split("/").filter(Boolean).map(decodeURIComponent);
}

/** The current route segments and query params; re-renders on hash change. */
export function useRoute(): { path: string[]; query: URLSearchParams } {
  const read = () => ({ path: currentPath(), query: new URLSearchParams(location.hash.split("?")[1] ?? "") });
  const [r, setR] = useState(read);
  const seen = useRef(location.hash);
  useEffect(() => {
    const on = () => {
      seen.current = location.hash;
      setR(read());
    };
    window.addEventListener("hashchange", on);
    if (location.hash !== seen.current) on(); // changed between the render and this effect
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return r;
}

/** Go to a route, e.g. navigate("/collections/abc"). */
export function navigate(path: string, replace = false) {
  const h = "#" + (path.startsWith("/") ? path : "/" + path);
  if (replace) history.replaceState(null, "", h), window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = h;
}

/** href for a route. */
export const link = (path: string) => "#" + (path.startsWith("/") ? path : "/" + path);
