// Drive the demo page in headless Chromium (Debian's /usr/bin/chromium) with playwright-core:
// open it, wait until the stream is done, write window.realmRun as JSON and a screenshot.
//   node drive.mjs --url http://127.0.0.1:8000/?auto=1 --out run.json [--screenshot page.png]
//                  [--reload] [--reset] [--image PNG] [--restore NPZ] [--webgpu] [--timeout 300]
//                  [--memory]
// --webgpu starts Chromium with WebGPU on (--enable-unsafe-webgpu: on Linux, headless Chromium
// offers no adapter without it; with it, and no GPU, Dawn's SwiftShader (Vulkan on the CPU)).
// --memory (Linux): after the first run, each Chromium process's peak RSS (VmHWM, KiB) by its
// --type (renderer, gpu-process, …; "browser" for the main one), and the page's JS heap.
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";
import { PARAMS_NAME, VELOCITY_NAME } from "../../clients/js/contract.js";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    out: { type: "string" },
    screenshot: { type: "string" },
    reload: { type: "boolean", default: false },
    image: { type: "string" },
    restore: { type: "string" },
    reset: { type: "boolean", default: false },
    webgpu: { type: "boolean", default: false },
    memory: { type: "boolean", default: false },
    timeout: { type: "string", default: "300" },
    browser: { type: "string", default: process.env.CHROMIUM ?? "/usr/bin/chromium" },
  },
});
if (!args.url || !args.out) {
  console.error("usage: node drive.mjs --url URL --out FILE [--screenshot PNG] [--reload]");
  process.exit(2);
}
const timeout = Number(args.timeout) * 1000;

/** @returns {{pid: number, type: string, hwmKiB: number, rssKiB: number}[]} this process's descendants' peak and current RSS */
function processPeaks() {
  /** @type {Map<number, number>} */
  const parent = new Map();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      parent.set(Number(entry), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch { /* gone meanwhile */ }
  }
  const ours = (/** @type {number} */ pid) => {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) if (p === process.pid) return true;
    return false;
  };
  const peaks = [];
  for (const pid of parent.keys()) {
    if (!ours(pid)) continue;
    try {
      // Chromium rewrites its processes' titles: the arguments may be joined by spaces.
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const hwm = status.match(/^VmHWM:\s+(\d+)/m);
      const rss = status.match(/^VmRSS:\s+(\d+)/m);
      const type = cmdline.match(/--type=([\w-]+)/)?.[1] ?? (cmdline.includes("chrom") ? "browser" : "other");
      if (hwm && rss) peaks.push({ pid, type, hwmKiB: Number(hwm[1]), rssKiB: Number(rss[1]) });
    } catch { /* gone meanwhile */ }
  }
  return peaks;
}
const browser = await chromium.launch({
  executablePath: args.browser,
  headless: true,
  // No background networking: this machine's network is closed, and nothing else should run.
  args: ["--no-sandbox", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ...(args.webgpu ? ["--enable-unsafe-webgpu"] : ["--disable-gpu"])],
});
// failed: every request answered with an HTTP error or not answered at all ("404 URL").
const result = { console: [], failed: [], runs: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  if (args.memory) {
    // Every WebAssembly memory the page makes or instantiates, to read its size at the end
    // (a module's memory only grows: its size then is its peak).
    await page.addInitScript(() => {
      const memories = [];
      globalThis.__realmWasmMemories = memories;
      const Memory = WebAssembly.Memory;
      WebAssembly.Memory = new Proxy(Memory, {
        construct(target, argv) { const m = new target(...argv); memories.push(m); return m; },
      });
      const keep = (/** @type {any} */ r) => {
        const exports = (r.instance ?? r).exports;
        for (const v of Object.values(exports ?? {})) if (v instanceof Memory && !memories.includes(v)) memories.push(v);
        return r;
      };
      for (const name of ["instantiate", "instantiateStreaming"]) {
        const original = WebAssembly[name];
        WebAssembly[name] = (...argv) => original.apply(WebAssembly, argv).then(keep);
      }
    });
  }
  page.on("console", (msg) => result.console.push(`${msg.type()}: ${msg.text()}`));
  page.on("pageerror", (err) => result.console.push(`pageerror: ${err.message}`));
  page.on("response", (r) => { if (r.status() >= 400) result.failed.push(`${r.status()} ${r.url()}`); });
  page.on("requestfailed", (r) => result.failed.push(`${r.failure()?.errorText ?? "failed"} ${r.url()}`));
  const wait = async () => {
    await page.waitForFunction(() => globalThis.realmRun?.done, null, { timeout, polling: 200 });
    result.runs.push(await page.evaluate(() => globalThis.realmRun));
  };
  await page.goto(args.url);
  await wait();
  if (args.memory) {
    // performance.memory is Chromium's own (the JS heap only: WebAssembly's memory is not in it).
    const heap = await page.evaluate(() => {
      const m = /** @type {any} */ (performance).memory;
      return m ? { usedJSHeapSize: m.usedJSHeapSize, totalJSHeapSize: m.totalJSHeapSize } : null;
    });
    const wasm = await page.evaluate(() => (globalThis.__realmWasmMemories ?? []).map((m) => m.buffer.byteLength));
    result.memory = { processes: processPeaks(), jsHeap: heap, wasmBytes: wasm };
  }
  if (args.image) {
    // A user's picture through the file picker: adapt on it, record what the page did.
    await page.setInputFiles("#image", args.image);
    await page.waitForFunction(() => globalThis.realmRun.images.length > 0 || globalThis.realmRun.error, null, { timeout });
    result.runs[result.runs.length - 1] = await page.evaluate(() => globalThis.realmRun);
  }
  if (args.restore) {
    // A state file through "Restore state" (one RealmRuntime or the Node app wrote).
    await page.setInputFiles("#restore", args.restore);
    await page.waitForFunction(() => /^(restored|could not restore)/.test(document.getElementById("status").textContent), null, { timeout });
    result.restoredFile = await page.evaluate(async () => ({
      status: document.getElementById("status").textContent,
      counters: globalThis.realmClient.counters,
      state: Array.from(await globalThis.realmClient.saveState()),
    }));
  }
  if (args.reset) {
    // The Reset button: back to the exported parameters, no EMA, zero counters and momentum.
    await page.click("#reset");
    await page.waitForFunction(() => globalThis.realmClient.counters.samples === 0, null, { timeout });
    // Runs in the page: the names it needs go in as an argument.
    result.afterReset = await page.evaluate(async ([params, velocity]) => {
      const c = globalThis.realmClient;
      const host = await c.hostState();
      return {
        counters: c.counters,
        paramsAreSource: host[params].every((v, i) => v === c.source[i]),
        momentumIsZero: host[velocity].every((v) => v === 0),
        ema: c.ema,
        shown: document.getElementById("sample-count").textContent,
      };
    }, [PARAMS_NAME, VELOCITY_NAME]);
  }
  if (args.screenshot) await page.screenshot({ path: args.screenshot, fullPage: true });
  if (args.reload) {
    // Same page without auto-run and without fresh=1: the stored state must come back.
    const again = new URL(args.url);
    again.searchParams.delete("auto");
    again.searchParams.delete("fresh");
    await page.goto(again.href);
    await wait();
  }
} finally {
  await browser.close();
  writeFileSync(args.out, JSON.stringify(result));
}

// Per-sample latency in the page (after the first, which compiles the graphs).
const log = result.runs[0]?.log ?? [];
const stats = (/** @type {number[]} */ xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? `median ${s[Math.floor(s.length / 2)].toFixed(2)} ms, p90 ${s[Math.floor(0.9 * (s.length - 1))].toFixed(2)} ms (n=${s.length})` : "n=0";
};
const steady = log.slice(1);
console.log(`samples: ${log.length}; error: ${result.runs[0]?.error ?? "none"}`);
console.log(`all samples: ${stats(steady.map((r) => r.ms))}`);
console.log(`updating samples: ${stats(steady.filter((r) => r.updated).map((r) => r.ms))}`);
console.log(`skipped samples: ${stats(steady.filter((r) => !r.updated).map((r) => r.ms))}`);
