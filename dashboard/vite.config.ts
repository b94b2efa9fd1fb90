import { defineConfig } from "vite";

// The dashboard is served by ferrobase at /_/ from assets embedded in the binary
// (host/build.rs reads dist/). `npm run dev` proxies the API to a running server
// (FERROBASE_URL, default http://127.0.0.1:8090).
const backend = process.env.FERROBASE_URL ?? "http://127.0.0.1:8090";

export default defineConfig({
  base: "/_/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsInlineLimit: 0,
    sourcemap: false,
  },
  server: {
    host: "127.0.0.1",
    proxy: { "/api": { target: backend, changeOrigin: false } },
  },
});
