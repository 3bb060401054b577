#!/usr/bin/env node
// Pins a model manifest to a downloaded copy of the model: fills in each file's size and SHA-256
// from the folder and prints the manifest (schema: models/README.md) to stdout.
//
//   node models/pin.mjs <model-dir> <manifest.json> [--revision <commit>] > <manifest.json>.new
//   node models/pin.mjs <model-dir> <manifest.json> --content-revision
//
// The files listed are the manifest's own (`files[].path`); when it lists none, every regular file
// of the folder except dotfiles and README.md. `--revision` sets the pinned commit (the 40-hex
// commit of the Hugging Face repository the folder was downloaded from); `--content-revision` sets
// it to a hash of the file list instead, for models that are not published anywhere (tiny-chat).

import { createHash } from "node:crypto";
import { createReadStream, readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative, sep } from "node:path";

const usage = "usage: node models/pin.mjs <model-dir> <manifest.json> [--revision <commit> | --content-revision]";

function fail(message) {
  process.stderr.write(`pin.mjs: ${message}\n`);
  process.exit(1);
}

/** Every regular file under `dir` (paths relative to it, with /), dotfiles and READMEs left out. */
function listFiles(dir, root = dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name.startsWith(".") || /^readme(\.md)?$/i.test(entry.name)) return [];
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return listFiles(path, root);
    return entry.isFile() ? [relative(root, path).split(sep).join("/")] : [];
  });
}

function sha256Of(path) {
  return new Promise((resolve, reject) => {
    const hash = createHash("sha256");
    createReadStream(path)
      .on("data", (chunk) => hash.update(chunk))
      .on("error", reject)
      .on("end", () => resolve(hash.digest("hex")));
  });
}

/** The revision of an unpublished model: a hash of its file list, 40 hex digits like a commit. */
export function contentRevision(files) {
  const listing = files.map((f) => `${f.path} ${f.size} ${f.sha256}\n`).join("");
  return createHash("sha256").update(listing).digest("hex").slice(0, 40);
}

/** The manifest `manifest` pinned to the files in `dir`. */
export async function pin(dir, manifest, { revision, contentRevision: byContent = false } = {}) {
  const paths = manifest.files?.length ? manifest.files.map((f) => f.path) : listFiles(dir).sort();
  const files = [];
  for (const path of paths) {
    const full = join(dir, path);
    let size;
    try {
      size = statSync(full).size;
    } catch {
      throw new Error(`${path} is listed in the manifest but not in ${dir}`);
    }
    files.push({ path, size, sha256: await sha256Of(full) });
  }
  const pinnedRevision = byContent ? contentRevision(files) : (revision ?? manifest.revision);
  if (!pinnedRevision) throw new Error("the manifest has no revision: pass --revision <commit> (or --content-revision)");
  return { ...manifest, revision: pinnedRevision, files };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const [dir, manifestPath] = args.filter((a, i) => !a.startsWith("--") && args[i - 1] !== "--revision");
  if (!dir || !manifestPath) fail(usage);
  const revisionAt = args.indexOf("--revision");
  const revision = revisionAt >= 0 ? args[revisionAt + 1] : undefined;
  if (revisionAt >= 0 && !/^[0-9a-f]{40}$/.test(revision ?? "")) fail("--revision takes a 40-hex commit id");
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(manifestPath, "utf8"));
  } catch (error) {
    fail(`cannot read ${manifestPath}: ${error.message}`);
  }
  try {
    const pinned = await pin(dir, manifest, { revision, contentRevision: args.includes("--content-revision") });
    process.stdout.write(`${JSON.stringify(pinned, null, 2)}\n`);
  } catch (error) {
    fail(error.message);
  }
}
