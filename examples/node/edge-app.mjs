#!/usr/bin/env node
// A Node.js edge app: adapts a realm-tta model on a stream of samples from disk, one at a time,
// on the one adapt graph and the current onnxruntime-node, with no Python and no torch.
//
// It checks the artifacts (manifest, SHA-256 of every file), adapts on each sample of the
// stream folder in name order (one float32 .npy per sample, already preprocessed as the
// manifest says, e.g. written by a camera pipeline), prints the running top-1 (when the folder
// has labels.json) and the counters, and checkpoints the whole adaptation state every N
// samples in the SDK's own state file, written atomically. Started again, it resumes from the
// checkpoint at the sample where it stopped; the same file restores into RealmRuntime and
// RealmAdapter in Python, and theirs into this app. SPEC §3 is the graph's: the client
// (clients/js, realm-tta's JavaScript client, the browser page's too) only feeds it and
// keeps its state.
//
//   node edge-app.mjs --artifacts ../../artifacts/digits --stream ./stream --checkpoint-every 100

import { open, readFile, readdir, rename } from "node:fs/promises";
import path from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import * as ort from "onnxruntime-node";

import { AdaptClient, EPISODIC_NAME, LR_NAME, MANIFEST_NAME, parseNpy } from "../../clients/js/index.js";

const USAGE = `usage: node edge-app.mjs --artifacts DIR --stream DIR [options]
  --artifacts DIR         artifact directory written by realm export
  --stream DIR            one float32 .npy per sample (C, H, W), read in name order;
                          labels.json (file name -> class) is optional
  --state FILE            checkpoint to resume from and write (default: DIR/realm-state.npz)
  --checkpoint-every N    samples between checkpoints (default 100)
  --limit N               stop after N samples in this run
  --threads N             onnxruntime intra-op threads (default 1)
  --trusted-key FILE      a .pub key (realm keygen): load only artifacts it signed; repeatable
  --log FILE              one JSON line per sample (prediction, decision, reason, alpha, lambda)
  --set NAME=VALUE        change a setting of the graph (${MANIFEST_NAME}'s adapt.settings, e.g.
                          ${LR_NAME}=0.01, ${EPISODIC_NAME}=true); repeatable
  --quiet                 only the final summary`;

/** @param {string[]} argv */
function options(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      artifacts: { type: "string" },
      stream: { type: "string" },
      state: { type: "string" },
      "checkpoint-every": { type: "string", default: "100" },
      limit: { type: "string" },
      threads: { type: "string", default: "1" },
      log: { type: "string" },
      "trusted-key": { type: "string", multiple: true },
      set: { type: "string", multiple: true },
      quiet: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help || !values.artifacts || !values.stream) {
    console.error(USAGE);
    process.exit(values.help ? 0 : 2);
  }
  const count = (/** @type {string | undefined} */ v, /** @type {string} */ what) => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) {
      console.error(`--${what} must be a positive integer, got ${v}`);
      process.exit(2);
    }
    return n;
  };
  /** @type {Record<string, number|boolean>} */
  const settings = {};
  for (const item of values.set ?? []) {
    const at = item.indexOf("=");
    const value = item.slice(at + 1);
    if (at < 1 || value === "") {
      console.error(`--set takes NAME=VALUE (e.g. ${LR_NAME}=0.01), got ${item}`);
      process.exit(2);
    }
    settings[item.slice(0, at)] = value === "true" ? true : value === "false" ? false : Number(value);
  }
  return {
    settings,
    artifacts: values.artifacts,
    stream: values.stream,
    state: values.state ?? path.join(values.stream, "realm-state.npz"),
    every: /** @type {number} */ (count(values["checkpoint-every"], "checkpoint-every")),
    limit: count(values.limit, "limit"),
    threads: /** @type {number} */ (count(values.threads, "threads")),
    log: values.log,
    trustedKeys: values["trusted-key"] ?? null,
    quiet: values.quiet,
  };
}

/** @param {string} file @returns {Promise<Uint8Array | null>} the bytes, or null if absent */
async function readOrNull(file) {
  try {
    return new Uint8Array(await readFile(file));
  } catch (err) {
    if (/** @type {NodeJS.ErrnoException} */ (err).code === "ENOENT") return null;
    throw err;
  }
}

/**
 * Write a file so that a crash leaves the old one or the new one, never a torn one.
 * @param {string} file
 * @param {Uint8Array} bytes
 */
async function writeAtomic(file, bytes) {
  const tmp = `${file}.${process.pid}.tmp`;
  const handle = await open(tmp, "w");
  try {
    await handle.writeFile(bytes);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(tmp, file);
}

async function main() {
  const opts = options(process.argv.slice(2));
  const trustedKeys = opts.trustedKeys
    ? await Promise.all(opts.trustedKeys.map(async (f) => (await readFile(f, "ascii")).trim()))
    : null;
  const client = await AdaptClient.load(
    ort,
    (name) => readOrNull(path.join(opts.artifacts, name)),
    opts.artifacts,
    { threads: opts.threads, executionProviders: ["cpu"], trustedKeys, settings: opts.settings },
  );
  const saved = await readOrNull(opts.state);
  if (saved !== null) client.restoreState(saved);
  const files = (await readdir(opts.stream)).filter((f) => f.endsWith(".npy")).sort();
  const labelBytes = await readOrNull(path.join(opts.stream, "labels.json"));
  /** @type {Record<string, number> | null} */
  const labels = labelBytes ? JSON.parse(new TextDecoder().decode(labelBytes)) : null;
  const first = client.counters.samples; // resume where the checkpoint stopped
  const last = Math.min(files.length, opts.limit ? first + opts.limit : files.length);
  const log = opts.log ? await open(opts.log, "a") : null;
  const m = client.manifest;
  if (!opts.quiet) {
    console.log(
      `realm-tta edge app: ${m.model?.name ?? m.model?.class ?? "model"}, method ${m.config.method}, ` +
        `onnxruntime-node ${ort.env.versions.node}; ${saved ? `resumed at sample ${first}` : "from the exported model"}, ` +
        `samples ${first}..${last - 1} of ${files.length}; artifacts ${client.signature.note}`,
    );
  }
  let stop = false;
  process.on("SIGINT", () => (stop = true)); // finish the sample, checkpoint, exit
  let correct = 0;
  let seen = 0;
  let ms = 0;
  for (let i = first; i < last && !stop; i++) {
    const sample = parseNpy(new Uint8Array(await readFile(path.join(opts.stream, files[i]))), files[i]);
    if (sample.dtype !== "<f4") throw new Error(`${files[i]}: float32 samples only, got ${sample.dtype}`);
    const record = await client.adapt(/** @type {Float32Array} */ (sample.data));
    ms += record.ms;
    seen += 1;
    const label = labels?.[files[i]];
    if (label !== undefined && record.top1 === label) correct += 1;
    if (log) {
      const { logits, ...rest } = record;
      await log.write(JSON.stringify({ index: i, file: files[i], ...rest, logits: Array.from(logits) }) + "\n");
    }
    if ((i + 1) % opts.every === 0) {
      await writeAtomic(opts.state, await client.saveState());
      if (!opts.quiet) console.log(progress(i + 1, client, labels ? correct / seen : null, ms / seen));
    }
  }
  await writeAtomic(opts.state, await client.saveState());
  await log?.close();
  const top1 = labels && seen ? correct / seen : null;
  console.log(`done ${progress(client.counters.samples, client, top1, seen ? ms / seen : 0)}`);
  console.log(`state: ${opts.state}`);
}

/**
 * @param {number} done
 * @param {AdaptClient} client
 * @param {number | null} top1
 * @param {number} ms
 */
function progress(done, client, top1, ms) {
  const c = client.counters;
  const acc = top1 === null ? "" : `top-1 ${(100 * top1).toFixed(1)} % (this run), `;
  const al = client.alpha === null ? "" : `, α ${client.alpha.toFixed(4)}, λ ${client.lambda?.toFixed(4)}`;
  return (
    `[${done}] ${acc}updates ${c.updates}, skipped: diversity ${c.skipped_diversity}, entropy ` +
    `${c.skipped_entropy}, non-finite ${c.skipped_nonfinite}${al}; ${ms.toFixed(2)} ms/sample`
  );
}

main().catch((err) => {
  console.error(`edge-app: ${err instanceof Error ? err.message : err}`);
  process.exit(1);
});
