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
