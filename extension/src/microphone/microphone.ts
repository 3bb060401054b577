// Hearth's own page that asks for the microphone (opened by the worker, worker/voice.ts, when the
// offscreen document, which cannot show the browser's prompt, found Hearth not yet allowed). The
// browser asks for Hearth's origin, never for the page the user talks about; once allowed, the
// offscreen document records, and this window closes.

import { t } from "../shared/ui/i18n";

const title = document.querySelector<HTMLElement>(".title")!;
const explain = document.querySelector<HTMLElement>(".explain")!;
const result = document.querySelector<HTMLElement>(".result")!;
const ask = document.querySelector<HTMLButtonElement>(".ask")!;
title.textContent = t("micPermissionTitle");
explain.textContent = t("micPermissionExplain");
ask.textContent = t("micPermissionAsk");

async function askForMicrophone(): Promise<void> {
  ask.disabled = true;
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    // Only the permission was wanted here: the offscreen document records.
    for (const track of stream.getTracks()) track.stop();
    result.textContent = t("micPermissionGranted");
    ask.hidden = true;
    setTimeout(() => window.close(), 2500);
  } catch (error) {
    const name = error instanceof DOMException ? error.name : "";
    result.textContent = name === "NotAllowedError" ? t("micPermissionBlocked") : t("micPermissionFailed", error instanceof Error ? error.message : String(error));
    ask.disabled = false;
  }
}

ask.addEventListener("click", () => void askForMicrophone());
void askForMicrophone();
