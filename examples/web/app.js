// @ts-check
/**
 * The demo page: streams shifted digits through RealmWebClient, shows what adaptation does,
 * keeps the state in IndexedDB. URL parameters: artifacts=<dir> (default "artifacts"),
 * stream=<dir> (default "stream"), auto=1 (run the whole stream at once), limit=<n>,
 * persist=0 (neither read nor write IndexedDB), fresh=1 (ignore a stored state once).
 * `window.realmRun` exposes the per-step log for the test driver.
 */

import { RealmWebClient } from "./realm-client.js";
import { digitsInput } from "./preprocess.js";

/** @type {any} */
const ort = /** @type {any} */ (globalThis).ort;
const params = new URLSearchParams(location.search);
const ARTIFACTS = params.get("artifacts") ?? "artifacts";
const STREAM = params.get("stream") ?? "stream";
const AUTO = params.get("auto") === "1";
const PERSIST = params.get("persist") !== "0";
const FRESH = params.get("fresh") === "1";

/** @type {{ready: boolean, done: boolean, error: string | null, restored: any, log: any[], images: any[], summary: any}} */
const run = { ready: false, done: false, error: null, restored: null, log: [], images: [], summary: null };
/** @type {any} */ (globalThis).realmRun = run;

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @param {string} text @param {boolean} [error] */
function status(text, error = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", error);
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

/**
 * @param {HTMLCanvasElement} canvas
 * @param {{values: number[], color: string}[]} series
 * @param {[number, number] | null} range fixed y range, or null to fit
 */
function plot(canvas, series, range) {
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const { width: W, height: H } = canvas;
  const pad = 34;
  ctx.clearRect(0, 0, W, H);
  const all = series.flatMap((s) => s.values).filter(Number.isFinite);
  if (!all.length) return;
  let [lo, hi] = range ?? [Math.min(...all), Math.max(...all)];
  if (hi - lo < 1e-6) { lo -= 0.01; hi += 0.01; }
  const n = Math.max(...series.map((s) => s.values.length), 2);
  ctx.strokeStyle = "#ccd3df"; ctx.fillStyle = "#5a6578"; ctx.font = "11px system-ui";
  ctx.strokeRect(pad, 6, W - pad - 6, H - pad);
  const label = (/** @type {number} */ v) => String(Number(v.toPrecision(3)));
  ctx.fillText(label(hi), 2, 14); ctx.fillText(label(lo), 2, H - pad + 4);
  ctx.fillText("sample", W - 50, H - 8); ctx.fillText(String(n), W - 80, H - 20);
  for (const s of series) {
    ctx.strokeStyle = s.color; ctx.lineWidth = 1.5; ctx.beginPath();
    s.values.forEach((v, i) => {
      const x = pad + ((W - pad - 6) * i) / (n - 1);
      const y = 6 + (H - pad) * (1 - (v - lo) / (hi - lo));
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
}

/** @param {Float32Array} x (1, S, S) normalised input @param {{mean: number, std: number, size: number}} prep */
function drawSample(x, prep) {
  const canvas = /** @type {HTMLCanvasElement} */ ($("sample"));
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const img = ctx.createImageData(prep.size, prep.size);
  for (let k = 0; k < prep.size * prep.size; k++) {
    const v = Math.max(0, Math.min(255, Math.round((x[k] * prep.std + prep.mean) * 255)));
    img.data.set([v, v, v, 255], 4 * k);
  }
  const tmp = document.createElement("canvas");
  tmp.width = tmp.height = prep.size;
  /** @type {CanvasRenderingContext2D} */ (tmp.getContext("2d")).putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, 0, 0, canvas.width, canvas.height);
}

// ------------------------------------------------------------------ main

async function main() {
  if (!ort?.TrainingSession) throw new Error("onnxruntime-web (training) did not load: ort/ort.training.wasm.min.js missing?");
  ort.env.wasm.numThreads = 1; // no cross-origin isolation needed, deterministic reductions
  ort.env.wasm.wasmPaths = new URL("ort/", location.href).href;
  status(`checking ${ARTIFACTS}/realm.json and every file's checksum…`);
  const client = await RealmWebClient.load(ort, ARTIFACTS);
  const meta = await (await fetch(`${STREAM}/stream.json`)).json();
  const data = new Float32Array(await (await fetch(`${STREAM}/stream.f32`)).arrayBuffer());
  const size = meta.shape.reduce((/** @type {number} */ a, /** @type {number} */ b) => a * b, 1);
  const total = Math.min(meta.labels.length, Number(params.get("limit") ?? meta.labels.length));
  const key = `${client.checkpointId}:${meta.id}`;
  $("stream-name").textContent = `${meta.corruption} (severity ${meta.severity}), ${total} samples`;

  /** @type {{pos: number, correct: number, acc: number[], alpha: number[], lambda: number[], ms: number[]}} */
  let view = { pos: 0, correct: 0, acc: [], alpha: [], lambda: [], ms: [] };
  if (PERSIST && !FRESH) {
    const saved = await store(key);
    if (saved) {
      await client.restoreState(saved.state);
      view = saved.view;
      run.restored = { pos: view.pos, counters: { ...client.counters } };
    }
  }

  const refresh = () => {
    $("samples").textContent = String(view.pos);
    $("accuracy").textContent = view.pos ? `${((100 * view.correct) / view.pos).toFixed(1)} %` : "–";
    $("updates").textContent = String(client.counters.updates);
    $("alpha").textContent = client.alpha === null ? "–" : client.alpha.toFixed(4);
    $("lambda").textContent = client.lambda === null ? "–" : client.lambda.toFixed(4);
    const recent = view.ms.slice(-50).sort((a, b) => a - b);
    $("latency").textContent = recent.length ? recent[Math.floor(recent.length / 2)].toFixed(2) : "–";
    plot(/** @type {HTMLCanvasElement} */ ($("plot-accuracy")), [{ values: view.acc, color: "#2a6fdb" }], [0, 100]);
    plot(/** @type {HTMLCanvasElement} */ ($("plot-alpha")), [{ values: view.alpha, color: "#e8772e" }], null);
    plot(/** @type {HTMLCanvasElement} */ ($("plot-lambda")), [{ values: view.lambda, color: "#2a6fdb" }], null);
  };
  const save = async () => { if (PERSIST) await store(key, { state: client.saveState(), view }); };

  /** One sample of the stream: predict, adapt, record. */
  const step = async () => {
    const i = view.pos;
    const x = data.subarray(i * size, (i + 1) * size);
    const r = await client.adapt(new Float32Array(x));
    const label = meta.labels[i];
    view.pos += 1;
    view.correct += r.top1 === label ? 1 : 0;
    view.acc.push((100 * view.correct) / view.pos);
    if (r.alpha !== null) view.alpha.push(r.alpha);
    if (r.lambda !== null) view.lambda.push(r.lambda);
    view.ms.push(r.ms);
    run.log.push({ index: i, top1: r.top1, label, selected: r.selected, updated: r.updated, reason: r.reason, cosine: r.cosine, alpha: r.alpha, lambda: r.lambda, ms: r.ms, logits: Array.from(r.logits) });
    drawSample(x, meta.prep);
    $("sample-caption").textContent = `#${i}: predicted ${r.top1}, label ${label} · ${r.reason}`;
  };

  let running = false;
  const runStream = async () => {
    running = true;
    $("run").textContent = "Pause";
    while (running && view.pos < total) {
      await step();
      if (view.pos % 10 === 0 || view.pos === total) { refresh(); await save(); await new Promise((r) => setTimeout(r, 0)); }
    }
    running = false;
    $("run").textContent = view.pos < total ? "Run stream" : "Stream done";
    refresh();
    await save();
  };

  const buttons = ["run", "step", "reset", "download", "restore", "image", "camera"];
  buttons.forEach((id) => /** @type {HTMLButtonElement} */ ($(id)).removeAttribute("disabled"));
  $("run").onclick = () => { if (running) running = false; else runStream().catch(fail); };
  $("step").onclick = () => { if (!running && view.pos < total) step().then(() => { refresh(); return save(); }).catch(fail); };
  $("reset").onclick = async () => {
    running = false;
    client.reset();
    view = { pos: 0, correct: 0, acc: [], alpha: [], lambda: [], ms: [] };
    refresh();
    await save();
    status("reset to the exported model");
  };
  $("download").onclick = () => {
    const blob = new Blob([JSON.stringify(client.saveState())], { type: "application/json" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = "realm-web-state.json";
    a.click();
  };
  /** @type {HTMLInputElement} */ ($("restore")).onchange = async (ev) => {
    const file = /** @type {HTMLInputElement} */ (ev.target).files?.[0];
    if (!file) return;
    try {
      await client.restoreState(JSON.parse(await file.text()));
      refresh();
      await save();
      status(`restored ${file.name}: ${client.counters.samples} samples, ${client.counters.updates} updates`);
    } catch (err) { status(`could not restore ${file.name}: ${err}`, true); }
  };
  /** A picture from the file picker, or from the camera where the browser offers one. */
  const ownImage = async (/** @type {Event} */ ev) => {
    const file = /** @type {HTMLInputElement} */ (ev.target).files?.[0];
    if (!file) return;
    const bitmap = await createImageBitmap(file);
    const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
    const ctx = /** @type {OffscreenCanvasRenderingContext2D} */ (canvas.getContext("2d"));
    ctx.drawImage(bitmap, 0, 0);
    const pixels = ctx.getImageData(0, 0, bitmap.width, bitmap.height).data;
    const { input } = digitsInput(pixels, bitmap.height, bitmap.width, meta.prep);
    const r = await client.adapt(input);
    drawSample(input, meta.prep);
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
  status(`ready: ${client.manifest.model?.name ?? "model"}, ${client.manifest.config.method} (${client.manifest.config.preset_name}), ${client.layout.total} adapted values${restoredNote}`);
  if (AUTO) {
    await runStream();
    run.summary = {
      counters: { ...client.counters },
      accuracy: view.pos ? (100 * view.correct) / view.pos : null,
      params: Array.from(client.params),
      momentum: Array.from(client.momentum),
      ema: client.ema ? Array.from(client.ema) : null,
      names: client.layout.names,
      ort: ort.env.versions,
    };
    status(`done: ${view.pos} samples, ${client.counters.updates} updates, running accuracy ${((100 * view.correct) / view.pos).toFixed(1)} %`);
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
