// A static file server on 127.0.0.1 for the test and demo pages.

import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { extname, join, normalize } from "node:path";

const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css", ".json": "application/json" };

/** Serves `root`; resolves to { url, close }. */
export async function serve(root) {
  const server = createServer(async (req, res) => {
    // Browsers ask for a favicon on every page; a 404 would show as a console error.
    if (req.url === "/favicon.ico") return void res.writeHead(204).end();
    const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname)).replace(/^(\.\.[/\\])+/, "");
    try {
      const file = join(root, path.endsWith("/") ? `${path}index.html` : path);
      const body = await readFile(file);
      // A page may come with response headers of its own (a strict CSP…): `<page>.headers.json`.
      const extra = await readFile(`${file}.headers.json`, "utf8").then(JSON.parse, () => ({}));
      res.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream", ...extra });
      res.end(body);
    } catch {
      res.writeHead(404).end("not found");
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(r)) };
}

const ATTACK_PAGES = resolve(import.meta.dirname, "../pages");

/**
 * A server on 127.0.0.1 that logs every request but the favicon, for the consent suites: its
 * `url` names it by `host` (`localhost` and `127.0.0.1` are two sites). With `pages`, it serves
 * tests/pages/attacks/*.html and *.js (a page's service worker); `/go?to=<url>` redirects (a
 * same-site address that leads elsewhere); `/attachment/<name>` answers with a file to save (Content-Disposition: attachment); anything
 * else is a small "Thanks" page. A page asked for with `no-store` in its query is sent `Cache-Control: no-store` (going back
 * loads it again: no back-forward cache).
 */
export async function loggingServer(host, pages) {
  const log = [];
  const server = createServer(async (req, res) => {
    if (req.url === "/favicon.ico") return void res.writeHead(204).end();
    log.push(`${req.method} ${req.url}`);
    const path = new URL(req.url, "http://x").pathname;
    if (path === "/go") return void res.writeHead(302, { location: new URL(req.url, "http://x").searchParams.get("to") ?? "/" }).end();
    if (path.startsWith("/attachment/")) {
      return void res.writeHead(200, { "content-type": "application/octet-stream", "content-disposition": `attachment; filename="${path.slice(12)}"` }).end("SECRET-TOKEN-42");
    }
    if (pages && req.method === "GET" && /^\/attacks\/[a-z-]+\.(html|js)$/.test(path)) {
      const body = await readFile(resolve(ATTACK_PAGES, `.${path}`)).catch(() => null);
      const noStore = new URL(req.url, "http://x").searchParams.has("no-store") ? { "cache-control": "no-store" } : {};
      if (body) return void res.writeHead(200, { "content-type": TYPES[extname(path)], ...noStore }).end(body);
    }
    res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>Thanks</title><p>Got it.</p>");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://${host}:${server.address().port}`, log, close: () => new Promise((r) => server.close(r)) };
}
