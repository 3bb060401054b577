// A local server that imitates Hugging Face's file endpoint for the model-download tests:
// GET/HEAD /{owner}/{name}/resolve/{revision}/{path} with Range requests (206, Content-Range,
// Content-Length, Accept-Ranges), every request logged. Tests can make it corrupt a file, drop the
// connection once in the middle of a file, go down (503) for requests past an offset, and send
// slowly enough for progress to be seen.

import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { join } from "node:path";

/**
 * @param {{ repo: string, revision: string, dir: string }[]} models  what it serves, from local folders
 * @param {{ chunkBytes?: number, chunkDelayMs?: number }} pace  bytes per write and the pause between writes
 */
export async function serveHub(models, { chunkBytes = 16 * 1024, chunkDelayMs = 0 } = {}) {
  const hub = {
    /** @type {{ method: string, repo: string, revision: string, path: string, range: string | null, start: number }[]} */
    requests: [],
    /** Paths served with one byte changed. */
    corrupt: new Set(),
    /** path → byte offset in the file: the next response covering it is cut there (once). */
    dropOnce: new Map(),
    /** Paths whose connection was dropped, with the offset. */
    dropped: [],
    /** path → { from, times }: the next `times` requests starting at or past `from` get a 503. */
    outage: new Map(),
    pace: { chunkBytes, chunkDelayMs },
  };
  const server = createServer((req, res) => void answer(req, res));
  const sockets = new Set();
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });

  async function answer(req, res) {
    const match = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(new URL(req.url, "http://x").pathname);
    const model = match && models.find((m) => m.repo === match[1] && m.revision === match[2]);
    const path = match ? decodeURIComponent(match[3]) : "";
    let body;
    try {
      if (!model || path.split("/").includes("..")) throw new Error("not found");
      body = await readFile(join(model.dir, path));
    } catch {
      hub.requests.push({ method: req.method, repo: match?.[1] ?? "", revision: match?.[2] ?? "", path, range: req.headers.range ?? null, start: -1 });
      res.writeHead(404, { "content-type": "text/plain" }).end("Entry not found");
      return;
    }
    if (hub.corrupt.has(path)) {
      body = Buffer.from(body);
      body[body.length >> 1] ^= 0x5a;
    }
    const size = body.length;
    let [start, end] = [0, size - 1];
    const range = req.headers.range ?? null;
    if (range) {
      const r = /^bytes=(\d+)-(\d*)$/.exec(range);
      if (!r || Number(r[1]) >= size) {
        hub.requests.push({ method: req.method, repo: model.repo, revision: model.revision, path, range, start: -1 });
        res.writeHead(416, { "content-range": `bytes */${size}` }).end();
        return;
      }
      start = Number(r[1]);
      end = r[2] ? Math.min(Number(r[2]), size - 1) : size - 1;
    }
    hub.requests.push({ method: req.method, repo: model.repo, revision: model.revision, path, range, start });
    const outage = hub.outage.get(path);
    if (outage && start >= outage.from && outage.times > 0) {
      outage.times--;
      res.writeHead(503, { "content-type": "text/plain", "retry-after": "1" }).end("Service unavailable");
      return;
    }
    const headers = {
      "content-type": "application/octet-stream",
      "content-length": String(end - start + 1),
      "accept-ranges": "bytes",
      etag: `"${model.revision}-${path}"`,
    };
    if (range) headers["content-range"] = `bytes ${start}-${end}/${size}`;
    res.writeHead(range ? 206 : 200, headers);
    if (req.method === "HEAD") return void res.end();

    const drop = hub.dropOnce.get(path);
    const cut = drop !== undefined && drop > start && drop <= end ? drop : null;
    if (cut !== null) hub.dropOnce.delete(path);
    for (let at = start; at <= end; ) {
      const stop = Math.min(end + 1, at + hub.pace.chunkBytes, cut ?? Infinity);
      await new Promise((resolve) => res.write(body.subarray(at, stop), resolve));
      at = stop;
      if (at === cut) {
        hub.dropped.push({ path, at });
        // The connection goes away mid-body, as a flaky network does.
        res.socket?.destroy();
        return;
      }
      if (hub.pace.chunkDelayMs) await new Promise((r) => setTimeout(r, hub.pace.chunkDelayMs));
    }
    res.end();
  }

  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  hub.url = `http://127.0.0.1:${server.address().port}`;
  hub.close = () =>
    new Promise((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(resolve);
    });
  return hub;
}
