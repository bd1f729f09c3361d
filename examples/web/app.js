// @ts-check
/**
 * The demo page: streams a shifted test set (Fashion-MNIST-C, or the digits) through the one
 * adapt graph on onnxruntime-web (AdaptClient: the graph decides, steps and guards; the page
 * only feeds it), shows what adaptation does beside the same model not adapting, keeps the
 * state in IndexedDB. site.json (build_site.py) lists the methods, from the method registry,
 * and the artifacts built for each; picking one loads those. URL parameters:
 * artifacts=<dir> (default "artifacts"), stream=<dir> (default "stream"), auto=1 (run the
 * whole stream at once), limit=<n>, persist=0 (neither read nor write IndexedDB), fresh=1
 * (ignore a stored state once), ep=auto|wasm|webgpu (default auto: WebGPU where the browser
 * offers an adapter), threads=<n> (WASM threads; default: up to 4 where the page is
 * cross-origin isolated, else 1). On WebGPU the parameter vectors stay in GPU buffers
 * between samples; α, λ and the drift are read back every tenth sample.
 * `window.realmRun` exposes the per-step log for the test driver.
 */

import { ALPHA_NAME, AdaptClient, LAMBDA_NAME, LR_NAME, MANIFEST_NAME, PARAMS_NAME, SIGNATURE_NAME } from "realm-tta-client";
import { drawSample, plot } from "./draw.js";
import { digitsInput } from "./preprocess.js";

// onnxruntime-web's builds, copied into ort/ by build_site.py and imported by URL so that the
// page needs no bundler: the WebGPU build where WebGPU runs, else the plain WASM build, whose
// smaller WebAssembly module the browser compiles in less memory (docs/BENCHMARKS.md).
const ORT_MODULES = { webgpu: "ort/ort.webgpu.min.mjs", wasm: "ort/ort.wasm.min.mjs" };
const params = new URLSearchParams(location.search);
const ARTIFACTS = params.get("artifacts") ?? "artifacts";
const STREAM = params.get("stream") ?? "stream";
const AUTO = params.get("auto") === "1";
const PERSIST = params.get("persist") !== "0";
const FRESH = params.get("fresh") === "1";

const EP = params.get("ep") ?? "auto";
const EVERY = 10; // samples between redraws, saves and (state on the GPU) read-backs

/**
 * What the page did, for the test driver: ticks are each plot's axis labels, series the
 * names of the lines each plot drew, methods the method picker's choices.
 * @type {{ready: boolean, done: boolean, error: string | null, backend: any, signature: any, restored: any, log: any[], images: any[], summary: any,
 *   ticks: Record<string, string[]>, series: Record<string, string[]>, model: string | null, methods: {name: string, enabled: boolean, selected: boolean}[]}}
 */
const run = { ready: false, done: false, error: null, backend: null, signature: null, restored: null, log: [], images: [], summary: null, ticks: {}, series: {}, model: null, methods: [] };
/** @type {any} */ (globalThis).realmRun = run;

/**
 * @param {string[]} items NAME=VALUE strings
 * @returns {Record<string, number|boolean>}
 */
function readSettings(items) {
  /** @type {Record<string, number|boolean>} */
  const settings = {};
  for (const item of items) {
    const at = item.indexOf("=");
    const value = item.slice(at + 1);
    if (at < 1 || value === "") throw new Error(`set= takes NAME=VALUE (e.g. ${LR_NAME}=0.01), got ${JSON.stringify(item)}`);
    settings[item.slice(0, at)] = value === "true" ? true : value === "false" ? false : Number(value);
  }
  return settings;
}

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * Plot on the canvas ``id`` and keep what it drew where the tests read it.
 * @param {string} id
 * @param {Parameters<typeof plot>[1]} series
 * @param {Parameters<typeof plot>[2]} range
 * @param {number[]} [marks]
 * @param {number} [from]
 */
function figure(id, series, range, marks = [], from = 0) {
  const drawn = plot(/** @type {HTMLCanvasElement} */ ($(id)), series, range, marks, from);
  run.ticks[id] = drawn.ticks;
  run.series[id] = drawn.series;
}

/** @param {string} text @param {boolean} [error] */
function status(text, error = false) {
  $("status").textContent = text;
  $("status").classList.toggle("failed", error);
}

// ------------------------------------------------------------------ persistence (IndexedDB)

/** @returns {Promise<IDBDatabase>} */
function openDb() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open("realm-tta", 1);
    req.onupgradeneeded = () => req.result.createObjectStore("states");
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** @param {string} key @param {any} [value] @returns {Promise<any>} */
async function store(key, value) {
  const db = await openDb();
  return new Promise((resolve, reject) => {
    const tx = db.transaction("states", value === undefined ? "readonly" : "readwrite");
    const req = value === undefined ? tx.objectStore("states").get(key) : tx.objectStore("states").put(value, key);
    // A put counts only once the transaction commits: a reload never sees half a state.
    tx.oncomplete = () => resolve(req.result);
    tx.onerror = () => reject(tx.error);
  });
}

// ------------------------------------------------------------------ plots

// ------------------------------------------------------------------ main

/**
 * @typedef {object} Backend what this page runs on, chosen at start
 * @property {"webgpu" | "wasm"} ep the execution provider of the graphs
 * @property {number} threads WASM threads (ONNX Runtime's own CPU kernels; WebGPU's fallback)
 * @property {boolean} isolated the page is cross-origin isolated (WASM threads need it)
 * @property {string | null} adapter the WebGPU adapter, as the browser describes it
 * @property {string} why why this provider (for the page)
 * @property {string} ort onnxruntime-web's version
 */

/**
 * WebGPU where the browser offers an adapter (unless ep=wasm), WASM otherwise; WASM threads
 * where the page is cross-origin isolated (SharedArrayBuffer needs COOP/COEP).
 * @returns {Promise<Omit<Backend, "ort">>}
 */
async function chooseBackend() {
  if (!["auto", "wasm", "webgpu"].includes(EP)) throw new Error(`ep must be auto, wasm or webgpu, got ${JSON.stringify(EP)}`);
  const isolated = globalThis.crossOriginIsolated === true;
  const asked = params.get("threads");
  const threads = asked !== null ? Number(asked) : isolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
  if (!Number.isInteger(threads) || threads < 1) throw new Error(`threads must be a positive integer, got ${JSON.stringify(asked)}`);
  if (threads > 1 && !isolated) {
    throw new Error(`threads=${threads} needs a cross-origin isolated page (COOP/COEP headers); this one is not`);
  }
  /** @type {any} */
  const gpu = /** @type {any} */ (navigator).gpu;
  let adapter = null;
  let why = "ep=wasm asked for";
  if (EP !== "wasm") {
    if (!gpu) why = "no WebGPU in this browser (navigator.gpu missing)";
    else {
      adapter = await gpu.requestAdapter().catch(() => null);
      why = adapter ? "the browser offers a WebGPU adapter" : "the browser offers no WebGPU adapter";
    }
    if (EP === "webgpu" && !adapter) throw new Error(`ep=webgpu asked for, but ${why}`);
  }
  const info = adapter?.info;
  const described = info ? [info.vendor, info.architecture, info.description].filter(Boolean).join(" ") || "unnamed" : null;
  return { ep: adapter ? "webgpu" : "wasm", threads, isolated, adapter: described, why };
}

/** @param {Backend} b @returns {string} the execution provider line on the page */
function describeBackend(b) {
  const wasm = `WASM ×${b.threads}${b.isolated ? "" : " (page not cross-origin isolated)"}`;
  const ep = b.ep === "webgpu" ? `WebGPU: ${b.adapter} (${wasm} for the ops WebGPU lacks)` : `${wasm} (${b.why})`;
  return `${ep} · onnxruntime-web ${b.ort}`;
}

/**
 * The method picker: every method of the registry (site.json), those built selectable; picking
 * one loads its artifacts (the same stream, a state of its own).
 * @param {{name: string, paper: string, artifacts: string | null}[]} methods
 * @param {string} current the loaded artifacts' method
 */
function showMethods(methods, current) {
  const select = /** @type {HTMLSelectElement} */ ($("method"));
  select.replaceChildren(...methods.map((m) => {
    const option = document.createElement("option");
    option.value = m.name;
    option.textContent = `${m.name} (${m.paper})${m.artifacts === null ? " · not built" : ""}`;
    option.disabled = m.artifacts === null;
    option.selected = m.name === current;
    return option;
  }));
  select.disabled = false;
  run.methods = methods.map((m) => ({ name: m.name, enabled: m.artifacts !== null, selected: m.name === current }));
  select.onchange = () => {
    const chosen = methods.find((m) => m.name === select.value);
    if (!chosen?.artifacts) return;
    const url = new URL(location.href);
    url.searchParams.set("artifacts", chosen.artifacts);
    location.href = url.href;
  };
}

async function main() {
  status("loading onnxruntime-web…");
  const chosen = await chooseBackend();
  const module = ORT_MODULES[chosen.ep];
  /** @type {any} */
  const ort = await import(new URL(module, location.href).href).catch((err) => {
    throw new Error(`onnxruntime-web did not load from ${module} (build the site with build_site.py): ${err}`);
  });
  ort.env.wasm.numThreads = chosen.threads;
  ort.env.wasm.wasmPaths = new URL("ort/", location.href).href;
  /** @type {Backend} */
  const backend = { ...chosen, ort: ort.env.versions?.web ?? "?" };
  run.backend = backend;
  $("backend").textContent = describeBackend(backend);
  status(`checking ${ARTIFACTS}/${MANIFEST_NAME} and every file's checksum…`);
  // What build_site.py built: the trusted keys, and every method of the registry with its
  // artifacts (null: not built) and whether they are signed.
  /** @type {{trustedKeys: string[] | null, methods: {name: string, paper: string, artifacts: string | null, signed: boolean}[]}} */
  const site = await (await fetch("site.json")).json();
  const here = site.methods.find((m) => m.artifacts === ARTIFACTS);
  /** @param {string} name */
  const read = async (name) => {
    // No request for a signature the build knows is not there (a 404 in the console).
    if (name === SIGNATURE_NAME && here && !here.signed && site.trustedKeys === null) return null;
    const response = await fetch(`${ARTIFACTS}/${name}`);
    if (response.status === 404) return null;
    if (!response.ok) throw new Error(`${ARTIFACTS}/${name}: HTTP ${response.status}`);
    return new Uint8Array(await response.arrayBuffer());
  };
  // The app's trusted signing keys (build_site.py --trusted-key): none, no signature required.
  const trustedKeys = site.trustedKeys;
  const onGpu = backend.ep === "webgpu";
  const client = await AdaptClient.load(ort, read, ARTIFACTS, {
    trustedKeys,
    executionProviders: onGpu ? ["webgpu", "wasm"] : ["wasm"],
    stateOnGpu: onGpu,
    // set=NAME=VALUE (repeatable): a setting changed without re-exporting, as the Node app's --set
    settings: readSettings(params.getAll("set")),
  });
  run.signature = client.signature;
  $("signature").textContent = client.signature.note;
  const method = client.manifest.config.method;
  run.model = client.manifest.model?.name ?? null;
  showMethods(site.methods, method);
  const meta = await (await fetch(`${STREAM}/stream.json`)).json();
  const data = new Float32Array(await (await fetch(`${STREAM}/stream.f32`)).arrayBuffer());
  const size = meta.shape.reduce((/** @type {number} */ a, /** @type {number} */ b) => a * b, 1);
  const total = Math.min(meta.labels.length, Number(params.get("limit") ?? meta.labels.length));
  const key = `${client.artifactsId}:${meta.id}`;
  const severity = meta.severity === null ? "" : ` (severity ${meta.severity})`;
  $("stream-name").textContent = `${meta.corruption}${severity}, ${total} samples`;
  $("task").textContent = meta.task ? `The model: ${meta.task}.` : "";
  $("note").textContent = meta.note ?? "";
  $("note").hidden = !meta.note;
  // No-adapt: the exported model's own predictions on the stream (build_site.py), per sample.
  /** @type {number[] | null} */
  const sourceTop1 = meta.source_top1 ?? null;

  /**
   * What the page plots, kept with the state so that a reload draws the same.
   * @typedef {{pos: number, correct: number, acc: number[], sourceCorrect: number, sourceAcc: number[],
   *   alpha: number[], lambda: number[], ms: number[], rate: number[], entropy: number[], drift: number[],
   *   resets: number[]}} View
   * @returns {View}
   */
  const emptyView = () => ({ pos: 0, correct: 0, acc: [], sourceCorrect: 0, sourceAcc: [], alpha: [], lambda: [], ms: [], rate: [], entropy: [], drift: [], resets: [] });
  let view = emptyView();
  if (PERSIST && !FRESH) {
    const saved = await store(key);
    if (saved) {
      client.restoreState(saved.state);
      view = { ...emptyView(), ...saved.view }; // a view saved before the watch plots had none
      if (sourceTop1 && view.sourceAcc.length !== view.pos) { // saved before no-adapt was drawn
        view.sourceCorrect = 0;
        view.sourceAcc = Array.from({ length: view.pos }, (_, i) => {
          view.sourceCorrect += sourceTop1[i] === meta.labels[i] ? 1 : 0;
          return (100 * view.sourceCorrect) / (i + 1);
        });
      }
      run.restored = { pos: view.pos, counters: { ...client.counters } };
    }
  }

  const resetCount = () => client.counters.resets_recovery + client.counters.resets_collapse;
  let lastResets = resetCount();
  const refresh = () => {
    $("sample-count").textContent = String(view.pos);
    $("accuracy").textContent = view.pos ? `${((100 * view.correct) / view.pos).toFixed(1)} %` : "–";
    const sourceShown = view.sourceAcc.length === view.pos && view.pos > 0;
    $("source-accuracy").textContent = sourceShown ? `${view.sourceAcc[view.pos - 1].toFixed(1)} %` : "–";
    $("update-count").textContent = String(client.counters.updates);
    const last = (/** @type {number[]} */ values) => (values.length ? values[values.length - 1].toFixed(4) : "–");
    $("alpha-value").textContent = last(view.alpha);
    $("lambda-value").textContent = last(view.lambda);
    const recent = view.ms.slice(-50).sort((a, b) => a - b);
    $("latency").textContent = recent.length ? recent[Math.floor(recent.length / 2)].toFixed(2) : "–";
    const w = client.watch;
    const c = client.counters;
    $("update-rate").textContent = w.updateRate === null ? "–" : w.updateRate.toFixed(3);
    $("entropy-ema").textContent = w.entropyEma === null ? "–" : `${w.entropyEma.toFixed(3)} nats`;
    $("drift").textContent = view.drift.length ? view.drift[view.drift.length - 1].toExponential(2) : "–";
    $("interventions").textContent = `${c.resets_recovery + c.resets_collapse} · ${c.drift_clips}`;
    // Fitted past the first samples, whose running accuracy swings across the whole scale.
    figure("plot-accuracy",
      [{ values: view.sourceAcc, color: "#8a94a6", label: "no-adapt" }, { values: view.acc, color: "#2a6fdb", label: method }],
      [0, 100],
      [],
      Math.min(50, Math.floor(view.acc.length / 5)),
    );
    figure("plot-alpha", [{ values: view.alpha, color: "#e8772e" }], null);
    figure("plot-lambda", [{ values: view.lambda, color: "#2a6fdb" }], null);
    figure("plot-watch",
      [{ values: view.rate, color: "#2a6fdb", label: "update rate" }, { values: view.entropy, color: "#e8772e", label: "entropy EMA / ln C" }],
      [0, 1],
      view.resets,
    );
    figure("plot-drift", [{ values: view.drift, color: "#4a9a4a" }], null, view.resets);
  };
  const save = async () => { if (PERSIST) await store(key, { state: await client.saveState(), view }); };
  /** α, λ and the drift where the parameters are on the GPU: downloaded, then plotted. */
  const readBack = async () => {
    const host = (await client.hostState())[PARAMS_NAME];
    for (const [name, values] of [[ALPHA_NAME, view.alpha], [LAMBDA_NAME, view.lambda]]) {
      const slot = client.layout.find((s) => s.name === name);
      if (slot) /** @type {number[]} */ (values).push(host[slot.offset]);
    }
    view.drift.push(await client.drift());
  };

  /** One sample of the stream: predict, adapt, record. */
  const step = async () => {
    const i = view.pos;
    const x = data.subarray(i * size, (i + 1) * size);
    const r = await client.adapt(new Float32Array(x));
    const label = meta.labels[i];
    view.pos += 1;
    view.correct += r.top1 === label ? 1 : 0;
    view.acc.push((100 * view.correct) / view.pos);
    if (sourceTop1) {
      view.sourceCorrect += sourceTop1[i] === label ? 1 : 0;
      view.sourceAcc.push((100 * view.sourceCorrect) / view.pos);
    }
    if (r.alpha !== null) view.alpha.push(r.alpha);
    if (r.lambda !== null) view.lambda.push(r.lambda);
    view.ms.push(r.ms);
    const w = client.watch;
    const resets = resetCount();
    if (resets > lastResets) view.resets.push(i);
    lastResets = resets;
    view.rate.push(w.updateRate ?? 0);
    view.entropy.push(w.entropyEma === null ? 0 : w.entropyEma / Math.log(r.logits.length));
    if (!onGpu) view.drift.push(await client.drift());
    else if (view.pos % EVERY === 0) await readBack();
    run.log.push({ index: i, top1: r.top1, label, selected: r.selected, updated: r.updated, reason: r.reason, alpha: r.alpha, lambda: r.lambda, ms: r.ms, logits: Array.from(r.logits) });
    drawSample(/** @type {HTMLCanvasElement} */ ($("sample")), x, meta.prep);
    $("sample-caption").textContent = `#${i}: predicted ${r.top1}, label ${label} · ${r.reason}`;
  };

  let running = false;
  const runStream = async () => {
    running = true;
    $("run").textContent = "Pause";
    while (running && view.pos < total) {
      await step();
      if (view.pos % EVERY === 0 || view.pos === total) { refresh(); await save(); await new Promise((r) => setTimeout(r, 0)); }
    }
    running = false;
    $("run").textContent = view.pos < total ? "Run stream" : "Stream done";
    refresh();
    await save();
  };

  // The page prepares a user's picture as the digits task does, for the digits model only.
  const pictures = meta.prep.native !== undefined;
  const buttons = ["run", "step", "reset", "download", "restore", ...(pictures ? ["image", "camera"] : [])];
  buttons.forEach((id) => /** @type {HTMLButtonElement} */ ($(id)).removeAttribute("disabled"));
  for (const id of ["image", "camera"]) {
    $(id).parentElement?.classList.toggle("off", !pictures);
    if (!pictures) /** @type {HTMLElement} */ ($(id).parentElement).title = "pictures of your own: the digits model only";
  }
  $("run").onclick = () => { if (running) running = false; else runStream().catch(fail); };
  $("step").onclick = () => { if (!running && view.pos < total) step().then(() => { refresh(); return save(); }).catch(fail); };
  $("reset").onclick = async () => {
    running = false;
    client.reset();
    lastResets = resetCount();
    view = emptyView();
    refresh();
    await save();
    status("reset to the exported model");
  };
  $("download").onclick = async () => {
    // The SDK's state file: RealmRuntime.restore, the SDK and the Node app read it as it is.
    const blob = new Blob([/** @type {Uint8Array<ArrayBuffer>} */ (await client.saveState())], { type: "application/octet-stream" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = "realm-state.npz";
    a.click();
  };
  /** @type {HTMLInputElement} */ ($("restore")).onchange = async (ev) => {
    const file = /** @type {HTMLInputElement} */ (ev.target).files?.[0];
    if (!file) return;
    try {
      client.restoreState(new Uint8Array(await file.arrayBuffer()));
      lastResets = resetCount();
      refresh();
      await save();
      status(`restored ${file.name}: ${client.counters.samples} samples, ${client.counters.updates} updates`);
    } catch (err) { status(`could not restore ${file.name}: ${err}`, true); }
  };
  /** A picture from the file picker, or from the camera where the browser offers one. */
  const ownImage = async (/** @type {Event} */ ev) => {
    const file = /** @type {HTMLInputElement} */ (ev.target).files?.[0];
    if (!file) return;
    if (meta.prep.native === undefined) {
      throw new Error(`${file.name}: the page prepares pictures for the digits model only; this model takes (${meta.shape.join(", ")}) samples from a stream folder`);
    }
    const bitmap = await createImageBitmap(file);
    const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
    const ctx = /** @type {OffscreenCanvasRenderingContext2D} */ (canvas.getContext("2d"));
    ctx.drawImage(bitmap, 0, 0);
    const pixels = ctx.getImageData(0, 0, bitmap.width, bitmap.height).data;
    const { input } = digitsInput(pixels, bitmap.height, bitmap.width, meta.prep);
    const r = await client.adapt(input);
    drawSample(/** @type {HTMLCanvasElement} */ ($("sample")), input, meta.prep);
    $("sample-caption").textContent = `${file.name}: predicted ${r.top1} · ${r.reason}`;
    run.images.push({ name: file.name, top1: r.top1, reason: r.reason, logits: Array.from(r.logits), input: Array.from(input) });
    refresh();
    await save();
  };
  for (const id of ["image", "camera"]) {
    /** @type {HTMLInputElement} */ ($(id)).onchange = (ev) => { ownImage(ev).catch(fail); };
  }

  refresh();
  /** @type {any} */ (globalThis).realmClient = client; // for the test driver and the console
  run.ready = true;
  const restoredNote = run.restored ? ` (restored: ${run.restored.pos} samples seen)` : "";
  status(`ready: ${client.manifest.model?.name ?? "model"}, ${client.manifest.config.method} (${client.manifest.config.preset_name}), ${client.source.length} adapted values${restoredNote}`);
  if (AUTO) {
    await runStream();
    run.summary = {
      counters: { ...client.counters },
      accuracy: view.pos ? (100 * view.correct) / view.pos : null,
      sourceAccuracy: view.sourceAcc.length ? view.sourceAcc[view.sourceAcc.length - 1] : null,
      ema: client.ema ? Array.from(client.ema) : null,
      state: Array.from(await client.saveState()), // the SDK's state file, for RealmRuntime.restore
      backend,
    };
    const versus = view.sourceAcc.length ? ` (no-adapt ${view.sourceAcc[view.sourceAcc.length - 1].toFixed(1)} %)` : "";
    status(`done: ${view.pos} samples, ${client.counters.updates} updates, running accuracy ${((100 * view.correct) / view.pos).toFixed(1)} %${versus}`);
  }
  run.done = true;
}

/** @param {unknown} err */
function fail(err) {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  run.error = message;
  run.done = true;
  status(message, true);
  console.error(err);
}

main().catch(fail);
