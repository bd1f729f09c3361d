// @ts-check
// A page that adapts on the site's stream with the one adapt graph (realm-adapt.js) and leaves
// what it did in window.realmRun for drive.mjs: ?ep=wasm|webgpu&limit=N&gpu-state=1.

import { AdaptClient } from "./realm-adapt.js";

const params = new URLSearchParams(location.search);
const EP = params.get("ep") ?? "wasm";
const LIMIT = Number(params.get("limit") ?? "100");
/** @type {any} */
const run = { done: false, error: null, log: [], backend: null };
/** @type {any} */ (globalThis).realmRun = run;
const status = (/** @type {string} */ text) => {
  /** @type {HTMLElement} */ (document.getElementById("status")).textContent = text;
};

async function main() {
  /** @type {any} */
  const ort = await import(new URL("ort/ort.webgpu.min.mjs", location.href).href);
  ort.env.wasm.wasmPaths = new URL("ort/", location.href).href;
  ort.env.wasm.numThreads = 1;
  if (EP === "webgpu") {
    const gpu = /** @type {any} */ (navigator).gpu;
    const adapter = gpu ? await gpu.requestAdapter().catch(() => null) : null;
    if (!adapter) throw new Error("ep=webgpu asked for, but the browser offers no WebGPU adapter");
  }
  /** @param {string} name */
  const read = async (name) => {
    const response = await fetch(`artifacts/${name}`);
    return response.ok ? new Uint8Array(await response.arrayBuffer()) : null;
  };
  const client = await AdaptClient.load(ort, read, "artifacts", {
    executionProviders: [EP],
    stateOnGpu: params.get("gpu-state") === "1",
  });
  run.backend = { ep: EP, ort: ort.env.versions?.web ?? "?" };
  const meta = await (await fetch("stream/stream.json")).json();
  const x = new Float32Array(await (await fetch("stream/stream.f32")).arrayBuffer());
  const size = meta.shape.reduce((/** @type {number} */ a, /** @type {number} */ b) => a * b, 1);
  const count = Math.min(LIMIT, x.length / size);
  for (let i = 0; i < count; i++) {
    const sample = x.slice(i * size, (i + 1) * size);
    const start = performance.now();
    const step = await client.adapt(sample);
    const ms = performance.now() - start; // drive.mjs prints the per-sample latency
    run.log.push({ ...step, logits: Array.from(step.logits), ms });
    status(`${i + 1} / ${count}`);
  }
  run.counters = await client.counters();
  run.params = Array.from(await client.read("realm.params"));
}

main()
  .catch((err) => {
    run.error = String(err instanceof Error ? err.message : err);
  })
  .finally(() => {
    run.done = true;
    status(run.error ? `error: ${run.error}` : "done");
  });
