// A page's own service worker that moves its page elsewhere when the page asks
// (tests/e2e/channels.test.mjs, docs/threat-model.md row 11): `WindowClient.navigate` from outside
// the page's scripts.
self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));
self.addEventListener("message", (event) => {
  event.waitUntil(
    self.clients.matchAll({ type: "window" }).then((clients) => {
      const page = clients.find((client) => client.id === event.source?.id);
      return page?.navigate(event.data);
    }),
  );
});
