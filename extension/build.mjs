// Bundles the TypeScript entry points with esbuild and copies the static files.
// Usage: node build.mjs <out-dir>   (cargo xtask build calls this after wasm-bindgen)

import { build } from "esbuild";
import { cpSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";

// Usage: node build.mjs <out-dir> [--bundle-model <model-dir>]
const outdir = resolve(process.argv[2] ?? "../dist/extension");
const modelFlag = process.argv.indexOf("--bundle-model");
const bundledModelDir = modelFlag > 0 ? resolve(process.argv[modelFlag + 1]) : null;
mkdirSync(outdir, { recursive: true });

// A test build is one that bundles a test model: it also gets the test model's manifest and the
// test-only hooks (`__HEARTH_TEST_BUILD__`; release bundles leave that code out).
const testBuild = bundledModelDir !== null;
const common = {
  outdir,
  bundle: true,
  target: "chrome124",
  sourcemap: "linked",
  legalComments: "none",
  logLevel: "warning",
  define: { __HEARTH_TEST_BUILD__: String(testBuild) },
  // Drops the `if (!__HEARTH_TEST_BUILD__)` branches it can decide (identifiers stay readable).
  minifySyntax: true,
};
// The worker, the offscreen document, the options page, the side panel and the microphone page are ES modules; the
// content script is a classic script (the side panel's code is not in it: it has its own bundle).
await build({
  ...common,
  entryPoints: { "service-worker": "src/worker/service-worker.ts", offscreen: "src/offscreen/offscreen.ts", options: "src/options/options.ts", sidepanel: "src/sidepanel/sidepanel.ts", microphone: "src/microphone/microphone.ts" },
  format: "esm",
});
await build({ ...common, entryPoints: { content: "src/content/content.ts" }, format: "iife" });

cpSync("static", outdir, { recursive: true });

// Test builds carry a tiny model so the engine can be exercised end to end without a download:
// `cargo xtask build` copies its files (BUNDLED_MODEL_FILES, crates/protocol) after this script.
rmSync(join(outdir, "test-models"), { recursive: true, force: true });
const bundled_model = bundledModelDir ? `test-models/${basename(bundledModelDir)}` : null;
// The model manifests (models/README.md): the downloadable models, plus models/test/ in test builds.
const modelsDir = resolve(import.meta.dirname, "../models");
rmSync(join(outdir, "models"), { recursive: true, force: true });
mkdirSync(join(outdir, "models"));
const models = [];
for (const dir of testBuild ? [modelsDir, join(modelsDir, "test")] : [modelsDir]) {
  for (const name of readdirSync(dir).filter((n) => n.endsWith(".json")).sort()) {
    cpSync(join(dir, name), join(outdir, "models", name));
    models.push(name.slice(0, -".json".length));
  }
}
writeFileSync(join(outdir, "build-info.json"), JSON.stringify({ bundled_model, models }, null, 2) + "\n");
console.log(`bundled into ${outdir}`);
