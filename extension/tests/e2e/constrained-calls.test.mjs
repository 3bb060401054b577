// Constrained tool calls on the browser's WebGPU (issue 17): the tiny random-weight test model,
// made to act by a prompt that ends with `<|tool_call>`, decodes in the offscreen document through
// the engine's task path (the call constraint of the agent's tools, sampling hot) and writes calls
// that the agent's own parser and validator accept, and that this file's own reading of Gemma 4's
// call syntax checks against the tools' schemas. Without the constraint the same model writes
// garbage. crates/cli/tests/integration/constrained_calls.rs proves the same natively.
//
// The probe (`constrainedCallProbe`, test builds only) renders the prompt without the tools'
// declarations: with them the tiny model's prompt is 3,462 tokens, which SwiftShader prefills in
// about 100 s; the constraint is the agent's grammar either way. Each token costs ~0.5 s here, so
// the seeds and limits are few and small (about 100 s in all).

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { resolve } from "node:path";
import { launch } from "../lib/browser.mjs";
import { serve } from "../lib/server.mjs";
import { clickLauncher, overlayHost, waitForEngine } from "../lib/overlay.mjs";

/** Seeds of the hot sampling; with this model they give read_page, press_key, and a call cut inside a string. */
const SEEDS = [1, 3, 5];
/** Tokens for the constrained call (a call with a string argument rarely closes within it) and the free run. */
const MAX_TOKENS = 48;
const FREE_TOKENS = 16;

const QUOTE = '<|"|>';

/**
 * Gemma 4's call syntax, read here independently of the agent's parser: `call:NAME{key:value,…}`
 * where a value is `<|"|>text<|"|>`, a number, true/false/null, `[…]` or `{…}`. Returns
 * `{ name, args }`, or throws on anything else.
 */
function readCall(text) {
  const match = /^<\|tool_call>call:([A-Za-z_][\w-]*)(\{[\s\S]*\})<tool_call\|>$/.exec(text);
  if (!match) throw new Error("not call:NAME{…} between the markers");
  const body = match[2];
  let i = 0;
  const value = () => {
    if (body.startsWith(QUOTE, i)) {
      const end = body.indexOf(QUOTE, i + QUOTE.length);
      if (end < 0) throw new Error("unclosed string");
      const s = body.slice(i + QUOTE.length, end);
      i = end + QUOTE.length;
      return s;
    }
    if (body[i] === "{" || body[i] === "[") {
      const object = body[i] === "{";
      const out = object ? {} : [];
      i++;
      while (body[i] !== (object ? "}" : "]")) {
        if (object) {
          const key = /^[A-Za-z_]\w*/.exec(body.slice(i));
          if (!key || body[i + key[0].length] !== ":") throw new Error(`expected key: at ${i}`);
          i += key[0].length + 1;
          if (Object.hasOwn(out, key[0])) throw new Error(`repeated key ${key[0]}`);
          out[key[0]] = value();
        } else {
          out.push(value());
        }
        if (body[i] === ",") i++;
        else if (body[i] !== (object ? "}" : "]")) throw new Error(`expected , at ${i}`);
      }
      i++;
      return out;
    }
    const scalar = /^(true|false|null|-?\d+(\.\d+)?([eE][+-]?\d+)?)/.exec(body.slice(i));
    if (!scalar) throw new Error(`unreadable value at ${i}`);
    i += scalar[0].length;
    return JSON.parse(scalar[0]);
  };
  const args = value();
  if (i !== body.length) throw new Error("text after the arguments");
  return { name: match[1], args };
}

/** Problems of `value` against the JSON schema `schema` (the keywords the agent's tools use). */
function schemaProblems(value, schema, path = "arguments") {
  const types = {
    string: (v) => typeof v === "string",
    integer: (v) => Number.isInteger(v),
    number: (v) => typeof v === "number",
    boolean: (v) => typeof v === "boolean",
    array: Array.isArray,
    object: (v) => v !== null && typeof v === "object" && !Array.isArray(v),
  };
  if (schema.type && !types[schema.type]?.(value)) return [`${path} is not a ${schema.type}: ${JSON.stringify(value)}`];
  const problems = [];
  if (schema.enum && !schema.enum.includes(value)) problems.push(`${path} is not one of ${schema.enum}`);
  if (schema.minimum !== undefined && value < schema.minimum) problems.push(`${path} < ${schema.minimum}`);
  if (schema.maximum !== undefined && value > schema.maximum) problems.push(`${path} > ${schema.maximum}`);
  if (Array.isArray(value) && schema.items) value.forEach((v, n) => problems.push(...schemaProblems(v, schema.items, `${path}[${n}]`)));
  if (types.object(value) && (schema.type === "object" || schema.properties)) {
    const properties = schema.properties ?? {};
    for (const key of schema.required ?? []) if (!Object.hasOwn(value, key)) problems.push(`${path}.${key} is missing`);
    for (const [key, v] of Object.entries(value)) {
      if (!Object.hasOwn(properties, key)) problems.push(`${path}.${key} is not a parameter`);
      else problems.push(...schemaProblems(v, properties[key], `${path}.${key}`));
    }
  }
  return problems;
}

/** Why `text` is not a call to one of `tools` with valid arguments, by this file's reading; null if it is one. */
function callProblem(text, tools) {
  let call;
  try {
    call = readCall(text);
  } catch (error) {
    return error.message;
  }
  const tool = tools.find((t) => t.name === call.name);
  if (!tool) return `${call.name} is not one of the agent's tools`;
  const problems = schemaProblems(call.args, tool.parameters);
  return problems.length ? problems.join("; ") : null;
}

let server;
before(async () => {
  server = await serve(resolve(import.meta.dirname, "../pages"));
});
after(() => server?.close());

test("constrained calls from the tiny model parse and validate in the browser; free ones do not", { timeout: 600_000 }, async () => {
  const chrome = await launch();
  try {
    const page = await chrome.context.newPage();
    await page.goto(`${server.url}/smoke.html`);
    await overlayHost(page);
    await clickLauncher(page);
    assert.equal(await waitForEngine(page, ["ready", "failed"]), "ready");

    let closed = 0;
    for (const seed of SEEDS) {
      const started = Date.now();
      const probe = JSON.parse(
        await chrome.console.evaluate(
          "/offscreen.html",
          `import(chrome.runtime.getURL("wasm/hearth_offscreen.js")).then((engine) => engine.constrainedCallProbe(${seed}, ${MAX_TOKENS}, ${FREE_TOKENS}, false))`,
          300_000,
        ),
      );
      const { constrained: c, free: f, tools } = probe;
      const ms = (run) => `${run.tokens} tokens, prefill ${Math.round(run.prefill_ms)} ms, decode ${Math.round(run.decode_ms)} ms`;
      console.log(`seed ${seed} (${((Date.now() - started) / 1e3).toFixed(1)} s, prompt ${probe.prompt_tokens} tokens)`);
      console.log(`  constrained (${ms(c)}): ${JSON.stringify(c.text)} -> ${JSON.stringify(c.verdict)}`);
      console.log(`  free (${ms(f)}): ${JSON.stringify(f.text)} -> ${JSON.stringify(f.verdict)}`);
      assert.ok(tools.length > 5, "the probe lists the agent's tools");

      if (c.closed) {
        closed++;
        // The agent's own parser and validator accept it...
        assert.ok(c.verdict.valid, `seed ${seed}: the agent rejects ${c.text}: ${c.verdict.problem}`);
        assert.equal(c.in_call, false, "the constraint saw the call close");
        // ...and so does a reading of the syntax and the tools' schemas written here.
        assert.equal(callProblem(c.text, tools), null, `seed ${seed}: ${c.text}`);
        const call = readCall(c.text);
        assert.equal(call.name, c.verdict.name);
        assert.deepEqual(call.args, c.verdict.arguments);
      } else {
        // Cut by the token limit: still inside the grammar, a call to a real tool so far.
        assert.equal(c.tokens, MAX_TOKENS, `seed ${seed}: ended before the limit without closing: ${c.text}`);
        assert.equal(c.in_call, true, `seed ${seed}: the call left the grammar: ${c.text}`);
        const name = /^<\|tool_call>call:([A-Za-z_]\w*)\{/.exec(c.text)?.[1];
        assert.ok(tools.some((t) => t.name === name), `seed ${seed}: ${c.text}`);
      }

      // The same model and seed, unconstrained: nothing a tool would run.
      assert.equal(f.verdict.valid, false, `seed ${seed}: the free run wrote a valid call: ${f.text}`);
      assert.notEqual(callProblem(f.text, tools), null, `seed ${seed}: ${f.text}`);
    }
    assert.ok(closed >= 1, `no constrained call closed within ${MAX_TOKENS} tokens`);
    assert.deepEqual(chrome.console.errors, []);
  } finally {
    await chrome.close();
  }
});
