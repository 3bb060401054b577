// Content script entry: mounts the overlay in top-level http(s) pages.

import { mountOverlay } from "./overlay";

if (window.top === window && !document.querySelector("hearth-overlay")) {
  mountOverlay();
}
