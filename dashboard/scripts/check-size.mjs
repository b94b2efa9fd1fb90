// The first-load size budget: index.html plus the JS and CSS it loads directly (and their
// static imports: modulepreload links), gzipped at level 9. Lazy chunks are not counted.
// Fails (exit 1) over the budget.
import { readFileSync } from "node:fs";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const BUDGET = 250 * 1024;
const dist = resolve(dirname(fileURLToPath(import.meta.url)), "../dist");
const html = readFileSync(join(dist, "index.html"), "utf8");
const files = new Set(["index.html"]);
for (const m of html.matchAll(/(?:src|href)="\/_\/([^"]+\.(?:js|css))"/g)) files.add(m[1]);
let total = 0;
const rows = [];
for (const f of files) {
  const gz = gzipSync(readFileSync(join(dist, f)), { level: 9 }).length;
  total += gz;
  rows.push(`  ${f}: ${(gz / 1024).toFixed(1)} KB`);
}
console.log(`first load (gzip -9): ${(total / 1024).toFixed(1)} KB of ${BUDGET / 1024} KB budget\n${rows.join("\n")}`);
if (files.size < 2) {
  console.error("check-size: found no JS/CSS in index.html");
  process.exit(1);
}
if (total > BUDGET) {
  console.error(`check-size: over the budget by ${((total - BUDGET) / 1024).toFixed(1)} KB`);
  process.exit(1);
}
