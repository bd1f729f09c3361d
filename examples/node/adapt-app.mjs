#!/usr/bin/env node
// The one adapt graph in Node.js: a client that knows only the manifest's "adapt" section
// (../web/realm-adapt.js). Adapts on each sample of a stream folder (one float32 .npy per
// sample, in name order) and writes one JSON line per sample; the counters at the end.
//
//   node adapt-app.mjs --artifacts ../../artifacts/digits --stream ./stream --log steps.jsonl

import { readFile, readdir, writeFile } from "node:fs/promises";
import path from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import * as ort from "onnxruntime-node";

import { AdaptClient } from "../web/realm-adapt.js";
import { parseNpy } from "../web/state-file.js";

const { values } = parseArgs({
  options: {
    artifacts: { type: "string" },
    stream: { type: "string" },
    log: { type: "string" },
    threads: { type: "string", default: "1" },
  },
});
if (!values.artifacts || !values.stream) {
  console.error("usage: node adapt-app.mjs --artifacts DIR --stream DIR [--log FILE] [--threads N]");
  process.exit(2);
}
const artifacts = values.artifacts;
/** @param {string} name */
const read = async (name) => {
  try {
    return new Uint8Array(await readFile(path.join(artifacts, name)));
  } catch (err) {
    if (/** @type {any} */ (err).code === "ENOENT") return null;
    throw err;
  }
};
try {
  const client = await AdaptClient.load(ort, read, artifacts, { threads: Number(values.threads) });
  const names = (await readdir(values.stream)).filter((n) => n.endsWith(".npy")).sort();
  const lines = [];
  for (const name of names) {
    const sample = parseNpy(new Uint8Array(await readFile(path.join(values.stream, name))), name);
    const step = await client.adapt(/** @type {Float32Array} */ (sample.data));
    const params = await client.read("realm.params");
    lines.push(JSON.stringify({ ...step, logits: Array.from(step.logits), params: Array.from(params) }));
  }
  if (values.log) await writeFile(values.log, lines.join("\n") + "\n");
  console.log(JSON.stringify({ samples: names.length, counters: await client.counters() }));
} catch (err) {
  console.error(`adapt-app: ${err instanceof Error ? err.message : err}`);
  process.exit(1);
}
