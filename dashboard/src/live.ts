// A component's view of a module-level value that changes outside it (session, collections, toasts...).
import { useEffect, useState } from "preact/hooks";

/** The current value of `get()`, re-rendered whenever something notifies `subs`. The
 * state is read again once subscribed: a change between the render and the effect would
 * otherwise notify no one and leave the component showing the old value. */
export function useLive<T>(subs: Set<(v: T) => void>, get: () => T): T {
  const [v, setV] = useState<T>(get);
  useEffect(() => {
    const on = (x: T) => setV(() => x);
    subs.add(on);
    on(get());
    return () => void subs.delete(on);
  }, []);
  return v;
}
