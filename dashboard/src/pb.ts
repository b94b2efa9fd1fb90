// The one SDK client of the dashboard: every call to the server goes through it.
import PocketBase, { LocalAuthStore } from "pocketbase";

// The same storage key as PocketBase's own dashboard, so a session is kept the same way.
export const pb = new PocketBase("/", new LocalAuthStore("__pb_superuser_auth__"));
pb.autoCancellation(false);
