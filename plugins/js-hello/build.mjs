#!/usr/bin/env node
// Builds plugin.js into a wasm component with the componentize-js API.
//
//   node build.mjs [out.wasm]     (default: dist/js-hello.wasm beside this script)
//
// The WIT comes from ../../plugin-sdk/wit (world `plugin`); JS_HELLO_WIT and
// JS_HELLO_WORLD override both, e.g. to try a draft of the contract.
//
// Set JS_HELLO_DEBUG_BINDINGS=<dir> to dump the JS bindings componentize-js
// generates for the WIT world into <dir> (useful to check value shapes).

import { componentize } from '@bytecodealliance/componentize-js';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const witPath = resolve(process.env.JS_HELLO_WIT ?? resolve(here, '../../plugin-sdk/wit'));
const worldName = process.env.JS_HELLO_WORLD ?? 'plugin';
const sourcePath = resolve(here, 'plugin.js');
const outPath = resolve(process.argv[2] ?? resolve(here, 'dist/js-hello.wasm'));

const debugDir = process.env.JS_HELLO_DEBUG_BINDINGS;
if (debugDir) await mkdir(resolve(debugDir), { recursive: true });

const options = {
  sourcePath,
  witPath,
  worldName,
  // A "pure" component: no WASI stdio, random, clocks or http, so it imports
  // only the ferrobase:plugin interfaces. console.log output is dropped (log
  // through ferrobase:plugin/log), Math.random is deterministic and timers
  // (setTimeout, Date.now) trap.
  disableFeatures: ['stdio', 'random', 'clocks', 'http', 'fetch-event'],
};
if (debugDir) {
  options.debug = { bindings: true, bindingsDir: resolve(debugDir) };
  // In this mode componentize-js also writes `binary.wasm` to the cwd.
  process.chdir(resolve(debugDir));
}

const started = performance.now();
let result;
try {
  result = await componentize(options);
} catch (e) {
  // componentize-js 0.23.0 fails at the very end of a debug-bindings build
  // ("Cannot set properties of undefined"), after the files are written.
  if (debugDir && e instanceof TypeError) {
    console.log(
      `js-hello: bindings dumped to ${debugDir}; build again without JS_HELLO_DEBUG_BINDINGS`,
    );
    process.exit(0);
  }
  throw e;
}
const seconds = (performance.now() - started) / 1000;
const { component } = result;

await mkdir(dirname(outPath), { recursive: true });
await writeFile(outPath, component);

// A component starts with `\0asm` then version 0x0d and layer 0x01.
const magic = Buffer.from(component.subarray(4, 8)).toString('hex');
if (magic !== '0d000100') {
  throw new Error(`output is not a component (layer/version bytes ${magic})`);
}

const mib = (component.length / (1024 * 1024)).toFixed(1);
console.log(
  `js-hello: wrote ${relative(process.cwd(), outPath) || outPath} ` +
    `(${component.length} bytes, ${mib} MiB) in ${seconds.toFixed(1)} s`,
);
