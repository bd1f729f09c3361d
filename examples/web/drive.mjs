// Drive the demo page in headless Chromium (Debian's /usr/bin/chromium) with playwright-core:
// open it, wait until the stream is done, write window.realmRun as JSON and a screenshot.
//   node drive.mjs --url http://127.0.0.1:8000/?auto=1 --out run.json [--screenshot page.png]
//                  [--reload] [--reset] [--image PNG] [--restore NPZ] [--webgpu] [--timeout 300]
// --webgpu starts Chromium with WebGPU on (--enable-unsafe-webgpu: on Linux, headless Chromium
// offers no adapter without it; with it, and no GPU, Dawn's SwiftShader (Vulkan on the CPU)).
import { writeFileSync } from "node:fs";
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
    timeout: { type: "string", default: "300" },
    browser: { type: "string", default: process.env.CHROMIUM ?? "/usr/bin/chromium" },
  },
});
if (!args.url || !args.out) {
  console.error("usage: node drive.mjs --url URL --out FILE [--screenshot PNG] [--reload]");
  process.exit(2);
}
const timeout = Number(args.timeout) * 1000;
const browser = await chromium.launch({
  executablePath: args.browser,
  headless: true,
  // No background networking: this machine's network is closed, and nothing else should run.
  args: ["--no-sandbox", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ...(args.webgpu ? ["--enable-unsafe-webgpu"] : ["--disable-gpu"])],
});
const result = { console: [], runs: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  page.on("console", (msg) => result.console.push(`${msg.type()}: ${msg.text()}`));
  page.on("pageerror", (err) => result.console.push(`pageerror: ${err.message}`));
  const wait = async () => {
    await page.waitForFunction(() => globalThis.realmRun?.done, null, { timeout, polling: 200 });
    result.runs.push(await page.evaluate(() => globalThis.realmRun));
  };
  await page.goto(args.url);
  await wait();
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
