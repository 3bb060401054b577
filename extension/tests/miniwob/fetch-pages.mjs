// MiniWoB++'s task pages, from the `miniwob` wheel on PyPI (MIT licence), kept out of the repository:
// downloaded once with pip into $HEARTH_CACHE/miniwob-1.1.0/html (default ~/.cache/hearth).
// Run alone to fetch them: `node tests/miniwob/fetch-pages.mjs`.

import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

export const MINIWOB_VERSION = "1.1.0";
/** The wheel's digest on PyPI; pip refuses a download that differs. */
const WHEEL_SHA256 = "297006e84219d56ad037e843527ed773a4a82509dc43b6031ec4a3ad3e3e61d9";

/** Files every run needs; a task's own page is checked by the runner when it opens it. */
const REQUIRED = [
  "core/core.js", "core/core.css", "core/d3.v3.min.js", "core/jquery-ui/jquery-ui.min.js", "core/jquery-ui/external/jquery/jquery.js",
  "common/ui_utils.js", "miniwob/click-button.html",
];

export const cacheRoot = () => process.env.HEARTH_CACHE || join(homedir(), ".cache", "hearth");

function missingFiles(html) {
  return REQUIRED.filter((f) => !existsSync(join(html, f)));
}

function run(command, args, what) {
  const r = spawnSync(command, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 300_000 });
  if (r.error?.code === "ENOENT") throw new Error(`${what}: \`${command}\` is not installed (Debian: sudo apt-get install python3 python3-pip)`);
  if (r.status !== 0) throw new Error(`${what} failed (${command} ${args.join(" ")}, exit ${r.status ?? r.signal}):\n${r.stderr || r.stdout}`);
  return r;
}

/** The folder holding `core/`, `common/` and `miniwob/*.html`, downloading it first if needed. */
export function miniwobHtml({ log = (m) => console.error(m) } = {}) {
  const dir = join(cacheRoot(), `miniwob-${MINIWOB_VERSION}`);
  const html = join(dir, "html");
  if (existsSync(html)) {
    const missing = missingFiles(html);
    if (missing.length === 0) return html;
    throw new Error(`${html} is incomplete (no ${missing.join(", ")}); delete ${dir} to download it again`);
  }
  log(`miniwob: downloading miniwob==${MINIWOB_VERSION} from PyPI into ${dir}`);
  mkdirSync(cacheRoot(), { recursive: true });
  const tmp = mkdtempSync(join(cacheRoot(), "miniwob-download-"));
  try {
    const python = process.env.PYTHON || "python3";
    const pip = spawnSync(python, ["-m", "pip", "--version"], { encoding: "utf8" });
    if (pip.error || pip.status !== 0) {
      throw new Error(
        `MiniWoB's pages are downloaded with pip, and \`${python} -m pip\` does not run (${pip.error?.message ?? pip.stderr.trim()}). ` +
          "Install it (Debian: sudo apt-get install python3-pip), set PYTHON to a Python with pip, or put the wheel's miniwob/html folder at " +
          html,
      );
    }
    // A hash-pinned requirement makes pip check the wheel's digest.
    const requirements = join(tmp, "requirements.txt");
    writeFileSync(requirements, `miniwob==${MINIWOB_VERSION} --hash=sha256:${WHEEL_SHA256}\n`);
    run(python, ["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "-r", requirements, "-d", tmp], "pip download");
    const wheel = readdirSync(tmp).find((f) => f.startsWith(`miniwob-${MINIWOB_VERSION}-`) && f.endsWith(".whl"));
    if (!wheel) throw new Error(`pip download left no miniwob-${MINIWOB_VERSION}-*.whl in ${tmp}`);
    const extracted = join(tmp, "wheel");
    // A wheel is a zip; Python's zipfile extracts it where `unzip` is not installed.
    run(python, ["-m", "zipfile", "-e", join(tmp, wheel), extracted], "extracting the wheel");
    const inner = join(extracted, "miniwob", "html");
    const missing = existsSync(inner) ? missingFiles(inner) : ["miniwob/html/"];
    if (missing.length > 0) throw new Error(`${wheel} does not hold the expected MiniWoB pages (no ${missing.join(", ")})`);
    mkdirSync(dir, { recursive: true });
    // Moved in one step, so an interrupted download never leaves a half-filled cache.
    renameSync(inner, html);
    log(`miniwob: pages in ${html}`);
    return html;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (import.meta.main ?? process.argv[1] === import.meta.filename) console.log(miniwobHtml());
