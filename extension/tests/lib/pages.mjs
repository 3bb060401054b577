// The agent test pages (tests/pages/agent) made ready to serve: copied to a temporary folder with
// the React page's bundle built next to them, and the content script's DOM tools bundled for
// injection with `page.addScriptTag({ content })`.

import { build } from "esbuild";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { serve } from "./server.mjs";

const EXTENSION = resolve(import.meta.dirname, "../..");
const PAGES = join(EXTENSION, "tests/pages");

/** The DOM tools as a classic script defining the global `hearthTools` ({ executeTool, ToolFailure }). */
export async function bundleTools() {
  const out = await build({
    absWorkingDir: EXTENSION,
    entryPoints: ["src/content/page-tools/index.ts"],
    bundle: true,
    format: "iife",
    globalName: "hearthTools",
    target: "chrome124",
    write: false,
    logLevel: "warning",
  });
  return out.outputFiles[0].text;
}

/**
 * Serves tests/pages with the agent pages' bundles built. Resolves to { url, crossOriginUrl, close }:
 * `crossOriginUrl` reaches the same server under the other loopback name, another origin.
 */
export async function servePages() {
  const root = mkdtempSync(join(tmpdir(), "hearth-pages-"));
  cpSync(PAGES, root, { recursive: true });
  await build({
    absWorkingDir: EXTENSION,
    entryPoints: [join(PAGES, "agent/react-form.jsx")],
    outfile: join(root, "agent/react-form.js"),
    bundle: true,
    format: "iife",
    jsx: "automatic",
    minify: true,
    target: "chrome124",
    define: { "process.env.NODE_ENV": '"production"' },
    logLevel: "warning",
  });
  const server = await serve(root);
  return {
    url: server.url,
    crossOriginUrl: server.url.replace("127.0.0.1", "localhost"),
    close: async () => {
      await server.close();
      rmSync(root, { recursive: true, force: true });
    },
  };
}
