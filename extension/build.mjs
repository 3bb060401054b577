// Bundles the TypeScript entry points with esbuild and copies the static files.
// Usage: node build.mjs <out-dir>   (cargo xtask build calls this after wasm-bindgen)

import { build } from "esbuild";
import { cpSync, mkdirSync } from "node:fs";
import { resolve } from "node:path";

const outdir = resolve(process.argv[2] ?? "../dist/extension");
mkdirSync(outdir, { recursive: true });

const common = { outdir, bundle: true, target: "chrome124", sourcemap: "linked", legalComments: "none", logLevel: "warning" };
// The worker and the offscreen document are ES modules; the content script is a classic script.
await build({
  ...common,
  entryPoints: { "service-worker": "src/worker/service-worker.ts", offscreen: "src/offscreen/offscreen.ts" },
  format: "esm",
});
await build({ ...common, entryPoints: { content: "src/content/content.ts" }, format: "iife" });

cpSync("static", outdir, { recursive: true });
console.log(`bundled into ${outdir}`);
