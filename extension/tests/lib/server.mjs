// A static file server on 127.0.0.1 for the test and demo pages.

import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
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
