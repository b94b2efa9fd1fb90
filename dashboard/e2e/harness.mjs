// End-to-end harness: a real ferrobase on a free 127.0.0.1 port with a fresh data dir,
// a real headless Chromium, and helpers. See CONTRACT.md for the API.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync, copyFileSync, cpSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import net from "node:net";
import http from "node:http";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
export const DASH = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const BIN = resolve(process.env.FERROBASE_BIN ?? join(DASH, "../target/release/ferrobase"));
export const CHROMIUM = process.env.CHROMIUM_BIN ?? "/usr/bin/chromium";
export const WASM_DIR = resolve(process.env.FERROBASE_PLUGIN_WASM_DIR ?? join(DASH, "../plugins/target/wasm32-wasip2/release"));
export const OUT = resolve(process.env.E2E_OUT ?? join(DASH, "e2e-out"));
export const EMAIL = "admin@example.com";
export const PASSWORD = "e2e-Passw0rd!";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Servers still running when this process ends (a failed or cancelled test) are killed.
const live = new Set();
process.on("exit", () => {
  for (const p of live) try { p.kill("SIGKILL"); } catch {}
});
for (const sig of ["SIGINT", "SIGTERM"]) process.once(sig, () => process.exit(130));

async function freePort() {
  for (let i = 0; i < 50; i++) {
    const port = 18000 + Math.floor(Math.random() * 1000);
    const ok = await new Promise((res) => {
      const s = net.createServer();
      s.once("error", () => res(false));
      s.listen(port, "127.0.0.1", () => s.close(() => res(true)));
    });
    if (ok) return port;
  }
  throw new Error("no free port in 18000-18999");
}

/**
 * Start a harness. opts.superuser (default true): create EMAIL/PASSWORD before serving.
 * opts.plugins: wasm file names copied from WASM_DIR into the plugins dir before start.
 * opts.config: pb.toml text (passed with --config).
 */
export async function start(opts = {}) {
  const h = new Harness(opts);
  try {
    await h._init();
  } catch (e) {
    await h.stop();
    throw e;
  }
  return h;
}

class Harness {
  constructor(opts) {
    this.opts = { superuser: true, plugins: [], config: "", ...opts };
    this.tmp = mkdtempSync(join(tmpdir(), "fb-e2e-"));
    this.dataDir = join(this.tmp, "data");
    this.pluginsDir = join(this.tmp, "plugins");
    mkdirSync(this.dataDir);
    mkdirSync(this.pluginsDir);
    this.distDir = join(this.tmp, "dist");
    this.stdout = "";
    this.proc = null;
    this.browser = null;
    this.proxy = null;
    this._token = null;
    this.pages = [];
  }

  /** A complete snapshot of dist/ (a rebuild running meanwhile empties it for a moment). */
  async _snapshotDist() {
    for (let i = 0; i < 50; i++) {
      rmSync(this.distDir, { recursive: true, force: true });
      try {
        cpSync(join(DASH, "dist"), this.distDir, { recursive: true });
        const html = readFileSync(join(this.distDir, "index.html"), "utf8");
        const refs = [...html.matchAll(/(?:src|href)="\/_\/([^"]+)"/g)].map((m) => m[1]);
        if (refs.length && refs.every((r) => existsSync(join(this.distDir, r)))) return;
      } catch {}
      await sleep(200);
    }
    throw new Error("dist/ has no complete build (run npm run build in dashboard/)");
  }

  async _init() {
    await this._snapshotDist();
    if (!existsSync(BIN)) throw new Error(`ferrobase binary not found at ${BIN} (set FERROBASE_BIN)`);
    for (const p of this.opts.plugins) this.addPlugin(p);
    // Always an explicit config (so no ./pb.toml of the working directory is picked up).
    this.configPath = join(this.tmp, "pb.toml");
    writeFileSync(this.configPath, this.opts.config);
    if (this.opts.superuser) execFileSync(BIN, ["superuser", "upsert", EMAIL, PASSWORD, "--dir", this.dataDir], { stdio: "pipe" });
    this.port = await freePort();
    this.serverURL = `http://127.0.0.1:${this.port}`;
    await this.startServer();
    // Serve the dashboard from the binary when it does (embedded or FERROBASE_DASHBOARD_DIR);
    // otherwise from dist/ through a small proxy in front of the server.
    const r = await fetch(`${this.serverURL}/_/`).catch(() => null);
    const html = r && r.ok ? await r.text() : "";
    if (html.includes('id="app"')) this.baseURL = this.serverURL;
    else this.baseURL = await this._startProxy();
    this.browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
  }

  /** Start (or restart) the ferrobase process on the same port and data dir. */
  async startServer() {
    this.stdout = "";
    // E2E_EMBEDDED=1 (the test command sets it) tests the dashboard built into the binary;
    // otherwise a snapshot of dist/ is served, so a rebuild during a run changes nothing.
    const env = { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "info" };
    delete env.FERROBASE_DASHBOARD_DIR;
    if (process.env.E2E_EMBEDDED !== "1") env.FERROBASE_DASHBOARD_DIR = this.distDir;
    const proc = spawn(BIN, ["serve", "--http", `127.0.0.1:${this.port}`, "--dir", this.dataDir, "--pluginsDir", this.pluginsDir, "--config", this.configPath], { env, stdio: ["ignore", "pipe", "pipe"] });
    this.proc = proc;
    live.add(proc);
    proc.once("exit", () => live.delete(proc));
    proc.stdout.on("data", (d) => (this.stdout += d));
    proc.stderr.on("data", (d) => (this.stdout += d));
    const deadline = Date.now() + 20000;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null) throw new Error(`ferrobase exited (${proc.exitCode}):\n${this.stdout}`);
      const ok = await fetch(`${this.serverURL}/api/health`).then((r) => r.ok, () => false);
      if (ok) return;
      await sleep(100);
    }
    throw new Error(`ferrobase did not become healthy:\n${this.stdout}`);
  }

  /** Stop the ferrobase process (the data dir stays). */
  async stopServer() {
    const p = this.proc;
    if (!p || p.exitCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    const t = setTimeout(() => p.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(t);
  }

  _startProxy() {
    const dist = this.distDir;
    const types = { html: "text/html", js: "text/javascript", css: "text/css", svg: "image/svg+xml", png: "image/png", json: "application/json" };
    this.proxy = http.createServer((req, res) => {
      if (req.url.startsWith("/_/")) {
        let rel = decodeURIComponent(req.url.slice(3).split("?")[0]) || "index.html";
        let file = join(dist, rel);
        if (!file.startsWith(dist) || !existsSync(file) || rel.endsWith("/")) file = join(dist, "index.html");
        res.writeHead(200, { "content-type": types[file.split(".").pop()] ?? "application/octet-stream" });
        return res.end(readFileSync(file));
      }
      const up = http.request({ host: "127.0.0.1", port: this.port, path: req.url, method: req.method, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on("error", () => res.socket?.destroy()); // look like a server that went away
      req.pipe(up);
    });
    return new Promise((r) => this.proxy.listen(0, "127.0.0.1", () => r(`http://127.0.0.1:${this.proxy.address().port}`)));
  }

  /** The installer link printed by serve (path + hash), or null. */
  installLink() {
    const m = this.stdout.match(/https?:\/\/[^\s"]*\/_\/#\/pbinstall\/[A-Za-z0-9._-]+/);
    if (!m) return null;
    return this.baseURL + m[0].replace(/^https?:\/\/[^/]+/, "");
  }

  /** Copy a plugin wasm from WASM_DIR into the plugins dir (as `as`, default the same name). */
  addPlugin(name, as = name) {
    copyFileSync(join(WASM_DIR, name), join(this.pluginsDir, as));
  }

  /** A fresh browser page (own context, 1280x800), with console errors collected in page.errors. */
  async newPage() {
    const ctx = await this.browser.newContext({ viewport: { width: 1280, height: 800 }, bypassCSP: true });
    const page = await ctx.newPage();
    page.errors = [];
    page.on("pageerror", (e) => page.errors.push(String(e)));
    page.setDefaultTimeout(15000);
    this.pages.push(page);
    return page;
  }

  /** Open a dashboard route, e.g. goto(page, "/collections"). */
  async goto(page, route = "/") {
    await page.goto(`${this.baseURL}/_/#${route}`);
  }

  /** Sign in through the form as the harness superuser; waits for the shell. */
  async signIn(page, email = EMAIL, password = PASSWORD) {
    await this.goto(page, "/login");
    await page.fill('input[name="email"]', email);
    await page.fill('input[name="password"]', password);
    await page.click('button[type="submit"]');
    await page.waitForSelector('nav[aria-label="Main"]');
  }

  /** Save a screenshot into E2E_OUT/<name>.png. */
  async screenshot(page, name) {
    mkdirSync(OUT, { recursive: true });
    await page.screenshot({ path: join(OUT, `${name}.png`) });
  }

  /** Run axe-core on the page; returns the violations of serious or critical impact. */
  async axe(page) {
    const axe = require("axe-core");
    await page.addScriptTag({ content: axe.source });
    const r = await page.evaluate(async () => await window.axe.run(document, { resultTypes: ["violations"] }));
    return r.violations
      .filter((v) => v.impact === "serious" || v.impact === "critical")
      .map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(" ")).slice(0, 5) }));
  }

  /** A superuser token (password auth against the server). */
  async token() {
    if (this._token) return this._token;
    const r = await fetch(`${this.serverURL}/api/collections/_superusers/auth-with-password`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ identity: EMAIL, password: PASSWORD }),
    });
    if (!r.ok) throw new Error(`superuser auth failed: ${r.status} ${await r.text()}`);
    this._token = (await r.json()).token;
    return this._token;
  }

  /**
   * Call the server. opts: {method, body (object -> JSON), headers, guest (no token)}.
   * Returns {status, body} (body parsed as JSON when possible).
   */
  async api(path, opts = {}) {
    const headers = { ...(opts.headers ?? {}) };
    if (!opts.guest) headers.authorization = await this.token();
    let body = opts.body;
    if (body !== undefined && typeof body !== "string" && !(body instanceof FormData)) {
      body = JSON.stringify(body);
      headers["content-type"] = "application/json";
    }
    const r = await fetch(`${this.serverURL}${path}`, { method: opts.method ?? "GET", headers, body });
    const text = await r.text();
    let parsed = text;
    try { parsed = JSON.parse(text); } catch {}
    return { status: r.status, body: parsed };
  }

  /** Close the browser, stop the server and the proxy, remove the temp dir. */
  async stop() {
    try { await this.browser?.close(); } catch {}
    await this.stopServer().catch(() => {});
    await new Promise((r) => (this.proxy ? this.proxy.close(r) : r()));
    this.proxy?.closeAllConnections?.();
    rmSync(this.tmp, { recursive: true, force: true });
  }
}
