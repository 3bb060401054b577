// Every string people see goes through chrome.i18n (static/_locales/{en,zh_CN}/messages.json).
// Keys are always string literals at the call site, so tests/unit/i18n.test.mjs can check they exist.

export const t = (key: string, ...substitutions: string[]): string => chrome.i18n.getMessage(key, substitutions) || key;

/** A number formatted for the browser's UI language (1,234 / 1,234). */
export function formatNumber(value: number, fractionDigits = 0): string {
  return value.toLocaleString(chrome.i18n.getUILanguage(), {
    minimumFractionDigits: fractionDigits,
    maximumFractionDigits: fractionDigits,
  });
}

/** A size for people: "326 KB", "1.4 GB" (decimal units, as browsers' download lists show them). */
export function formatBytes(bytes: number): string {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${formatNumber(value, unit > 0 && value < 10 ? 1 : 0)} ${units[unit]}`;
}

/** A time left for people: "40 s", "3 min 5 s", "1 h 12 min". */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return t("durationSeconds", String(s));
  if (s < 3600) return t("durationMinutes", String(Math.floor(s / 60)), String(s % 60));
  return t("durationHours", String(Math.floor(s / 3600)), String(Math.floor((s % 3600) / 60)));
}
