// Watches every target of the browser over a raw CDP connection (the service worker and the
// offscreen document are not Playwright pages) and records what they print as errors.

import WebSocket from "ws";

export class ConsoleWatcher {
  /** @type {Map<string, {type: string, url: string}>} every target seen, by id */
  targets = new Map();
  /** @type {{url: string, text: string}[]} errors from extension pages, workers and test pages */
  errors = [];
  #ws;
  #nextId = 1;
  #pending = new Map();

  static async connect(wsEndpoint) {
    const watcher = new ConsoleWatcher();
    watcher.#ws = new WebSocket(wsEndpoint, { perMessageDeflate: false });
    await new Promise((resolve, reject) => {
      watcher.#ws.once("open", resolve);
      watcher.#ws.once("error", reject);
    });
    watcher.#ws.on("message", (data) => watcher.#onMessage(JSON.parse(String(data))));
    await watcher.#send("Target.setDiscoverTargets", { discover: true });
    return watcher;
  }

  #send(method, params = {}, sessionId) {
    const id = this.#nextId++;
    this.#ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    return new Promise((resolve) => this.#pending.set(id, resolve));
  }

  #onMessage(message) {
    if (message.id !== undefined) {
      this.#pending.get(message.id)?.(message.result ?? message.error);
      this.#pending.delete(message.id);
      return;
    }
    const { method, params, sessionId } = message;
    if (method === "Target.targetCreated" || method === "Target.targetInfoChanged") {
      const { targetId, type, url } = params.targetInfo;
      this.targets.set(targetId, { type, url });
      // A target may get its URL after creation (about:blank first): attach once it is watched.
      if (!this.#attached.has(targetId) && this.#watched(url)) {
        this.#attached.add(targetId);
        void this.#attach(targetId, url);
      }
    } else if (method === "Target.targetDestroyed") {
      this.targets.delete(params.targetId);
    } else if (method === "Target.detachedFromTarget") {
      this.#sessions.delete(params.sessionId);
    } else if (method === "Runtime.exceptionThrown") {
      const d = params.exceptionDetails;
      this.#record(sessionId, `${d.text} ${d.exception?.description ?? ""}`.trim());
    } else if (method === "Runtime.consoleAPICalled" && (params.type === "error" || params.type === "assert")) {
      this.#record(sessionId, params.args.map((a) => a.value ?? a.description ?? "").join(" "));
    } else if (method === "Log.entryAdded" && params.entry.level === "error") {
      this.#record(sessionId, `${params.entry.text} ${params.entry.url ?? ""}`.trim());
    }
  }

  #sessions = new Map();
  #attached = new Set();

  #watched(url) {
    return url.startsWith("chrome-extension://") || url.startsWith("http://127.0.0.1");
  }

  async #attach(targetId, url) {
    const result = await this.#send("Target.attachToTarget", { targetId, flatten: true });
    if (!result?.sessionId) return;
    this.#sessions.set(result.sessionId, url);
    await Promise.all([this.#send("Runtime.enable", {}, result.sessionId), this.#send("Log.enable", {}, result.sessionId)]);
  }

  #record(sessionId, text) {
    this.errors.push({ url: this.#sessions.get(sessionId) ?? "?", text });
  }

  /** The extension's id, from its service worker's URL. */
  extensionId() {
    for (const { type, url } of this.targets.values()) {
      if (type === "service_worker" && url.startsWith("chrome-extension://")) return new URL(url).host;
    }
    return undefined;
  }

  /** Targets whose URL ends with `suffix`. */
  find(suffix) {
    return [...this.targets.values()].filter((t) => t.url.endsWith(suffix));
  }

  /**
   * Evaluates `expression` (awaiting a promise result) in the first target whose URL ends with
   * `suffix`, e.g. "/offscreen.html" or "/service-worker.js"; returns its value (JSON-able).
   */
  async evaluate(suffix, expression, timeoutMs = 30_000) {
    const result = await this.send(suffix, "Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true }, timeoutMs);
    if (result?.exceptionDetails) {
      throw new Error(`${suffix}: ${result.exceptionDetails.exception?.description ?? result.exceptionDetails.text}`);
    }
    return result?.result?.value;
  }

  /**
   * Sends a CDP command to the first target whose URL ends with `suffix` (waiting up to
   * `timeoutMs` for one to be attached); returns its result (or error) object.
   */
  async send(suffix, method, params = {}, timeoutMs = 30_000) {
    const deadline = Date.now() + timeoutMs;
    let sessionId;
    while (!(sessionId = [...this.#sessions].find(([, url]) => url.endsWith(suffix))?.[0])) {
      if (Date.now() > deadline) throw new Error(`no target ending with ${suffix} to send ${method} to`);
      await new Promise((r) => setTimeout(r, 100));
    }
    return this.#send(method, params, sessionId);
  }

  /** Asks Chromium to quit (cleanly, helpers included), then disconnects. */
  async closeBrowser() {
    if (this.#ws.readyState !== WebSocket.OPEN) return;
    await Promise.race([this.#send("Browser.close"), new Promise((r) => setTimeout(r, 5_000))]);
    this.#ws.close();
  }
}
